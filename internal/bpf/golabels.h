/* Types shared by golabels.bpf.c and the Go loader (internal/bpf). The Go
 * side uses the declarations bpf2go generates from these; a test checks
 * their sizes. */
#ifndef PERFPROF_GOLABELS_H
#define PERFPROF_GOLABELS_H

#include <linux/types.h>

/* Where a goroutine's labels are in one process: value of the targets
 * map, keyed by pid. Filled from goruntime.Layout. */
struct go_layout {
	__s32 tls_g;       /* g pointer at FS base + tls_g */
	__u32 g_m;         /* offsetof(runtime.g, m) */
	__u32 g_labels;    /* offsetof(runtime.g, labels) */
	__u32 m_curg;      /* offsetof(runtime.m, curg) */
	__u32 g_goid;      /* offsetof(runtime.g, goid): 0 in g0 and gsignal */
	__u32 label_list;  /* offset of the []label in *g.labels */
	__u32 label_size;  /* sizeof(label); 0: do not read the labels */
	__u32 label_key;   /* offsetof(label, key), a Go string */
	__u32 label_value; /* offsetof(label, value), a Go string */
};

/* Record flags. */
enum {
	GL_SPAN = 1 << 0,       /* span_id holds the span label */
	GL_TRACE = 1 << 1,      /* trace_id holds the trace label */
	GL_LABELS = 1 << 2,     /* the goroutine had labels */
	GL_NO_G = 1 << 3,       /* no goroutine: nil g, m or m.curg */
	GL_FAULT = 1 << 4,      /* a read of the process's memory failed */
	GL_BAD_VALUE = 1 << 5,  /* a key matched, its value was not hex of the right length */
};

/* One record per sample of a target, in the records ring buffer. */
struct sample_labels {
	__u64 ktime;        /* bpf_ktime_get_ns: CLOCK_MONOTONIC */
	__u32 pid;
	__u32 tid;
	__u32 cpu;
	__u32 flags;        /* GL_* */
	__u8 span_id[8];
	__u8 trace_id[16];
};

/* Indices of the counters in the per-CPU stats value. */
enum {
	STAT_RUNS,        /* samples of targets */
	STAT_DROPPED,     /* records lost: ring buffer full */
	STAT_NO_G,        /* no goroutine on the thread */
	STAT_NO_LABELS,   /* goroutine without labels */
	STAT_NO_SPAN,     /* labels, but no span key */
	STAT_BAD_VALUE,   /* span or trace key with a malformed value */
	STAT_FAULTS,      /* failed reads of process memory */
	STAT_MAX,
};

#define GL_KEY_MAX 32    /* longest label key matched */
#define GL_LABELS_MAX 16 /* labels looked at per goroutine */

#endif
