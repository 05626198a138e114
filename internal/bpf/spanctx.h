/* Types shared by spanctx.bpf.c and the Go loader (internal/bpf). The Go
 * side uses the declarations bpf2go generates from these; a test checks
 * their sizes. */
#ifndef PERFPROF_SPANCTX_H
#define PERFPROF_SPANCTX_H

#include <linux/types.h>

/* Where a goroutine's labels are in one Go process. Filled from
 * goruntime.Layout. */
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

/* Where a process keeps its OTEP 4947 otel_thread_ctx_v1 pointer,
 * relative to each thread's pointer (FS base). Filled from
 * otelctx.TLSVar. */
struct tls_layout {
	__s64 tp_offset; /* static TLS (module 0): at FS base + tp_offset */
	__u64 module;    /* dynamic TLS: the module's index in the thread's DTV */
	__u64 offset;    /* and the variable's offset in the module's block */
};

/* How a target process says which span a thread runs. */
enum {
	TARGET_PLAIN = 0, /* it does not: sampled, no record written */
	TARGET_GO = 1,    /* the running goroutine's pprof labels */
	TARGET_TLS = 2,   /* the thread's OTEP 4947 context record */
	TARGET_NODE = 3,  /* the same record, reached from the thread's Node.js
			   * discovery struct (schema nodejs_v1_dev) through V8's
			   * heap; the tls layout locates that struct */
};

/* Value of the targets map, keyed by pid. */
struct target {
	__u32 kind; /* TARGET_* */
	__u32 _pad;
	struct tls_layout tls;
	struct go_layout go;
	/* The scheduler program's rate window (max_rate): groups written
	 * since window. Shared by the CPUs: updated atomically, reset racily
	 * (a reset lost lets a few more through, never fewer). */
	__u64 window;
	__u64 window_count;
};

/* Record flags. */
enum {
	SC_SPAN = 1 << 0,      /* span_id holds the running span's id */
	SC_TRACE = 1 << 1,     /* trace_id holds its trace id */
	SC_LABELS = 1 << 2,    /* the goroutine had labels; the thread a valid record */
	SC_NO_G = 1 << 3,      /* no goroutine (nil g, m or m.curg), or no thread pointer */
	SC_FAULT = 1 << 4,     /* a read of the process's memory failed */
	SC_BAD_VALUE = 1 << 5, /* a key matched, its value was not hex of the right length */
	SC_NOT_VALID = 1 << 6, /* the thread's record was being written (valid != 1) */
	SC_TLS = 1 << 7,       /* read from a thread context record, not Go labels */
	SC_SWITCH = 1 << 8,    /* the sample of a switch-out, not of cpu-clock */
	SC_IDLE = 1 << 9,      /* with SC_NO_G: a Go thread between goroutines (g0, nil m.curg) */
	SC_CPU_DELTA = 1 << 10, /* cpu_delta holds the thread's CPU time since its previous sample */
	SC_NO_READ = 1 << 11,  /* the span was not read (a plain target): the record is for cpu_delta */
	SC_WALK = 1 << 12,     /* a Node.js walk did not validate (counted by reason): no span read */
	SC_ATTRS = 1 << 13,    /* a ctx_attrs follows: the record's trace flags and attributes */
};

/* SC_ATTRS_MAX bounds the bytes of a record's attrs-data copied per
 * sample: a route and a few short values. A longer attrs-data is cut
 * there (attrs_size says how long it was); user space keeps the entries
 * that are whole. */
#define SC_ATTRS_MAX 128

/* The trace flags and attributes of a thread's OTEP 4947 record. */
struct ctx_attrs {
	__u8 trace_flags;
	__u8 _pad;
	__u16 size;             /* the record's attrs_size */
	__u8 data[SC_ATTRS_MAX]; /* its first min(size, SC_ATTRS_MAX) bytes */
};

/* One record per sample of a target, in the records ring buffer. */
struct sample_labels {
	__u64 ktime;        /* bpf_ktime_get_ns: CLOCK_MONOTONIC */
	__u32 pid;
	__u32 tid;
	__u32 cpu;
	__u32 flags;        /* SC_* */
	__u8 span_id[8];
	__u8 trace_id[16];
	__u64 cpu_delta;    /* SC_CPU_DELTA: ns on CPU since the thread's previous sample */
};

/* The record of a sample of a thread-context target (TARGET_TLS,
 * TARGET_NODE): the same, and the record's attributes (SC_ATTRS). The
 * other kinds write the short one: a Go target's labels are read for the
 * ids only. */
struct sample_ctx {
	struct sample_labels l;
	struct ctx_attrs attrs;
};

/* Indices of the counters in the per-CPU stats value. */
enum {
	STAT_RUNS,        /* samples of targets */
	STAT_DROPPED,     /* records lost: ring buffer full */
	STAT_NO_G,        /* no goroutine on the thread, or no thread pointer */
	STAT_NO_LABELS,   /* goroutine without labels; thread without a record */
	STAT_NO_SPAN,     /* labels or record, but no span */
	STAT_BAD_VALUE,   /* span or trace key with a malformed value */
	STAT_FAULTS,      /* failed reads of process memory */
	STAT_NOT_VALID,   /* a thread's record being written */
	STAT_OTHERS,      /* samples of other processes, dropped (drop_others) */
	STAT_SCHED_DROPPED, /* off-CPU groups lost: sched_records full */
	STAT_SCHED_SHORT,   /* off periods below min_block, not off-CPU time */
	STAT_SCHED_DEFERRED, /* groups held back by max_rate, written with a later one */
	STAT_SCHED_CAPTURED, /* switch-outs whose stack and span were read */
	STAT_SCHED_UNCAPTURED, /* switch-outs that were not (capture_gap, capture_every) */
	STAT_SCHED_NO_STATE, /* target threads the program could not keep (task storage refused) */
	/* Node.js walks that did not validate (SC_WALK), by the step that
	 * failed: */
	STAT_NODE_SLOT,    /* the struct's record slot offset is 0 or not a multiple of 8 */
	STAT_NODE_TAG,     /* a frame, table or value that is not a heap object */
	STAT_NODE_REHASH,  /* the frame's table was being rehashed (its element count a pointer) */
	STAT_NODE_TABLE,   /* table counts out of bounds (buckets, elements, length) */
	STAT_NODE_CHAIN,   /* a bucket chain longer than the walk follows */
	STAT_MAX,
};

/* What pidns_self found of the thread that ran it. */
struct pidns_check {
	__u32 level; /* its pid namespace's depth below the initial one */
	__u32 inum;  /* that namespace's inode number */
	__u32 pid;   /* its process and thread ids there */
	__u32 tid;
};

#define SC_KEY_MAX 32    /* longest label key matched */
#define SC_LABELS_MAX 16 /* labels looked at per goroutine */

#endif
