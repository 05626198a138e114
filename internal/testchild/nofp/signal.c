// signal.c is the C target with a profiling timer: every millisecond of CPU
// a SIGPROF handler burns in inHandler, on the thread's stack, so that
// samples there unwind through the kernel's signal frame (libc's
// __restore_rt) into whatever the signal interrupted.
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>
volatile unsigned long sink;
__attribute__((noinline)) void inHandler(void) {
	for (int i = 0; i < 1000000; i++) sink = sink * 31 + i;
}
static void handler(int sig) { inHandler(); sink += sig; }
__attribute__((noinline)) unsigned long level3(int i) {
	unsigned long x = i;
	for (int k = 0; k < 100000; k++) x = x * 6364136223846793005UL + k;
	return x;
}
__attribute__((noinline)) unsigned long level2(int i) { unsigned long s = level3(i); sink += s; return s ^ 3; }
__attribute__((noinline)) unsigned long level1(int i) { unsigned long s = level2(i); sink ^= s; return s + 1; }
static void *worker(void *arg) { for (int i = 0;; i++) sink += level1(i); return arg; }
int main(void) {
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = handler;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGPROF, &sa, 0);
	struct itimerval it = {{0, 1000}, {0, 1000}};
	setitimer(ITIMER_PROF, &it, 0);
	pthread_t t;
	pthread_create(&t, 0, worker, 0);
	printf("ready %d\n", getpid());
	fflush(stdout);
	worker(0);
}
