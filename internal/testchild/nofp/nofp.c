// nofp is a C program built at -O2 without frame pointers, as gcc builds C
// by default on x86-64: two threads calling, through three levels of its
// own functions, into Debian's libz (crc32, compress2) and libc (memset,
// qsort), whose Debian builds have no frame pointers either. Each level
// works after its call, so that no call is a tail call and the true path is
// main or start_thread -> worker -> level1 -> level2 -> level3 -> library.
// Its buffers are thread-local, not on the stack: a 36 KiB frame would not
// fit a 16 KiB stack copy.
//
// Without arguments it prints "ready PID" and works until killed. With
// ROUNDS [THREADS] it is the no-frame-pointer workload of test/overhead: it
// prints "ready PID", waits for a line on stdin, runs ROUNDS rounds on each
// of its THREADS threads (1 or 2, default 2), prints "done ROUNDS" and
// exits.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
static unsigned char src[1 << 14];
volatile unsigned long sink;
static long rounds = -1;
static int cmp(const void *a, const void *b) { return *(const unsigned char *)a - *(const unsigned char *)b; }
static __thread unsigned char dst[1 << 15], tmp[1 << 12];
__attribute__((noinline)) unsigned long level3(int i) {
	uLongf n = sizeof dst;
	switch (i % 3) {
	case 0: compress2(dst, &n, src, sizeof src, 1); return n;
	case 1: memset(tmp, i, sizeof tmp); qsort(tmp, sizeof tmp, 1, cmp); return tmp[7];
	default: return crc32(0, src, sizeof src);
	}
}
__attribute__((noinline)) unsigned long level2(int i) { unsigned long s = level3(i); sink += s; return s ^ 3; }
__attribute__((noinline)) unsigned long level1(int i) { unsigned long s = level2(i); sink ^= s; return s + 1; }
static void *worker(void *arg) {
	for (long i = 0; rounds < 0 || i < rounds; i++) sink += level1(i);
	return arg;
}
int main(int argc, char **argv) {
	for (unsigned i = 0; i < sizeof src; i++) src[i] = rand();
	int threads = 2;
	if (argc > 1) rounds = atol(argv[1]);
	if (argc > 2) threads = atoi(argv[2]);
	printf("ready %d\n", getpid());
	fflush(stdout);
	if (rounds >= 0) {
		char line[16];
		if (!fgets(line, sizeof line, stdin)) return 1;
	}
	pthread_t t;
	if (threads > 1) pthread_create(&t, 0, worker, 0);
	worker(0);
	if (threads > 1) pthread_join(t, 0);
	printf("done %ld\n", rounds);
	return 0;
}
