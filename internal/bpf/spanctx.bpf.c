//go:build ignore

// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* spanctx: attached to perfprof's sampling events (PERF_EVENT_IOC_SET_BPF),
 * it runs in the overflow handler of every sample, on the sampled thread,
 * just before perf writes the sample: spanctx_sample on the cpu-clock
 * events, spanctx_switch on the context-switch events (as the thread
 * leaves the CPU). For a thread of a target process (the targets map,
 * keyed by pid) it reads the span the thread is running, where the
 * process keeps it: a Go program in the running goroutine's pprof labels,
 * a native one in the thread's OTEP 4947 context record; and writes one
 * sample_labels record to the records ring buffer. It always returns 1:
 * the sample is kept, whatever happened. */

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "kernel.h"
#include "spanctx.h"
#include "schedacct.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* drop_others, set by the loader: drop the samples of processes that are
 * not targets (per-CPU events sample every process on their CPU). */
volatile const __u32 drop_others = 0;

/* The pid namespace whose ids the programs use: the collector's, where
 * perf names the processes it samples and /proc the processes it finds.
 * pidns_ino is its inode number (/proc/self/ns/pid) and pidns_level its
 * depth below the initial namespace, both set by the loader after
 * pidns_self checked them; pidns_ino 0 when the collector is in the
 * initial namespace, whose ids the kernel keeps in the task itself. A task
 * of an ancestor or unrelated namespace has no id there: it is no target,
 * whatever its pid is elsewhere. */
volatile const __u32 pidns_ino = 0;
volatile const __u32 pidns_level = 0;

/* Label keys, set by the loader before loading (zero-padded). */
volatile const __u64 span_key[SC_KEY_MAX / 8] = {0};
volatile const __u32 span_key_len = 0;
volatile const __u64 trace_key[SC_KEY_MAX / 8] = {0};
volatile const __u32 trace_key_len = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096); /* set by the loader */
	__type(key, __u32);        /* pid */
	__type(value, struct target);
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

/* The scheduler program's state of each target thread (schedacct.h):
 * task storage, found from the task without a hash lookup and freed with
 * it, so that a tid reused is a new thread. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct thread_state);
} threads SEC(".maps");

/* The test driver's accounting, by the tids it makes up. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct thread_acct);
} acct_test_threads SEC(".maps");

/* Groups of off-CPU time (struct sched_record). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024); /* set by the loader */
} sched_records SEC(".maps");

/* Set by the loader (bpf.Options): the off-CPU interval; off periods
 * shorter than min_block are not off-CPU time; a thread's switch-out is
 * captured (stack and span read) when capture_every switch-outs passed
 * since its last capture and it has capture_gap ns of credit (see struct
 * thread_state); a target writes at most
 * max_rate groups a second (0: no limit), the others held back. */
volatile const __u64 acct_interval = 10000000;
/* sched_on: the scheduler program runs; the sampling program then takes
 * each target sample's CPU delta from its accounting. */
volatile const __u32 sched_on = 0;
/* kernel_stacks: the scheduler program reads the kernel stack of a
 * switch-out too. */
volatile const __u32 kernel_stacks = 0;
volatile const __u64 min_block = 0;
volatile const __u64 capture_gap = 0;
volatile const __u32 capture_every = 1;
volatile const __u32 max_rate = 0;

/* The test driver's input and output (schedacct_test). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ACCT_BATCH);
	__type(key, __u32);
	__type(value, struct acct_event);
} acct_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ACCT_BATCH);
	__type(key, __u32);
	__type(value, struct acct_result);
} acct_results SEC(".maps");

/* Force the types into BTF for bpf2go. */
const struct sample_labels *unused_sample_labels __attribute__((unused));
const struct target *unused_target __attribute__((unused));
const struct acct_event *unused_acct_event __attribute__((unused));
const struct acct_result *unused_acct_result __attribute__((unused));
const struct acct_batch *unused_acct_batch __attribute__((unused));
const struct sched_record *unused_sched_record __attribute__((unused));
const struct sample_ctx *unused_sample_ctx __attribute__((unused));
const struct pidns_check *unused_pidns_check __attribute__((unused));

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

/* upid_at reads pid p's number at level, with the namespace it is in:
 * nr 0 when p has no number there (it is of a shallower namespace). */
static __always_inline struct upid upid_at(struct pid *p, __u32 level)
{
	struct upid u = {};

	if (!p || BPF_CORE_READ(p, level) < level)
		return u;
	if (bpf_core_read(&u, sizeof(u), &p->numbers[level]))
		u.nr = 0;
	return u;
}

/* task_ids sets *pid and *tid to t's process and thread ids in the
 * collector's pid namespace, and returns 0 when t has none there. */
static __always_inline int task_ids(struct task_struct *t, __u32 *pid, __u32 *tid)
{
	if (!pidns_ino) {
		*pid = BPF_CORE_READ(t, tgid);
		*tid = BPF_CORE_READ(t, pid);
		return 1;
	}
	struct upid u = upid_at(BPF_CORE_READ(t, thread_pid), pidns_level);
	if (!u.nr || BPF_CORE_READ(u.ns, ns.inum) != pidns_ino)
		return 0;
	/* The threads of a process are in one namespace: the leader's number
	 * at the same level is the process's. */
	struct upid l = upid_at(BPF_CORE_READ(t, group_leader, thread_pid), pidns_level);
	if (!l.nr)
		return 0;
	*pid = l.nr;
	*tid = u.nr;
	return 1;
}

/* current_ids is task_ids of the current task. */
static __always_inline int current_ids(__u32 *pid, __u32 *tid)
{
	if (!pidns_ino) {
		__u64 id = bpf_get_current_pid_tgid();
		*pid = id >> 32;
		*tid = (__u32)id;
		return 1;
	}
	return task_ids(bpf_get_current_task_btf(), pid, tid);
}

/* key_is reports whether the Go string k equals the configured key
 * (want, wantlen). It reads exactly wantlen bytes: reading past the end of
 * the string could fault at the end of a mapping and miss a match. */
static __always_inline int key_is(const struct go_string *k, volatile const __u64 *want, __u32 wantlen,
				  int *fault)
{
	__u64 buf[SC_KEY_MAX / 8] = {0};

	if (wantlen == 0 || wantlen > SC_KEY_MAX || k->len != wantlen)
		return 0;
	if (read_user(buf, wantlen, k->ptr)) {
		*fault = 1;
		return 0;
	}
	for (int i = 0; i < SC_KEY_MAX / 8; i++)
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
		return SC_BAD_VALUE;
	if (read_user(buf, 2 * n, v->ptr))
		return SC_FAULT;
	if (unhex(buf, out, n))
		return SC_BAD_VALUE;
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
		return SC_NO_G;
	if (read_user(&g, sizeof(g), (void *)(fsbase + (__s64)l->tls_g)))
		return SC_FAULT;
	if (!g)
		return SC_NO_G;
	/* A goroutine with an id is a user goroutine, and so m.curg: its
	 * labels are one read away. g0 and gsignal (id 0) run for m.curg,
	 * the goroutine they interrupted, or for none between goroutines. */
	if (read_user(&goid, sizeof(goid), g + l->g_goid))
		return SC_FAULT;
	if (goid) {
		curg = g;
	} else {
		if (read_user(&m, sizeof(m), g + l->g_m))
			return SC_FAULT;
		if (!m)
			return SC_NO_G;
		if (read_user(&curg, sizeof(curg), m + l->m_curg))
			return SC_FAULT;
		if (!curg)
			return SC_NO_G | SC_IDLE;
	}
	if (read_user(&labels, sizeof(labels), curg + l->g_labels))
		return SC_FAULT;
	if (!labels)
		return 0;
	if (!l->label_size) /* a layout the program does not read */
		return SC_LABELS;
	if (read_user(&list, sizeof(list), labels + l->label_list))
		return SC_FAULT;
	flags |= SC_LABELS;

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
	if (n > SC_LABELS_MAX)
		n = SC_LABELS_MAX;
	__u64 bytes = n * size;
	if (bytes > LABEL_BYTES)
		return flags;
	if (read_user(buf, bytes, list.ptr))
		return flags | SC_FAULT;

	/* Find both keys first, then decode: decoding inside the loop
	 * makes the verifier explore too many paths. */
	struct go_string span_v = {}, trace_v = {};
	for (int i = 0; i < SC_LABELS_MAX; i++) {
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
			return flags | SC_FAULT;
	}
	if (span_v.ptr) {
		__u32 f = read_id(&span_v, r->span_id, 8);
		flags |= f ? f : SC_SPAN;
	}
	if (trace_v.ptr) {
		__u32 f = read_id(&trace_v, r->trace_id, 16);
		flags |= f ? f : SC_TRACE;
	}
	return flags;
}

/* The first 28 bytes of an OTEP 4947 Thread-Local Context Record. */
struct otel_record {
	__u8 trace_id[16];
	__u8 span_id[8];
	__u8 valid; /* 1: the record may be read */
	__u8 trace_flags;
	__u16 attrs_size;
} __attribute__((packed));

/* tls_addr sets *var to the address of the thread-local variable l
 * locates in the current thread, and returns 0; else the flags to
 * return (0: a dynamic TLS block never allocated, the thread published
 * nothing). */
static __always_inline __u32 tls_addr(const struct tls_layout *l, __u64 *var)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 tp = task->thread.fsbase;

	*var = 0;
	if (!tp)
		return SC_NO_G;
	if (!l->module) {
		*var = tp + l->tp_offset;
		return 0;
	}
	/* glibc's DTV: tcbhead_t.dtv at tp + 8; 16-byte entries; entry -1
	 * holds the number of slots; an unallocated block is 0 or
	 * TLS_DTV_UNALLOCATED (-1). */
	__u64 dtv = 0, n = 0, block = 0;
	if (read_user(&dtv, sizeof(dtv), (void *)(tp + 8)))
		return SC_FAULT;
	if (!dtv)
		return 0;
	if (read_user(&n, sizeof(n), (void *)(dtv - 16)))
		return SC_FAULT;
	if (l->module > n)
		return 0;
	if (read_user(&block, sizeof(block), (void *)(dtv + 16 * l->module)))
		return SC_FAULT;
	if (!block || block == (__u64)-1)
		return 0;
	*var = block + l->offset;
	return 0;
}

/* read_record reads the OTEP 4947 record at ptr: its ids into r, its
 * trace flags and attributes into a. The thread is interrupted, so the
 * record cannot change under the reads; a record being rewritten says so
 * (valid != 1) and is not guessed at. */
static __always_inline __u32 read_record(__u64 ptr, struct sample_labels *r, struct ctx_attrs *a)
{
	struct otel_record rec;

	if (read_user(&rec, sizeof(rec), (void *)ptr))
		return SC_FAULT;
	if (rec.valid != 1)
		return SC_NOT_VALID;
	__u32 flags = SC_LABELS;
	__u64 *s = (__u64 *)rec.span_id, *t = (__u64 *)rec.trace_id;
	if (s[0]) {
		__builtin_memcpy(r->span_id, rec.span_id, 8);
		flags |= SC_SPAN;
	}
	if (t[0] | t[1]) {
		__builtin_memcpy(r->trace_id, rec.trace_id, 16);
		flags |= SC_TRACE;
	}
	a->trace_flags = rec.trace_flags;
	a->size = rec.attrs_size;
	__u32 n = rec.attrs_size;
	if (n > SC_ATTRS_MAX)
		n = SC_ATTRS_MAX;
	/* An attrs-data that cannot be read loses the attributes, not the
	 * ids: size says there were some, and no byte of them is kept. */
	if (n && read_user(a->data, n, (void *)(ptr + sizeof(rec))))
		a->size = 0;
	return flags | SC_ATTRS;
}

/* read_tls reads the record the thread's otel_thread_ctx_v1 points to. A
 * thread with no record, or whose dynamic TLS block was never allocated,
 * published no span: flags 0. */
static __always_inline __u32 read_tls(const struct tls_layout *l, struct sample_labels *r, struct ctx_attrs *a)
{
	__u64 var, ptr = 0;
	__u32 f = tls_addr(l, &var);

	if (f || !var)
		return f;
	if (read_user(&ptr, sizeof(ptr), (void *)var))
		return SC_FAULT;
	if (!ptr)
		return 0;
	return read_record(ptr, r, a);
}

/* V8's layout in the Node.js builds schema nodejs_v1_dev covers (64-bit,
 * no pointer compression, no sandbox), fixed by the schema; the Go
 * reference is otelctx.NodeRecord, with the same names. */
#define V8_TAGGED 8
#define V8_JSMAP_TABLE 24   /* JSMap: map, properties, elements, table */
#define V8_ARRAY_HEADER 16  /* FixedArray: map, length */
#define NODE_MAX_CHAIN 16   /* entries a bucket's chain walk visits */
#define NODE_MAX_BUCKETS 1024

/* The 32-byte otel_thread_ctx_nodejs_v1 discovery struct. */
struct node_ctx {
	__u64 cped_slot;   /* the isolate's CPED slot; 0: do not read */
	__u64 als_handle;  /* a global handle: *it is the storage, tagged */
	__s32 als_hash;    /* the storage's identity hash */
	__u8 record_slot;  /* offset of the record pointer in the wrapper */
	__u8 _pad[3];
	__u64 undefined;   /* the isolate's tagged undefined */
};

static __always_inline int heap_object(__u64 w) { return (w & 3) == 1; }

/* smi decodes a small integer (tag bit 0, value in the upper 32 bits)
 * into *v; 0 for a heap object. */
static __always_inline int smi(__u64 w, __s64 *v)
{
	if (w & 1)
		return 0;
	*v = (__s64)w >> 32;
	return 1;
}

/* node_fail counts a walk that did not validate by the step that failed,
 * and returns SC_WALK: the sample gets no span from it, never a wrong
 * one. */
static __always_inline __u32 node_fail(__u32 stat)
{
	__u32 zero = 0;
	__u64 *st = bpf_map_lookup_elem(&stats, &zero);
	if (st && stat < STAT_MAX)
		st[stat]++;
	return SC_WALK;
}

/* read_node walks the thread's Node.js discovery struct (l locates it) to
 * the OTEP 4947 record of the context its JS code runs in: the CPED slot
 * holds the active AsyncContextFrame, a JS Map; the published
 * AsyncLocalStorage's value in it is a wrapper whose embedder slot at
 * record_slot points at the record. Every word is checked before it is
 * followed (docs/nodejs-thread-context.md): flags 0 when the thread runs
 * no context, SC_WALK when the heap did not read as it must. */
static __always_inline __u32 read_node(const struct tls_layout *l, struct sample_labels *r, struct ctx_attrs *a)
{
	struct node_ctx c;
	__u64 var, frame = 0, table = 0, key = 0, ptr = 0;
	__u32 f = tls_addr(l, &var);

	if (f || !var)
		return f;
	if (read_user(&c, sizeof(c), (void *)var))
		return SC_FAULT;
	if (!c.cped_slot)
		return 0; /* not published, torn down, or closed for now */
	if (!c.record_slot || c.record_slot % V8_TAGGED)
		return node_fail(STAT_NODE_SLOT);
	if (read_user(&frame, sizeof(frame), (void *)c.cped_slot))
		return SC_FAULT;
	if (frame == c.undefined)
		return 0; /* no frame: the loop is idle */
	if (!heap_object(frame))
		return node_fail(STAT_NODE_TAG);
	if (read_user(&table, sizeof(table), (void *)(frame - 1 + V8_JSMAP_TABLE)))
		return SC_FAULT;
	if (!heap_object(table))
		return node_fail(STAT_NODE_TAG);
	table -= 1;
	if (read_user(&key, sizeof(key), (void *)c.als_handle))
		return SC_FAULT;

	/* OrderedHashMap: a FixedArray of element count, deleted count and
	 * bucket count (Smis), the bucket heads, then entries of (key,
	 * value, chain). */
	__u64 hdr[5]; /* map, length, elements, deleted, buckets */
	__s64 length, elements, deleted, buckets;
	if (read_user(hdr, sizeof(hdr), (void *)table))
		return SC_FAULT;
	if (!smi(hdr[2], &elements))
		return node_fail(STAT_NODE_REHASH);
	if (!smi(hdr[1], &length) || !smi(hdr[3], &deleted) || !smi(hdr[4], &buckets))
		return node_fail(STAT_NODE_TABLE);
	if (buckets <= 0 || buckets > NODE_MAX_BUCKETS || (buckets & (buckets - 1)) ||
	    elements < 0 || deleted < 0 || elements + deleted > 2 * buckets ||
	    length < 3 + buckets + 3 * 2 * buckets)
		return node_fail(STAT_NODE_TABLE);
	__u64 elems = table + V8_ARRAY_HEADER;
	__s64 used = elements + deleted, e = 0;
	__u64 head = 0;
	if (read_user(&head, sizeof(head), (void *)(elems + V8_TAGGED * (3 + (c.als_hash & (buckets - 1))))))
		return SC_FAULT;
	int ok = smi(head, &e);
	__u64 value = 0;
	int found = 0;
	for (int i = 0; i < NODE_MAX_CHAIN; i++) {
		if (!ok || e < 0 || e >= used)
			break;
		__u64 entry[3]; /* key, value, chain */
		if (read_user(entry, sizeof(entry), (void *)(elems + V8_TAGGED * (3 + buckets + 3 * e))))
			return SC_FAULT;
		if (entry[0] == key) {
			value = entry[1];
			found = 1;
			break;
		}
		ok = smi(entry[2], &e);
	}
	if (!found) {
		/* The chain ended (no entry for the storage: it has no value
		 * in this frame) or the walk gave up following it. */
		if (ok && e >= 0 && e < used)
			return node_fail(STAT_NODE_CHAIN);
		return 0;
	}
	/* Outside a run() the frame maps the storage to undefined: checked
	 * before the value is followed. */
	if (value == c.undefined)
		return 0;
	if (!heap_object(value))
		return node_fail(STAT_NODE_TAG);
	if (read_user(&ptr, sizeof(ptr), (void *)(value - 1 + c.record_slot)))
		return SC_FAULT;
	if (!ptr)
		return 0; /* the wrapper's record was released */
	return read_record(ptr, r, a);
}

/* read_ctx reads the span of a thread-context target's thread. */
static __always_inline __u32 read_ctx(const struct target *tg, struct sample_labels *r, struct ctx_attrs *a)
{
	if (tg->kind == TARGET_NODE)
		return read_node(&tg->tls, r, a) | SC_TLS;
	return read_tls(&tg->tls, r, a) | SC_TLS;
}

/* begin fills the header of a sample's record: who, when, and the CPU
 * delta of the scheduler program's accounting (ts, when it runs). */
static __always_inline void begin(struct sample_labels *r, __u32 pid, __u32 tid, __u64 now, struct thread_state *ts)
{
	r->ktime = now;
	r->pid = pid;
	r->tid = tid;
	r->cpu = bpf_get_smp_processor_id();
	if (ts && !ts->acct.off_cpu) {
		ts->acct.cpu_delta += acct_elapsed(&ts->acct, now);
		r->cpu_delta = acct_take_cpu_delta(&ts->acct);
		r->flags = SC_CPU_DELTA;
	}
}

/* finish counts what the read of a span found (st: the per-CPU stats),
 * and marks a switch-out's record. */
static __always_inline void finish(struct sample_labels *r, __u64 *st, __u32 kind)
{
	__u32 f = r->flags;
	if (f & SC_FAULT)
		st[STAT_FAULTS]++;
	if (f & SC_BAD_VALUE)
		st[STAT_BAD_VALUE]++;
	if (f & SC_NO_G)
		st[STAT_NO_G]++;
	else if (f & SC_NOT_VALID)
		st[STAT_NOT_VALID]++;
	else if (f & SC_WALK)
		; /* counted by reason in read_node */
	else if (!(f & (SC_LABELS | SC_FAULT)))
		st[STAT_NO_LABELS]++;
	else if (!(f & (SC_SPAN | SC_FAULT | SC_BAD_VALUE)))
		st[STAT_NO_SPAN]++;
	r->flags = f | kind;
}

static __always_inline int run(__u32 kind)
{
	__u32 pid = 0, tid = 0, zero = 0;
	struct target *tg = 0;
	struct sample_labels *r;
	__u64 *st;

	if (current_ids(&pid, &tid))
		tg = bpf_map_lookup_elem(&targets, &pid);
	if (!tg) {
		if (!drop_others)
			return 1;
		st = bpf_map_lookup_elem(&stats, &zero);
		if (st)
			st[STAT_OTHERS]++;
		return 0; /* perf drops the sample: no callchain, no record */
	}
	/* A cpu-clock sample's CPU delta, from the scheduler program's
	 * accounting of the thread (a switch-out sample has none). */
	struct thread_state *ts = 0;
	if (sched_on && !kind)
		ts = bpf_task_storage_get(&threads, bpf_get_current_task_btf(), 0, 0);
	if (tg->kind == TARGET_PLAIN && !ts)
		return 1;
	__u64 now = bpf_ktime_get_ns();
	st = bpf_map_lookup_elem(&stats, &zero);
	if (!st)
		return 1;
	st[STAT_RUNS]++; /* per CPU: no atomics needed */
	/* A thread-context target's record carries the context's attributes
	 * too: the long record, for them only. Its own path: the verifier
	 * must see each record's size where it is written. */
	if (tg->kind == TARGET_TLS || tg->kind == TARGET_NODE) {
		struct sample_ctx *x = bpf_ringbuf_reserve(&records, sizeof(*x), 0);
		if (!x) {
			st[STAT_DROPPED]++;
			return 1;
		}
		__builtin_memset(x, 0, sizeof(*x));
		begin(&x->l, pid, tid, now, ts);
		x->l.flags |= read_ctx(tg, &x->l, &x->attrs);
		finish(&x->l, st, kind);
		bpf_ringbuf_submit(x, BPF_RB_NO_WAKEUP);
		return 1;
	}
	r = bpf_ringbuf_reserve(&records, sizeof(*r), 0);
	if (!r) {
		st[STAT_DROPPED]++;
		return 1;
	}
	__builtin_memset(r, 0, sizeof(*r));
	begin(r, pid, tid, now, ts);
	if (tg->kind == TARGET_PLAIN)
		r->flags |= SC_NO_READ;
	else {
		r->flags |= read_labels(&tg->go, r);
		finish(r, st, kind);
	}
	/* No wake-up: the reader never sleeps on this ring (Drain), and a
	 * wake-up is an irq_work, a self-interrupt: it was a third of the
	 * program's cost. */
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
	return 1;
}

SEC("perf_event")
int spanctx_sample(void *ctx)
{
	return run(0);
}

/* On the context-switch event the thread is still current, with its own
 * memory map: the switch to the next task comes after. */
SEC("perf_event")
int spanctx_switch(void *ctx)
{
	return run(SC_SWITCH);
}

static __always_inline void count(const __u32 stat)
{
	__u32 zero = 0;
	__u64 *st = bpf_map_lookup_elem(&stats, &zero);
	if (st)
		st[stat]++;
}

/* schedacct_test runs the accounting over the events the test put in
 * acct_events, as the scheduler program does, and writes what each
 * produced to acct_results: the kernel side of
 * TestSchedAcctMatchesTracker (BPF_PROG_TEST_RUN). */
SEC("syscall")
int schedacct_test(struct acct_batch *b)
{
	__u64 interval = b->interval, minb = b->min_block;
	__u32 n = b->n;

	for (__u32 i = 0; i < ACCT_BATCH; i++) {
		if (i >= n)
			break;
		/* The key on the stack, the counter in a register: the
		 * verifier must see the counter grow to prove the loop ends. */
		__u32 key = i;
		struct acct_event *e = bpf_map_lookup_elem(&acct_events, &key);
		struct acct_result *r = bpf_map_lookup_elem(&acct_results, &key);
		if (!e || !r)
			return 1;
		__builtin_memset(r, 0, sizeof(*r));
		__u32 tid = e->tid;
		if (e->kind == ACCT_EV_EXIT) {
			bpf_map_delete_elem(&acct_test_threads, &tid);
			continue;
		}
		struct thread_acct *th = bpf_map_lookup_elem(&acct_test_threads, &tid);
		int fresh = !th;
		if (fresh) {
			struct thread_acct init = {.since = e->ts};
			bpf_map_update_elem(&acct_test_threads, &tid, &init, BPF_NOEXIST);
			th = bpf_map_lookup_elem(&acct_test_threads, &tid);
			if (!th)
				return 2;
		}
		switch (e->kind) {
		case ACCT_EV_OUT:
			acct_switch_out(th, e->ts, e->preempted);
			break;
		case ACCT_EV_IN:
		case ACCT_EV_SAMPLE:
			if (!fresh) {
				int got = acct_run(th, e->ts, interval, minb, &r->group);
				r->grouped = got > 0;
				r->short_off = got < 0;
			}
			if (e->kind == ACCT_EV_SAMPLE)
				r->cpu_delta = acct_take_cpu_delta(th);
			break;
		}
	}
	return 0;
}

/* thread_of returns the state of a target's thread, made when the thread
 * has none (*fresh then); NULL for the threads of other processes. The
 * task storage lookup comes first: a target's thread has state after its
 * first switch, and finding it is a pointer chase, not a hash lookup. */
static __always_inline struct thread_state *thread_of(struct task_struct *t, __u64 now, int *fresh)
{
	struct thread_state *st = bpf_task_storage_get(&threads, t, 0, 0);
	__u32 pid, tid;
	*fresh = 0;
	if (st)
		return st;
	if (!task_ids(t, &pid, &tid) || !bpf_map_lookup_elem(&targets, &pid))
		return 0;
	st = bpf_task_storage_get(&threads, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!st) {
		count(STAT_SCHED_NO_STATE);
		return 0;
	}
	st->acct.since = now;
	*fresh = 1;
	return st;
}

/* capture reads the stack and the running span of prev, leaving the CPU,
 * into st. A process that is no longer a target loses its threads'
 * state here. */
static __always_inline void capture(__u64 *ctx, struct task_struct *prev, struct thread_state *st, __u64 now)
{
	__u32 pid, tid;
	struct target *tg = 0;
	if (task_ids(prev, &pid, &tid))
		tg = bpf_map_lookup_elem(&targets, &pid);
	if (!tg) {
		bpf_task_storage_delete(&threads, prev);
		return;
	}
	st->capture_time = now;
	st->uncaptured = 0;
	long n = bpf_get_stack(ctx, st->ustack, sizeof(st->ustack), BPF_F_USER_STACK);
	st->nframes = n > 0 ? n / 8 : 0;
	st->nkframes = 0;
	if (kernel_stacks) {
		n = bpf_get_stack(ctx, st->kstack, sizeof(st->kstack), 0);
		st->nkframes = n > 0 ? n / 8 : 0;
	}
	struct sample_labels r = {};
	if (tg->kind == TARGET_TLS || tg->kind == TARGET_NODE)
		st->out_flags = read_ctx(tg, &r, &st->attrs);
	else if (tg->kind == TARGET_GO)
		st->out_flags = read_labels(&tg->go, &r);
	else
		st->out_flags = 0;
	__builtin_memcpy(st->span_id, r.span_id, 8);
	__builtin_memcpy(st->trace_id, r.trace_id, 16);
	count(STAT_SCHED_CAPTURED);
}

/* over_rate reports whether next's process has written max_rate groups
 * in the current second, counting this one if not. */
static __always_inline int over_rate(__u32 pid, __u64 now)
{
	if (!max_rate)
		return 0;
	struct target *tg = bpf_map_lookup_elem(&targets, &pid);
	if (!tg)
		return 0;
	if (now - tg->window >= 1000000000ULL) {
		tg->window = now;
		tg->window_count = 0;
	}
	return __sync_fetch_and_add(&tg->window_count, 1) >= max_rate;
}

/* spanctx_sched_switch keeps the accounting of target threads at every
 * context switch: prev leaving the CPU (captured, per capture_gap and
 * capture_every, as the switch-out that begins its off period), next
 * getting it (a group written to sched_records when its off-CPU time
 * crossed the interval). current is prev: its memory is mapped and its
 * registers are its own. */
SEC("tp_btf/sched_switch")
int spanctx_sched_switch(__u64 *ctx)
{
	struct task_struct *prev = (struct task_struct *)ctx[1];
	struct task_struct *next = (struct task_struct *)ctx[2];
	unsigned int prev_state = (unsigned int)ctx[3];
	__u64 now = bpf_ktime_get_ns();
	struct thread_state *st;
	int fresh;

	st = thread_of(prev, now, &fresh);
	if (st && !st->acct.off_cpu) {
		/* TASK_RUNNING (0): preempted, still runnable. */
		acct_switch_out(&st->acct, now, prev_state == 0);
		st->out_time = now;
		st->uncaptured++;
		__u64 credit = st->credit + (now - st->credit_time);
		if (credit > CAPTURE_BURST * capture_gap)
			credit = CAPTURE_BURST * capture_gap;
		st->credit_time = now;
		/* A preempted thread is runnable: its off period is the wait
		 * for a CPU, short as a rule. It is captured only out of more
		 * than one capture's credit, which keeps one for the switch-out
		 * into a block, however often it was preempted before. */
		__u64 need = prev_state == 0 ? 2 * capture_gap : capture_gap;
		if (st->uncaptured >= capture_every && credit >= need) {
			credit -= capture_gap;
			capture(ctx, prev, st, now);
		} else {
			count(STAT_SCHED_UNCAPTURED);
		}
		st->credit = credit;
	}
	st = thread_of(next, now, &fresh);
	if (!st || fresh)
		return 0;
	struct acct_group g;
	int got = acct_run(&st->acct, now, acct_interval, min_block, &g);
	if (got < 0)
		count(STAT_SCHED_SHORT);
	if (got <= 0)
		return 0;
	__u32 pid, tid;
	if (!task_ids(next, &pid, &tid))
		return 0;
	if (over_rate(pid, now)) {
		acct_defer(&st->acct, &g, acct_interval);
		count(STAT_SCHED_DEFERRED);
		return 0;
	}
	struct sched_record *rec = bpf_ringbuf_reserve(&sched_records, sizeof(*rec), 0);
	if (!rec) {
		count(STAT_SCHED_DROPPED);
		return 0;
	}
	rec->begin = g.begin;
	rec->end = g.end;
	rec->count = g.count;
	rec->out_time = st->out_time;
	rec->capture_time = st->capture_time;
	rec->pid = pid;
	rec->tid = tid;
	rec->state = g.state;
	rec->out_flags = st->out_flags;
	__builtin_memcpy(rec->span_id, st->span_id, 8);
	__builtin_memcpy(rec->trace_id, st->trace_id, 16);
	__u32 nf = st->nframes;
	rec->nframes = nf > SC_STACK_MAX ? SC_STACK_MAX : nf;
	nf = st->nkframes;
	rec->nkframes = nf > SC_KSTACK_MAX ? SC_KSTACK_MAX : nf;
	__builtin_memcpy(rec->ustack, st->ustack, sizeof(rec->ustack));
	__builtin_memcpy(rec->kstack, st->kstack, sizeof(rec->kstack));
	if (rec->out_flags & SC_ATTRS)
		__builtin_memcpy(&rec->attrs, &st->attrs, sizeof(rec->attrs));
	else
		__builtin_memset(&rec->attrs, 0, sizeof(rec->attrs));
	bpf_ringbuf_submit(rec, BPF_RB_NO_WAKEUP);
	return 0;
}

/* pidns_self, run by the loader (BPF_PROG_TEST_RUN) on one of the
 * collector's threads, reads that thread's pid the way task_ids does:
 * the depth of its namespace (the level pidns_level must be) and its
 * numbers there, which must be what getpid and gettid returned, in the
 * namespace whose inode is pidns_ino. It makes sure the programs and the
 * collector agree on ids before any target is added. */
SEC("syscall")
int pidns_self(struct pidns_check *c)
{
	struct task_struct *t = bpf_get_current_task_btf();
	struct pid *p = BPF_CORE_READ(t, thread_pid);
	__u32 level = BPF_CORE_READ(p, level);
	struct upid u = upid_at(p, level);
	struct upid l = upid_at(BPF_CORE_READ(t, group_leader, thread_pid), level);

	c->level = level;
	c->inum = BPF_CORE_READ(u.ns, ns.inum);
	c->pid = l.nr;
	c->tid = u.nr;
	return 0;
}
