#include <stddef.h>
#include <string.h>

#include "threadctx.h"

/* Initialized, so in .tdata, which comes before otel_thread_ctx_v1 in .tbss:
 * the variable's offset in its block is then not 0. */
__thread unsigned long threadctx_switches[3] = {1};

/* The variable readers look up in .dynsym. The builds export it from an
 * executable with -Wl,--export-dynamic-symbol; a shared library exports it by
 * default. */
__attribute__((visibility("default"))) __thread struct otel_thread_ctx_record *otel_thread_ctx_v1;

static struct otel_thread_ctx_record spans[2];
static struct otel_thread_ctx_record fixed;
static struct otel_thread_ctx_record init[2];

/* Only the thread itself writes its record and readers read a stopped
 * thread, so ordering against the compiler is all that is needed (OTEP 4947,
 * "Concurrency model"): a signal fence costs nothing at run time. */
#define COMPILER_FENCE() __atomic_signal_fence(__ATOMIC_SEQ_CST)

void threadctx_init(int i, const uint8_t trace_id[16], const uint8_t span_id[8], const char *route)
{
	struct otel_thread_ctx_record *r = &init[i];
	size_t n = strlen(route);

	memset(r, 0, sizeof(*r));
	memcpy(r->trace_id, trace_id, 16);
	memcpy(r->span_id, span_id, 8);
	r->trace_flags = 1; /* sampled */
	/* attrs-data: key index 0 (http.route), then key 1 (user) */
	r->attrs_data[0] = 0;
	r->attrs_data[1] = (uint8_t)n;
	memcpy(&r->attrs_data[2], route, n);
	r->attrs_data[2 + n] = 1;
	r->attrs_data[3 + n] = 4;
	memcpy(&r->attrs_data[4 + n], i ? "bob!" : "amy!", 4);
	r->attrs_data_size = (uint16_t)(4 + n + 4);
	r->valid = 1;
	spans[i] = *r;
}

void threadctx_attach(int i)
{
	struct otel_thread_ctx_record *volatile *var = &otel_thread_ctx_v1;

	threadctx_switches[0]++;
	COMPILER_FENCE();
	*var = i < 0 ? NULL : &spans[i];
	COMPILER_FENCE();
}

void threadctx_rewrite(int i)
{
	volatile uint8_t *valid = &fixed.valid;

	otel_thread_ctx_v1 = &fixed;
	*valid = 0;
	COMPILER_FENCE();
	memcpy(fixed.trace_id, init[i].trace_id, sizeof(fixed.trace_id));
	memcpy(fixed.span_id, init[i].span_id, sizeof(fixed.span_id));
	fixed.trace_flags = init[i].trace_flags;
	fixed.attrs_data_size = init[i].attrs_data_size;
	memcpy(fixed.attrs_data, init[i].attrs_data, sizeof(fixed.attrs_data));
	COMPILER_FENCE();
	*valid = 1;
}

void threadctx_tear(int i)
{
	otel_thread_ctx_v1 = &fixed;
	fixed.valid = 0;
	COMPILER_FENCE();
	memcpy(fixed.span_id, init[i].span_id, sizeof(fixed.span_id));
	memcpy(fixed.trace_id, init[1 - i].trace_id, sizeof(fixed.trace_id));
}

void *threadctx_var(void)
{
	return &otel_thread_ctx_v1;
}
