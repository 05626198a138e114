/*
 * nodeforge: a single-threaded test program that publishes its spans as a
 * Node.js 24 thread does for schema nodejs_v1_dev
 * (docs/nodejs-thread-context.md), with V8's objects forged in its own memory:
 * an OTEP 4719 process context naming the schema and a key map, the
 * thread-local discovery struct otel_thread_ctx_nodejs_v1, an isolate whose
 * continuation-preserved embedder data (CPED) slot holds the active
 * AsyncContextFrame (a JS Map whose table is an OrderedHashMap), the
 * published AsyncLocalStorage and the wrapper objects it maps to, each with
 * an OTEP 4947 record in its embedder slot at 32, as on Node.js 23 and later.
 *
 *   nodeforge VARIANT
 *
 * Its thread switches between span 0 and span 1 every millisecond by storing
 * another frame in the CPED slot, as AsyncContextFrame does, burns the CPU
 * through the millisecond in a function that names the span and whether the
 * heap was well formed, and in every fifth period of a span blocks for 2 ms
 * in another such function. A profiler's stacks then give the truth of each
 * sample:
 *
 *   work_in_span0, work_in_span1, block_in_span0, block_in_span1
 *       the span's frame, well formed: a reader must find the span's record
 *   bad_work_in_span0, bad_work_in_span1, bad_block_in_span0, bad_block_in_span1
 *       the span's period with the variant's malformed shape: a reader must
 *       find no record (slot24forged aside: see below)
 *   work_in_no_span
 *       (variant good) a frame that maps the storage to undefined, as Node 24
 *       leaves after a run() returns: no record
 *
 * VARIANT (every variant but good malforms every other pair of periods, so
 * that each span has well-formed and malformed ones):
 *   good          always well formed; one period in eight runs no span
 *   slot24        the struct says record_slot_offset 24 (Node 22's) while the
 *                 wrappers keep the record at 32 (Node 24's); at 24 is what V8
 *                 puts there, the wrapper's cpp_heap_wrappable slot, 0
 *   slot24forged  the same, but the word at 24 of each wrapper points at the
 *                 other span's record, valid: a wrong constant that a reader
 *                 cannot tell from a right one
 *   rehash        the frame's table is one a rehash has just forwarded: its
 *                 element count is a tagged pointer to the new table, and its
 *                 stale entries map the storage to the other span's wrapper
 *   badtable      table counts out of their bounds, in turn: 3 buckets (not a
 *                 power of two), more elements than the buckets hold, a
 *                 FixedArray too short for its buckets; each table otherwise
 *                 leads to the other span's wrapper
 *   chain         the storage's bucket chain loops (without the storage)
 *   tag           words not tagged as they must be, in turn: the CPED slot
 *                 holds a Smi, a weak pointer to the other span's frame; the
 *                 frame's table is a Smi; the storage's value is a Smi
 *   misaligned    the struct says record_slot_offset 20, then 0, in turn
 *
 * Prints "ready PID", one "span I TRACE SPAN METHOD ROUTE" line per span, then
 * "started".
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "pbenc.h"

#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif
#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U
#endif

/* --- the discovery struct --- */

/* otel_thread_ctx_nodejs_v1 (design doc 01861, revision with the record slot
 * offset in the struct; 32 bytes). The build exports it in .dynsym with
 * -Wl,--export-dynamic-symbol. */
struct node_ctx {
	uint64_t cped_slot;  /* address of the isolate's CPED slot; 0: do not read */
	uint64_t als_handle; /* a global handle: *it is the storage, tagged */
	int32_t als_hash;    /* the storage's identity hash */
	uint8_t record_slot; /* offset of the record pointer in a wrapper */
	uint8_t reserved[3];
	uint64_t undefined; /* the isolate's tagged undefined */
};

__attribute__((visibility("default"))) __thread struct node_ctx otel_thread_ctx_nodejs_v1;

/* Only the thread itself writes and readers read it interrupted or stopped:
 * ordering against the compiler is all that is needed. */
#define COMPILER_FENCE() __atomic_signal_fence(__ATOMIC_SEQ_CST)

/* --- V8's heap, forged (64-bit, no pointer compression, no sandbox) --- */

static uint64_t heap[1 << 14] __attribute__((aligned(16)));
static size_t heap_used;

/* alloc returns n zeroed words of the heap, 16-byte aligned like V8's
 * objects are at least 8. */
static uint64_t *alloc(size_t n)
{
	n = (n + 1) & ~(size_t)1;
	if (heap_used + n > sizeof(heap) / 8) {
		fprintf(stderr, "nodeforge: heap exhausted\n");
		exit(1);
	}
	uint64_t *p = &heap[heap_used];
	heap_used += n;
	return p;
}

/* A heap object's tagged address (kHeapObjectTag 1); a weak reference has
 * tag 3. A Smi is its value in the upper 32 bits, tag bit 0. */
static uint64_t tagged(const uint64_t *p) { return (uint64_t)(uintptr_t)p | 1; }
static uint64_t weak(const uint64_t *p) { return (uint64_t)(uintptr_t)p | 3; }
static uint64_t smi(int64_t v) { return (uint64_t)v << 32; }

/* The isolate: only its CPED slot (+0x278 on Node 24) and the root that
 * holds undefined (+0x2a0) matter. */
static uint64_t *isolate;
#define ISOLATE_CPED (0x278 / 8)
#define ISOLATE_UNDEFINED (0x2a0 / 8)

/* Maps: every heap object starts with one; readers must not look at them. */
static uint64_t meta_map, oddball_map, js_object_map, api_object_map, js_map_map, table_map, array_map;
static uint64_t undefined_value, the_hole, empty_array;

static uint64_t new_map(void)
{
	uint64_t *m = alloc(10);
	m[0] = meta_map ? meta_map : tagged(m);
	return tagged(m);
}

static uint64_t new_oddball(int kind)
{
	uint64_t *o = alloc(6); /* map, to_number_raw, to_string, to_number, type_of, kind */
	o[0] = oddball_map;
	o[5] = smi(kind);
	return tagged(o);
}

/* new_js_object forges a plain JS object (an AsyncLocalStorage, another
 * storage); hash, when not 0, in its properties-or-hash slot as V8 keeps an
 * identity hash there. */
static uint64_t new_js_object(int32_t hash)
{
	uint64_t *o = alloc(6); /* map, properties_or_hash, elements, in-object fields */
	o[0] = js_object_map;
	o[1] = hash ? smi(hash) : empty_array;
	o[2] = empty_array;
	o[3] = o[4] = o[5] = undefined_value;
	return tagged(o);
}

/* The record, as OTEP 4947 lays it out (28-byte header, then attrs-data). */
struct record {
	uint8_t trace_id[16];
	uint8_t span_id[8];
	uint8_t valid;
	uint8_t trace_flags;
	uint16_t attrs_data_size;
	uint8_t attrs_data[100];
} __attribute__((packed, aligned(8)));

/* new_wrapper forges the API object a writer stores in the storage: Node 24's
 * JSAPIObjectWithEmbedderSlots, map, properties, elements, the
 * cpp_heap_wrappable slot (0: no C++ object) at 24, then embedder field 0, the
 * record pointer (raw, untagged), at 32. */
static uint64_t *new_wrapper(struct record *r)
{
	uint64_t *w = alloc(5);
	w[0] = api_object_map;
	w[1] = empty_array;
	w[2] = empty_array;
	w[3] = 0;
	w[4] = (uint64_t)(uintptr_t)r;
	return w;
}

/* An entry to insert in a table: key, value, and the bucket its key's hash
 * selects; deleted: removed after being inserted. */
struct entry {
	uint64_t key, value;
	int bucket, deleted;
};

/* new_table forges V8's OrderedHashMap: a FixedArray (map, length) of the
 * element count, deleted count and bucket count, the bucket heads, then room
 * for 2 entries a bucket of key, value and chain; the entries inserted in
 * order, each heading its bucket's chain, which goes on to the one inserted
 * before it, as V8's Add does. A deleted entry keeps its place in the chain,
 * with the hole as key and value. Unused entries hold undefined. */
static uint64_t *new_table(int buckets, const struct entry *es, int n)
{
	int capacity = 2 * buckets, length = 3 + buckets + 3 * capacity;
	if (n > capacity) {
		fprintf(stderr, "nodeforge: %d entries in %d buckets\n", n, buckets);
		exit(1);
	}
	uint64_t *t = alloc(2 + length);
	t[0] = table_map;
	t[1] = smi(length);
	uint64_t *el = t + 2;
	int elements = 0, deleted = 0;
	for (int i = 3; i < length; i++)
		el[i] = undefined_value;
	for (int b = 0; b < buckets; b++)
		el[3 + b] = smi(-1);
	for (int e = 0; e < n; e++) {
		uint64_t *en = el + 3 + buckets + 3 * e;
		int b = es[e].bucket;
		en[2] = el[3 + b];
		el[3 + b] = smi(e);
		if (es[e].deleted) {
			en[0] = en[1] = the_hole;
			deleted++;
		} else {
			en[0] = es[e].key;
			en[1] = es[e].value;
			elements++;
		}
	}
	el[0] = smi(elements);
	el[1] = smi(deleted);
	el[2] = smi(buckets);
	return t;
}

/* table_elements returns the elements of table t (after map and length). */
static uint64_t *table_elements(uint64_t *t) { return t + 2; }

/* new_frame forges an AsyncContextFrame: a JS Map (map, properties,
 * elements, table). */
static uint64_t *new_frame(uint64_t *table)
{
	uint64_t *f = alloc(4);
	f[0] = js_map_map;
	f[1] = empty_array;
	f[2] = empty_array;
	f[3] = tagged(table);
	return f;
}

/* --- the process --- */

static const char *keys[] = {"http.request.method", "http.route"};
static const char *methods[2] = {"GET", "POST"};
static const char *routes[2] = {"/checkout", "/search"};

static struct record records[2];
static uint64_t *wrappers[2];
static uint64_t storage;       /* the published AsyncLocalStorage, tagged */
static uint64_t others[8];     /* other storages in the frames */
static uint64_t other_vals[8]; /* their values */
static const int32_t als_hash = 0x5a3c7;

/* Frames, tagged, to store in the CPED slot. good[i]: span i's, well formed;
 * idle: the storage mapped to undefined; bad[i][k]: span i's k-th malformed
 * shape, which a reader that skipped its checks would follow to span 1-i's
 * wrapper. */
static uint64_t good[2], idle;
static uint64_t bad[2][4];
static uint8_t bad_slot[4]; /* the record slot offsets of the malformed shapes */
static int bad_shapes;      /* how many the variant has */

static void forge(const char *variant)
{
	meta_map = new_map();
	oddball_map = new_map();
	js_object_map = new_map();
	api_object_map = new_map();
	js_map_map = new_map();
	table_map = new_map();
	array_map = new_map();
	uint64_t *ea = alloc(2);
	ea[0] = array_map;
	ea[1] = smi(0);
	empty_array = tagged(ea);
	undefined_value = new_oddball(5);
	the_hole = new_oddball(2);

	isolate = alloc(0x300 / 8);
	isolate[ISOLATE_UNDEFINED] = undefined_value;
	isolate[ISOLATE_CPED] = undefined_value;

	storage = new_js_object(als_hash);
	for (int k = 0; k < 8; k++) {
		others[k] = new_js_object(0x1000 + k);
		other_vals[k] = new_js_object(0);
	}
	for (int i = 0; i < 2; i++)
		wrappers[i] = new_wrapper(&records[i]);

	/* Span 0's frame: 4 buckets, the storage second in its bucket's chain
	 * of four, behind a deleted entry: b: O3 -> hole -> S -> O0. */
	int b4 = als_hash & 3, b8 = als_hash & 7;
	struct entry f0[] = {
		{others[0], other_vals[0], b4, 0},
		{storage, tagged(wrappers[0]), b4, 0},
		{others[2], other_vals[2], b4, 1},
		{others[3], other_vals[3], b4, 0},
		{others[4], other_vals[4], b4 ^ 1, 0},
		{others[5], other_vals[5], b4 ^ 2, 0},
	};
	/* Span 1's: 8 buckets, the storage last of three: b: O1 -> O0 -> S. */
	struct entry f1[] = {
		{storage, tagged(wrappers[1]), b8, 0},
		{others[0], other_vals[0], b8, 0},
		{others[1], other_vals[1], b8, 0},
		{others[2], other_vals[2], b8 ^ 3, 0},
		{others[3], other_vals[3], b8 ^ 1, 0},
		{others[4], other_vals[4], b8 ^ 4, 0},
		{others[5], other_vals[5], b8 ^ 2, 0},
	};
	uint64_t *t0 = new_table(4, f0, 6), *t1 = new_table(8, f1, 7);
	good[0] = tagged(new_frame(t0));
	good[1] = tagged(new_frame(t1));
	struct entry fi[] = {
		{others[0], other_vals[0], b4, 0},
		{storage, undefined_value, b4, 0},
		{others[1], other_vals[1], b4 ^ 1, 0},
	};
	idle = tagged(new_frame(new_table(4, fi, 3)));

	for (int i = 0; i < 2; i++) {
		int o = 1 - i;
		uint64_t *tg = i ? t1 : t0;
		/* A table a reader that skipped its checks would look the
		 * storage up in, and find span o's wrapper. */
		struct entry wrong[] = {
			{others[0], other_vals[0], b4, 0},
			{storage, tagged(wrappers[o]), b4, 0},
			{others[1], other_vals[1], b4, 0},
		};
		for (int k = 0; k < 4; k++)
			bad_slot[k] = 32;
		if (!strcmp(variant, "good")) {
			bad_shapes = 0;
		} else if (!strcmp(variant, "slot24") || !strcmp(variant, "slot24forged")) {
			bad[i][0] = good[i];
			bad_slot[0] = 24;
			bad_shapes = 1;
			if (!strcmp(variant, "slot24forged"))
				wrappers[i][3] = (uint64_t)(uintptr_t)&records[o];
		} else if (!strcmp(variant, "rehash")) {
			/* V8's Rehash fills a new table, then forwards the old
			 * one (its element count becomes a pointer to the new
			 * table), and only then stores the new table in the map:
			 * a sample in between finds the map on the old table.
			 * Its stale entries here lead to the other span. */
			uint64_t *old = new_table(4, wrong, 3);
			table_elements(old)[0] = tagged(tg);
			bad[i][0] = tagged(new_frame(old));
			bad_shapes = 1;
		} else if (!strcmp(variant, "badtable")) {
			/* 3 buckets: the storage's bucket (hash & 2) leads to
			 * the other span. */
			struct entry w3[] = {
				{others[0], other_vals[0], als_hash & 2, 0},
				{storage, tagged(wrappers[o]), als_hash & 2, 0},
			};
			bad[i][0] = tagged(new_frame(new_table(3, w3, 2)));
			/* More elements than 2 buckets hold. */
			struct entry w2[] = {
				{storage, tagged(wrappers[o]), als_hash & 1, 0},
				{others[0], other_vals[0], als_hash & 1, 0},
			};
			uint64_t *many = new_table(2, w2, 2);
			table_elements(many)[0] = smi(9);
			bad[i][1] = tagged(new_frame(many));
			/* A FixedArray shorter than its 4 buckets need. */
			uint64_t *shrt = new_table(4, wrong, 3);
			shrt[1] = smi(3 + 4 + 3 * 8 - 6);
			bad[i][2] = tagged(new_frame(shrt));
			bad_shapes = 3;
		} else if (!strcmp(variant, "chain")) {
			/* The storage's bucket: O1 -> O0 -> O1 -> ...; the
			 * storage itself (mapped to the other span) in
			 * another bucket. */
			struct entry w[] = {
				{others[0], other_vals[0], b4, 0},
				{others[1], other_vals[1], b4, 0},
				{storage, tagged(wrappers[o]), b4 ^ 1, 0},
			};
			uint64_t *loop = new_table(4, w, 3);
			table_elements(loop)[3 + 4 + 3 * 0 + 2] = smi(1); /* O0's chain: back to O1 */
			bad[i][0] = tagged(new_frame(loop));
			bad_shapes = 1;
		} else if (!strcmp(variant, "tag")) {
			bad[i][0] = smi(12345);                    /* the frame, a Smi */
			bad[i][1] = weak((uint64_t *)(good[o] - 1)); /* a weak pointer to the other span's frame */
			uint64_t *f = new_frame(tg);
			f[3] = smi(7); /* the table, a Smi */
			bad[i][2] = tagged(f);
			struct entry sv[] = {
				{others[0], other_vals[0], b4, 0},
				{storage, smi(i), b4, 0}, /* the value, a Smi */
			};
			bad[i][3] = tagged(new_frame(new_table(4, sv, 2)));
			bad_shapes = 4;
		} else if (!strcmp(variant, "misaligned")) {
			bad[i][0] = bad[i][1] = good[i];
			bad_slot[0] = 20;
			bad_slot[1] = 0;
			bad_shapes = 2;
		} else {
			fprintf(stderr, "nodeforge: no variant %s\n", variant);
			exit(2);
		}
	}
}

/* --- OTEP 4719 publication --- */

struct otel_ctx_header {
	char signature[8];
	uint32_t version;
	uint32_t payload_size;
	uint64_t published_at_ns;
	uint64_t payload;
} __attribute__((packed, aligned(8)));

static struct buf payload;

static void publish(void)
{
	struct buf res = {.n = 0};
	char instance[64];

	snprintf(instance, sizeof(instance), "nodeforge-%d", (int)getpid());
	put_kv_string(&res, 1, "service.name", "nodeforge");
	put_kv_string(&res, 1, "service.instance.id", instance);
	put_kv_int(&res, 1, "process.pid", getpid());
	payload.n = 0;
	put_msg(&payload, 1, &res);
	put_kv_string(&payload, 2, "threadlocal.schema_version", "nodejs_v1_dev");
	put_kv_strings(&payload, 2, "threadlocal.attribute_key_map", keys, 2);

	size_t size = 4096;
	struct otel_ctx_header *hdr;
	int fd = memfd_create("OTEL_CTX", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_NOEXEC_SEAL);
	if (fd < 0)
		fd = memfd_create("OTEL_CTX", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, (off_t)size) < 0) {
		perror("memfd OTEL_CTX");
		exit(1);
	}
	hdr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	close(fd);
	if (hdr == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	memcpy(hdr->signature, "OTEL_CTX", 8);
	hdr->version = 2;
	hdr->payload_size = (uint32_t)payload.n;
	hdr->payload = (uint64_t)(uintptr_t)payload.b;
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	__atomic_store_n(&hdr->published_at_ns, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec, __ATOMIC_RELEASE);
	prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, hdr, size, "OTEL_CTX");
}

/* --- the loop --- */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

volatile uint64_t work_sink;

/* One function per truth, kept out of line and apart (distinct constants),
 * so that the function on a sample's stack says what the thread ran. */
#define WORK(name, mul, add)                                                   \
	__attribute__((noinline)) void name(uint64_t until)                    \
	{                                                                      \
		while (now_ns() < until)                                       \
			for (int i = 0; i < 2000; i++)                         \
				work_sink = work_sink * (mul) + (add);         \
		__asm__ volatile("" ::: "memory");                             \
	}
WORK(work_in_span0, 6364136223846793005u, 1)
WORK(work_in_span1, 2862933555777941757u, 3)
WORK(bad_work_in_span0, 3202034522624059733u, 5)
WORK(bad_work_in_span1, 3935559000370003845u, 7)
WORK(work_in_no_span, 2685821657736338717u, 9)

/* nanosleep by a syscall instruction of its own: the thread leaves the CPU
 * with its user IP in the blocking function. */
static inline void sleep_2ms(void)
{
	struct timespec d = {0, 2000000};
	long ret;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"((long)SYS_nanosleep), "D"(&d), "S"(0L)
			 : "rcx", "r11", "memory");
	(void)ret;
}

#define BLOCK(name, pad)                                                       \
	__attribute__((noinline)) void name(void)                              \
	{                                                                      \
		sleep_2ms();                                                   \
		__asm__ volatile(pad ::: "memory");                            \
	}
BLOCK(block_in_span0, "")
BLOCK(block_in_span1, "nop")
BLOCK(bad_block_in_span0, "nop\n\tnop")
BLOCK(bad_block_in_span1, "nop\n\tnop\n\tnop")

/* enter makes frame the thread's active context, as AsyncContextFrame does
 * by storing it in the CPED slot; slot is the record slot offset the struct
 * says meanwhile (a writer never changes it: the malformed shapes do). */
static void enter(uint64_t frame, uint8_t slot)
{
	volatile uint8_t *rs = &otel_thread_ctx_nodejs_v1.record_slot;
	volatile uint64_t *cped = &isolate[ISOLATE_CPED];

	*rs = slot;
	COMPILER_FENCE();
	*cped = frame;
	COMPILER_FENCE();
}

static void run(int is_good)
{
	uint64_t nbad = 0;
	for (int64_t n = 0;; n++) {
		int i = (int)(n & 1);
		int malformed = bad_shapes && ((n >> 1) & 1);
		int none = is_good && n % 8 == 7;
		if (malformed) {
			int k = (int)(nbad++ / 2 % (uint64_t)bad_shapes);
			enter(bad[i][k], bad_slot[k]);
		} else if (none) {
			enter(idle, 32);
		} else {
			enter(good[i], 32);
		}
		uint64_t until = now_ns() + 1000000;
		if (none)
			work_in_no_span(until);
		else if (malformed)
			i ? bad_work_in_span1(until) : bad_work_in_span0(until);
		else
			i ? work_in_span1(until) : work_in_span0(until);
		if (n % 10 < 2 && !none) {
			if (malformed)
				i ? bad_block_in_span1() : bad_block_in_span0();
			else
				i ? block_in_span1() : block_in_span0();
		}
		enter(undefined_value, 32); /* between continuations: no frame */
	}
}

static void hex(const uint8_t *p, int n, char *out)
{
	for (int i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", p[i]);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: nodeforge VARIANT\n");
		return 2;
	}
	forge(argv[1]);

	/* Two spans of two traces, ids distinct in every byte. */
	srandom((unsigned)getpid());
	for (int i = 0; i < 2; i++) {
		struct record *r = &records[i];
		for (int j = 0; j < 16; j++)
			r->trace_id[j] = (uint8_t)(random() | 1) ^ (uint8_t)i;
		for (int j = 0; j < 8; j++)
			r->span_id[j] = (uint8_t)(random() | 1) ^ (uint8_t)(i << 1);
		r->trace_flags = 1;
		size_t m = strlen(methods[i]), n = strlen(routes[i]);
		uint8_t *a = r->attrs_data;
		a[0] = 0; /* http.request.method */
		a[1] = (uint8_t)m;
		memcpy(a + 2, methods[i], m);
		a[2 + m] = 1; /* http.route */
		a[3 + m] = (uint8_t)n;
		memcpy(a + 4 + m, routes[i], n);
		r->attrs_data_size = (uint16_t)(4 + m + n);
		r->valid = 1;
	}

	/* The writer fills the struct when it installs its hook, cped_slot
	 * last. */
	struct node_ctx *c = &otel_thread_ctx_nodejs_v1;
	uint64_t *handle = alloc(2); /* a global handle's cell */
	handle[0] = storage;
	c->als_hash = als_hash;
	c->als_handle = (uint64_t)(uintptr_t)handle;
	c->record_slot = 32;
	c->undefined = undefined_value;
	COMPILER_FENCE();
	*(volatile uint64_t *)&c->cped_slot = (uint64_t)(uintptr_t)&isolate[ISOLATE_CPED];

	publish();

	printf("ready %d\n", (int)getpid());
	for (int i = 0; i < 2; i++) {
		char th[33], sh[17];
		hex(records[i].trace_id, 16, th);
		hex(records[i].span_id, 8, sh);
		printf("span %d %s %s %s %s\n", i, th, sh, methods[i], routes[i]);
	}
	printf("started\n");
	fflush(stdout);
	run(!strcmp(argv[1], "good"));
	return 0;
}
