/*
 * A test publisher of the OTEP 4947 thread context record (otel_thread_ctx_v1).
 * The same source is built into the executable or into a shared library, so
 * that perfprof's reader is tested against static TLS (the executable, a
 * library loaded at start-up) and dynamic TLS (a dlopen'ed library).
 */
#ifndef PERFPROF_THREADCTX_H
#define PERFPROF_THREADCTX_H

#include <stdint.h>

/* The record, byte-packed as OTEP 4947 lays it out (28-byte header, then
 * attrs-data). Aligned to 8 only so that the writer's stores are cheap. */
struct otel_thread_ctx_record {
	uint8_t trace_id[16];
	uint8_t span_id[8];
	uint8_t valid;
	uint8_t trace_flags;
	uint16_t attrs_data_size;
	uint8_t attrs_data[100];
} __attribute__((packed, aligned(8)));

/* threadctx_init fills record i (0 or 1) of the pointer-swapping mode and the
 * fixed record of the valid-flag mode. */
void threadctx_init(int i, const uint8_t trace_id[16], const uint8_t span_id[8], const char *route);

/* threadctx_attach makes span i (0, 1) the thread's active context by pointing
 * otel_thread_ctx_v1 at its record; -1 detaches (NULL). */
void threadctx_attach(int i);

/* threadctx_rewrite makes span i active by rewriting one fixed record in
 * place, with valid = 0 while it is being written. */
void threadctx_rewrite(int i);

/* threadctx_tear leaves the fixed record attached and half rewritten (valid =
 * 0, span id of i, trace id of the other), as a writer stopped in the middle
 * of an update would. */
void threadctx_tear(int i);

/* threadctx_var returns the address of this thread's otel_thread_ctx_v1. */
void *threadctx_var(void);

#endif
