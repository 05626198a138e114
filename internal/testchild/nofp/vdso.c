// vdso.c is the C target that spends its time in the vDSO: clock_gettime
// in a loop, the vDSO's frames unwound by its own .eh_frame (read from the
// process's memory).
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
volatile unsigned long sink;
__attribute__((noinline)) unsigned long level3(int i) {
	struct timespec ts;
	for (int k = 0; k < 1000; k++) { clock_gettime(CLOCK_MONOTONIC, &ts); sink += ts.tv_nsec; }
	return sink + i;
}
__attribute__((noinline)) unsigned long level2(int i) { unsigned long s = level3(i); sink += s; return s ^ 3; }
__attribute__((noinline)) unsigned long level1(int i) { unsigned long s = level2(i); sink ^= s; return s + 1; }
static void *worker(void *arg) { for (int i = 0;; i++) sink += level1(i); return arg; }
int main(void) {
	pthread_t t;
	pthread_create(&t, 0, worker, 0);
	printf("ready %d\n", getpid());
	fflush(stdout);
	worker(0);
}
