/*
 * publisher: a single-threaded test program that publishes an OTEP 4719
 * process context and an OTEP 4947 thread context, and writes what is active
 * to a shared file so that a test that stops it knows the truth.
 *
 *   publisher MODE PCTX TRUTHFILE [LIBRARY]
 *
 * MODE:  attach   switch between span 0 and span 1 every millisecond by
 *                 swapping the otel_thread_ctx_v1 pointer
 *        rewrite  the same by rewriting one record in place (valid = 0 during)
 *        tear     leave a record half rewritten, valid = 0, and wait
 *        detach   leave otel_thread_ctx_v1 NULL and wait
 *        threads  start two threads, thread K attaching span K, each printing
 *                 "thread K TID TP VAR"; then wait
 *        work     like attach, but burn the CPU through each millisecond in
 *                 work_in_span0 or work_in_span1 (the active span's), and
 *                 in every fifth period of a span block for 2 ms in
 *                 block_in_span0 or block_in_span1: a profiler's stacks
 *                 then say which span was active at each sample
 * PCTX:  memfd    publish the process context
 *        churn    publish it, then update it every ~20 us (service.version
 *                 alternates "1"/"2") to exercise the readers' retry rule
 *        late     publish it 1.5 s after "started", from a thread of its
 *                 own, as an SDK that starts after the process does
 *        none     publish no process context
 * LIBRARY: with -DTHREADCTX_DLOPEN, the shared library to dlopen for the
 *        thread context functions.
 *
 * Prints "ready PID TP VAR" (decimal: the thread pointer, fs_base, and the
 * address of this thread's otel_thread_ctx_v1), one "span I TRACE SPAN ROUTE
 * USER" line per span, then "started". The truth file holds, once the loop runs,
 * int64 seq and int32 active (the span index, -1 for none), written after each
 * switch.
 */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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
#include "threadctx.h"

#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif
#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U
#endif

static void encode_process_context(struct buf *out, const char *version)
{
	static const char *keys[] = {"http.route", "user.name"};
	struct buf res = {.n = 0};
	char instance[64];

	snprintf(instance, sizeof(instance), "publisher-%d", (int)getpid());
	put_kv_string(&res, 1, "service.name", "otelctx-publisher");
	put_kv_string(&res, 1, "service.instance.id", instance);
	put_kv_string(&res, 1, "service.version", version);
	put_kv_int(&res, 1, "process.pid", getpid());
	out->n = 0;
	put_msg(out, 1, &res); /* ProcessContext.resource */
	/* ProcessContext.attributes (extra_attributes): OTEP 4947's reference data */
	put_kv_string(out, 2, "threadlocal.schema_version", "tls_v1");
	put_kv_strings(out, 2, "threadlocal.attribute_key_map", keys, 2);
}

/* --- OTEP 4719 publication --- */

/* The 32-byte header of the OTEL_CTX mapping. */
struct otel_ctx_header {
	char signature[8];
	uint32_t version;
	uint32_t payload_size;
	uint64_t published_at_ns;
	uint64_t payload;
} __attribute__((packed, aligned(8)));

static struct otel_ctx_header *hdr;
static struct buf payloads[2];
static size_t map_size = 8192;

static uint64_t boottime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void publish(void)
{
	int fd = memfd_create("OTEL_CTX", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_NOEXEC_SEAL);
	if (fd < 0)
		fd = memfd_create("OTEL_CTX", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd >= 0) {
		if (ftruncate(fd, (off_t)map_size) < 0) {
			perror("ftruncate");
			exit(1);
		}
		hdr = mmap(NULL, map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
		close(fd);
	} else {
		hdr = mmap(NULL, map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	}
	if (hdr == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	madvise(hdr, map_size, MADV_DONTFORK);
	encode_process_context(&payloads[0], "1");
	encode_process_context(&payloads[1], "2");
	memcpy(hdr->signature, "OTEL_CTX", 8);
	hdr->version = 2;
	hdr->payload_size = (uint32_t)payloads[0].n;
	hdr->payload = (uint64_t)(uintptr_t)payloads[0].b;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	__atomic_store_n(&hdr->published_at_ns, boottime_ns(), __ATOMIC_RELEASE);
	/* Fails without CONFIG_ANON_VMA_NAME; readers then find /memfd:OTEL_CTX. */
	prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, hdr, map_size, "OTEL_CTX");
}

static void *publish_late(void *arg)
{
	(void)arg;
	struct timespec wait = {1, 500000000};
	nanosleep(&wait, NULL);
	publish();
	return NULL;
}

/* update follows the OTEP 4719 updating protocol: zero the timestamp, swap
 * the payload, then write a new, larger timestamp. */
static void update(int which)
{
	uint64_t old = hdr->published_at_ns, now = boottime_ns();
	if (now <= old)
		now = old + 1;
	__atomic_store_n(&hdr->published_at_ns, 0, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	/* Scribble over the payload pointer in two steps, so that a reader that
	 * ignored the protocol would see a torn header now and then. */
	hdr->payload = 0;
	hdr->payload_size = (uint32_t)payloads[which].n;
	hdr->payload = (uint64_t)(uintptr_t)payloads[which].b;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	__atomic_store_n(&hdr->published_at_ns, now, __ATOMIC_RELAXED);
}

/* --- the loop --- */

/* Static TLS of the executable's own, aligned and sized so that the blocks'
 * offsets from the thread pointer are not trivial. */
__thread char publisher_tls_pad[40] __attribute__((aligned(64)));

struct truth {
	volatile int64_t seq;
	volatile int32_t active;
};

static void (*ctx_init)(int, const uint8_t *, const uint8_t *, const char *);
static void (*ctx_attach)(int);
static void (*ctx_rewrite)(int);
static void (*ctx_tear)(int);
static void *(*ctx_var)(void);

static void load_functions(const char *lib)
{
#ifdef THREADCTX_DLOPEN
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		fprintf(stderr, "dlopen %s: %s\n", lib, dlerror());
		exit(1);
	}
	ctx_init = (void (*)(int, const uint8_t *, const uint8_t *, const char *))dlsym(h, "threadctx_init");
	ctx_attach = (void (*)(int))dlsym(h, "threadctx_attach");
	ctx_rewrite = (void (*)(int))dlsym(h, "threadctx_rewrite");
	ctx_tear = (void (*)(int))dlsym(h, "threadctx_tear");
	ctx_var = (void *(*)(void))dlsym(h, "threadctx_var");
	if (!ctx_init || !ctx_attach || !ctx_rewrite || !ctx_tear || !ctx_var) {
		fprintf(stderr, "dlsym: %s\n", dlerror());
		exit(1);
	}
#else
	(void)lib;
	ctx_init = threadctx_init;
	ctx_attach = threadctx_attach;
	ctx_rewrite = threadctx_rewrite;
	ctx_tear = threadctx_tear;
	ctx_var = threadctx_var;
#endif
}

static void *thread_main(void *arg)
{
	int k = (int)(intptr_t)arg;
	unsigned long fs = 0;

	ctx_attach(k);
	syscall(SYS_arch_prctl, ARCH_GET_FS, &fs);
	flockfile(stdout);
	printf("thread %d %ld %lu %lu\n", k, (long)syscall(SYS_gettid), fs, (unsigned long)(uintptr_t)ctx_var());
	fflush(stdout);
	funlockfile(stdout);
	for (;;)
		pause();
	return NULL;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One function per span, kept out of line and apart, so that the leaf or
 * its caller in a sample's stack names the span that was active. */
volatile uint64_t work_sink;

__attribute__((noinline)) void work_in_span0(uint64_t until)
{
	while (now_ns() < until)
		for (int i = 0; i < 2000; i++)
			work_sink = work_sink * 6364136223846793005u + 1;
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void work_in_span1(uint64_t until)
{
	while (now_ns() < until)
		for (int i = 0; i < 2000; i++)
			work_sink = work_sink * 2862933555777941757u + 3;
	__asm__ volatile("" ::: "memory");
}

/* nanosleep by a syscall instruction of its own: the thread leaves the CPU
 * with its user IP in block_in_span0/1, so the stack of the switch-out
 * names the span without unwinding through libc. */
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

__attribute__((noinline)) void block_in_span0(void)
{
	sleep_2ms();
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void block_in_span1(void)
{
	sleep_2ms();
	__asm__ volatile("nop" ::: "memory");
}

static void work(struct truth *truth)
{
	for (int64_t n = 0;; n++) {
		int i = (int)(n & 1);
		ctx_attach(i);
		truth->active = i;
		truth->seq = n;
		uint64_t until = now_ns() + 1000000;
		if (i)
			work_in_span1(until);
		else
			work_in_span0(until);
		if (n % 10 < 2) {
			if (i)
				block_in_span1();
			else
				block_in_span0();
		}
	}
}

static void hex(const uint8_t *p, int n, char *out)
{
	for (int i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", p[i]);
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: publisher MODE PCTX TRUTHFILE [LIBRARY]\n");
		return 2;
	}
	const char *mode = argv[1], *pctx = argv[2];
	load_functions(argc > 4 ? argv[4] : NULL);

	int tfd = open(argv[3], O_RDWR | O_CREAT, 0644);
	if (tfd < 0 || ftruncate(tfd, 4096) < 0) {
		perror(argv[3]);
		return 1;
	}
	struct truth *truth = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, tfd, 0);
	if (truth == MAP_FAILED) {
		perror("mmap truth");
		return 1;
	}
	truth->active = -1;
	publisher_tls_pad[0] = argv[1][0];

	/* Two spans of two traces; the ids are distinct in every byte so that a
	 * reader that mixes them up is caught. */
	uint8_t tid[2][16], sid[2][8];
	srandom((unsigned)getpid());
	for (int i = 0; i < 2; i++) {
		for (int j = 0; j < 16; j++)
			tid[i][j] = (uint8_t)(random() | 1) ^ (uint8_t)i;
		for (int j = 0; j < 8; j++)
			sid[i][j] = (uint8_t)(random() | 1) ^ (uint8_t)(i << 1);
	}
	static const char *routes[2] = {"/checkout", "/search"};
	for (int i = 0; i < 2; i++)
		ctx_init(i, tid[i], sid[i], routes[i]);
	ctx_attach(-1);

	if (strcmp(pctx, "late") == 0) {
		pthread_t late;
		pthread_create(&late, NULL, publish_late, NULL);
	} else if (strcmp(pctx, "none") != 0) {
		publish();
	}

	unsigned long fs = 0;
	syscall(SYS_arch_prctl, ARCH_GET_FS, &fs);
	printf("ready %d %lu %lu\n", (int)getpid(), fs, (unsigned long)(uintptr_t)ctx_var());
	for (int i = 0; i < 2; i++) {
		char th[33], sh[17];
		hex(tid[i], 16, th);
		hex(sid[i], 8, sh);
		printf("span %d %s %s %s %s\n", i, th, sh, routes[i], i ? "bob!" : "amy!");
	}
	printf("started\n");
	fflush(stdout);

	struct timespec ms = {0, 1000000}, us20 = {0, 20000};
	if (strcmp(mode, "tear") == 0) {
		ctx_tear(0);
		truth->active = -2;
		for (;;)
			pause();
	}
	if (strcmp(mode, "threads") == 0) {
		pthread_t th[2];
		for (int k = 0; k < 2; k++)
			pthread_create(&th[k], NULL, thread_main, (void *)(intptr_t)k);
		for (;;)
			pause();
	}
	if (strcmp(mode, "work") == 0)
		work(truth);
	if (strcmp(mode, "detach") == 0) {
		for (;;)
			pause();
	}
	int rewrite = strcmp(mode, "rewrite") == 0;
	int churn = strcmp(pctx, "churn") == 0;
	for (int64_t n = 0;; n++) {
		int i = (int)(n & 1);
		if (rewrite)
			ctx_rewrite(i);
		else
			ctx_attach(i);
		truth->active = i;
		truth->seq = n;
		if (churn) {
			for (int k = 0; k < 50; k++) {
				update(k & 1);
				nanosleep(&us20, NULL);
			}
		} else {
			nanosleep(&ms, NULL);
		}
	}
}
