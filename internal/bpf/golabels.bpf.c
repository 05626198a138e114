//go:build ignore

// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* golabels: attached to perfprof's cpu-clock sampling events
 * (PERF_EVENT_IOC_SET_BPF), it runs in the overflow handler of every
 * sample, on the sampled thread, just before perf writes the sample. For a
 * thread of a target process (the targets map, keyed by pid) it finds the
 * goroutine the thread is running, looks up the span and trace keys in its
 * pprof labels, and writes one sample_labels record to the records ring
 * buffer. It always returns 1: the sample is kept, whatever happened. */

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "kernel.h"
#include "golabels.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Label keys, set by the loader before loading (zero-padded). */
volatile const __u64 span_key[GL_KEY_MAX / 8] = {0};
volatile const __u32 span_key_len = 0;
volatile const __u64 trace_key[GL_KEY_MAX / 8] = {0};
volatile const __u32 trace_key_len = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096); /* set by the loader */
	__type(key, __u32);        /* pid */
	__type(value, struct go_layout);
} targets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024); /* set by the loader */
} records SEC(".maps");

/* One per-CPU value holding every counter: one lookup, one cache line. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64[STAT_MAX]);
} stats SEC(".maps");

/* Scratch space for a goroutine's labels: too big for the stack. */
#define LABEL_BYTES 512
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u8[LABEL_BYTES]);
} scratch SEC(".maps");

/* Force the types into BTF for bpf2go. */
const struct sample_labels *unused_sample_labels __attribute__((unused));

/* A Go string header. */
struct go_string {
	const char *ptr;
	__s64 len;
};

/* A Go slice header. */
struct go_slice {
	const void *ptr;
	__s64 len;
	__s64 cap;
};

static __always_inline int read_user(void *dst, __u32 size, const void *src)
{
	return bpf_probe_read_user(dst, size, src);
}

/* key_is reports whether the Go string k equals the configured key
 * (want, wantlen). It reads exactly wantlen bytes: reading past the end of
 * the string could fault at the end of a mapping and miss a match. */
static __always_inline int key_is(const struct go_string *k, volatile const __u64 *want, __u32 wantlen,
				  int *fault)
{
	__u64 buf[GL_KEY_MAX / 8] = {0};

	if (wantlen == 0 || wantlen > GL_KEY_MAX || k->len != wantlen)
		return 0;
	if (read_user(buf, wantlen, k->ptr)) {
		*fault = 1;
		return 0;
	}
	for (int i = 0; i < GL_KEY_MAX / 8; i++)
		if (buf[i] != want[i])
			return 0;
	return 1;
}

/* unhex decodes 2*n hex digits (either case) from s into out[0:n]. */
static __always_inline int unhex(const __u8 *s, __u8 *out, int n)
{
	for (int i = 0; i < 2 * n; i++) {
		__u8 c = s[i], v;
		if (c >= '0' && c <= '9')
			v = c - '0';
		else if (c >= 'a' && c <= 'f')
			v = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			v = c - 'A' + 10;
		else
			return -1;
		if (i & 1)
			out[i / 2] |= v;
		else
			out[i / 2] = v << 4;
	}
	return 0;
}

/* read_id decodes the Go string v, which must be exactly 2*n hex
 * digits, into out. */
static __always_inline __u32 read_id(const struct go_string *v, __u8 *out, int n)
{
	__u8 buf[32];

	if (v->len != 2 * n)
		return GL_BAD_VALUE;
	if (read_user(buf, 2 * n, v->ptr))
		return GL_FAULT;
	if (unhex(buf, out, n))
		return GL_BAD_VALUE;
	return 0;
}

static __always_inline __u32 read_labels(const struct go_layout *l, struct sample_labels *r)
{
	/* A BTF pointer: the load below is a plain one, no helper call. */
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 fsbase = task->thread.fsbase;
	void *g = 0, *m = 0, *curg = 0, *labels = 0;
	__s64 goid = 0;
	struct go_slice list;
	int fault = 0;
	__u32 flags = 0;

	if (!fsbase)
		return GL_NO_G;
	if (read_user(&g, sizeof(g), (void *)(fsbase + (__s64)l->tls_g)))
		return GL_FAULT;
	if (!g)
		return GL_NO_G;
	/* A goroutine with an id is a user goroutine, and so m.curg: its
	 * labels are one read away. g0 and gsignal (id 0) run for m.curg,
	 * the goroutine they interrupted, or for none between goroutines. */
	if (read_user(&goid, sizeof(goid), g + l->g_goid))
		return GL_FAULT;
	if (goid) {
		curg = g;
	} else {
		if (read_user(&m, sizeof(m), g + l->g_m))
			return GL_FAULT;
		if (!m)
			return GL_NO_G;
		if (read_user(&curg, sizeof(curg), m + l->m_curg))
			return GL_FAULT;
		if (!curg)
			return GL_NO_G;
	}
	if (read_user(&labels, sizeof(labels), curg + l->g_labels))
		return GL_FAULT;
	if (!labels)
		return 0;
	if (!l->label_size) /* a layout the program does not read */
		return GL_LABELS;
	if (read_user(&list, sizeof(list), labels + l->label_list))
		return GL_FAULT;
	flags |= GL_LABELS;

	/* One read for the labels (the slice's backing array, up to
	 * LABEL_BYTES), then the keys that have the right length: every read
	 * of the process's memory costs some hundreds of nanoseconds here,
	 * mostly TLB and cache misses. */
	__u32 zero = 0;
	__u8 *buf = bpf_map_lookup_elem(&scratch, &zero);
	__u64 size = l->label_size, n = list.len;
	if (!buf || size < 32 || size > LABEL_BYTES)
		return flags;
	if (n > LABEL_BYTES / size)
		n = LABEL_BYTES / size;
	if (n > GL_LABELS_MAX)
		n = GL_LABELS_MAX;
	__u64 bytes = n * size;
	if (bytes > LABEL_BYTES)
		return flags;
	if (read_user(buf, bytes, list.ptr))
		return flags | GL_FAULT;

	/* Find both keys first, then decode: decoding inside the loop
	 * makes the verifier explore too many paths. */
	struct go_string span_v = {}, trace_v = {};
	for (int i = 0; i < GL_LABELS_MAX; i++) {
		__u64 koff = (__u64)i * size + l->label_key;
		__u64 voff = (__u64)i * size + l->label_value;
		struct go_string k, v;

		/* Keep clang from proving the checks redundant and dropping
		 * them, or recomputing the offsets after them: the verifier
		 * must see the checked registers used. */
		barrier_var(koff);
		barrier_var(voff);
		if (i >= n || koff > LABEL_BYTES - sizeof(k) || voff > LABEL_BYTES - sizeof(v))
			break;
		k = *(struct go_string *)(buf + koff);
		v = *(struct go_string *)(buf + voff);
		if (!span_v.ptr && key_is(&k, span_key, span_key_len, &fault))
			span_v = v;
		else if (!trace_v.ptr && key_is(&k, trace_key, trace_key_len, &fault))
			trace_v = v;
		if (fault)
			return flags | GL_FAULT;
	}
	if (span_v.ptr) {
		__u32 f = read_id(&span_v, r->span_id, 8);
		flags |= f ? f : GL_SPAN;
	}
	if (trace_v.ptr) {
		__u32 f = read_id(&trace_v, r->trace_id, 16);
		flags |= f ? f : GL_TRACE;
	}
	return flags;
}

SEC("perf_event")
int golabels_sample(void *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 id = bpf_get_current_pid_tgid();
	__u32 pid = id >> 32;
	struct go_layout *l;
	struct sample_labels *r;

	l = bpf_map_lookup_elem(&targets, &pid);
	if (!l)
		return 1;
	__u32 zero = 0;
	__u64 *st = bpf_map_lookup_elem(&stats, &zero);
	if (!st)
		return 1;
	st[STAT_RUNS]++; /* per CPU: no atomics needed */
	r = bpf_ringbuf_reserve(&records, sizeof(*r), 0);
	if (!r) {
		st[STAT_DROPPED]++;
		return 1;
	}
	__builtin_memset(r, 0, sizeof(*r));
	r->ktime = now;
	r->pid = pid;
	r->tid = (__u32)id;
	r->cpu = bpf_get_smp_processor_id();
	r->flags = read_labels(l, r);
	if (r->flags & GL_FAULT)
		st[STAT_FAULTS]++;
	if (r->flags & GL_BAD_VALUE)
		st[STAT_BAD_VALUE]++;
	if (r->flags & GL_NO_G)
		st[STAT_NO_G]++;
	else if (!(r->flags & (GL_LABELS | GL_FAULT)))
		st[STAT_NO_LABELS]++;
	else if (!(r->flags & (GL_SPAN | GL_FAULT | GL_BAD_VALUE)))
		st[STAT_NO_SPAN]++;
	/* No wake-up: the reader never sleeps on this ring (Drain), and a
	 * wake-up is an irq_work, a self-interrupt: it was a third of the
	 * program's cost. */
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
	return 1;
}
