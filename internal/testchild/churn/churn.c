// churn starts and ends processes of its own executable many times a second,
// reusing their pids, for the churn test. Every process says what it ran on
// stdout, one line per write (atomic on a pipe), and the launcher says when it reaped
// each child:
//
//	P pid start             a process began (start: field 22 of /proc/PID/stat)
//	S pid start tid t0 t1   a span ran on thread tid from t0 to t1 (CLOCK_REALTIME ns)
//	R pid t                 the launcher reaped its child pid (dead by then)
//
// Modes:
//
//	churn work MS           burn MS ms in spans on the main thread, and a third
//	                        of it on a second thread
//	churn launch S RATE MS  for S seconds start RATE work processes a second
//	                        (every fourth forked without exec); every second a
//	                        storm of 6 exec'ed and 2 exec-less 20 ms workers;
//	                        half the forks first set ns_last_pid so that the
//	                        child gets the pid of a process reaped before
//	churn idle              until stdin closes: a 10 ms span on the main thread,
//	                        10 ms of work in none, 30 ms asleep
//	churn nsspan TID MS     in a pid namespace of its own, a work process whose
//	                        second thread has the namespace-local id TID (as an
//	                        app in a container reports it), spanning all MS ms
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char *self;
static unsigned long long start_ticks;
static int pid;

static long long now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	char buf[256];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (write(1, buf, n) != n)
		_exit(3);
}

// identify reads this process's pid and start time, after a fork too.
static void identify(void)
{
	char buf[1024];
	pid = getpid();
	int fd = open("/proc/self/stat", O_RDONLY);
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		_exit(4);
	buf[n] = 0;
	char *p = strrchr(buf, ')') + 2; // field 3
	for (int field = 3; field < 22; field++)
		p = strchr(p, ' ') + 1;
	start_ticks = strtoull(p, NULL, 10);
}

__attribute__((noinline)) static long spin(long long until)
{
	volatile long x = 1;
	while (now() < until)
		for (int i = 0; i < 2000; i++)
			x = x * 6364136223846793005L + i;
	return x;
}

// spans burns for ms in spans of 10 ms on the calling thread; with
// duty > 1 it sleeps (duty-1) times as long between them.
static void spans(long ms, int duty)
{
	int tid = (int)syscall(SYS_gettid);
	long long end = now() + ms * 1000000LL;
	while (now() < end) {
		long long t0 = now();
		spin(t0 + 10000000LL);
		long long t1 = now();
		say("S %d %llu %d %lld %lld\n", pid, start_ticks, tid, t0, t1);
		if (duty > 1)
			usleep(10000 * (duty - 1));
	}
}

static int helper_duty = 3;

static void *helper(void *arg)
{
	spans((long)arg, helper_duty);
	return NULL;
}

static int work(long ms)
{
	identify();
	say("P %d %llu\n", pid, start_ticks);
	pthread_t th;
	if (pthread_create(&th, NULL, helper, (void *)ms) != 0)
		return 5;
	spans(ms, 1);
	pthread_join(th, NULL);
	return 0;
}

// set_last_pid makes the next fork or thread of this pid namespace get
// id next, if it is free.
static int set_last_pid(int next)
{
	int fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY);
	if (fd < 0)
		return -1;
	char buf[16];
	int n = snprintf(buf, sizeof buf, "%d", next - 1);
	int ok = write(fd, buf, n) == n;
	close(fd);
	return ok ? 0 : -1;
}

static int nsspan(int tid, long ms)
{
	if (unshare(CLONE_NEWPID) != 0)
		return 7;
	pid_t init = fork(); // pid 1 of the namespace
	if (init < 0)
		return 8;
	if (init == 0) {
		// The work process gets tid-1, its second thread tid.
		if (set_last_pid(tid - 1) != 0)
			_exit(9);
		helper_duty = 1;
		pid_t w = fork();
		if (w == 0)
			_exit(work(ms));
		while (wait(NULL) > 0)
			;
		_exit(0);
	}
	int st;
	waitpid(init, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 10;
}

// reaped holds pids of children reaped, to hand out again.
static int reaped[64];
static int nreaped;

static void reap(void)
{
	int st, c;
	while ((c = waitpid(-1, &st, WNOHANG)) > 0) {
		say("R %d %lld\n", c, now());
		if (nreaped < 64)
			reaped[nreaped++] = c;
	}
}

// reuse makes the next fork get the pid of a reaped child, if no other
// process takes it first.
static void reuse(void)
{
	if (nreaped == 0)
		return;
	int want = reaped[0];
	memmove(reaped, reaped + 1, --nreaped * sizeof reaped[0]);
	set_last_pid(want);
}

static void spawn(long ms, int exec, int forcepid)
{
	char arg[16];
	snprintf(arg, sizeof arg, "%ld", ms);
	if (forcepid)
		reuse();
	pid_t c = fork();
	if (c < 0)
		return;
	if (c == 0) {
		if (exec) {
			execl(self, self, "work", arg, (char *)NULL);
			_exit(6);
		}
		_exit(work(ms));
	}
}

static int launch(int secs, int rate, long ms)
{
	long long end = now() + secs * 1000000000LL;
	long long next = now(), storm = now();
	int n = 0;
	while (now() < end) {
		reap();
		if (now() >= storm) {
			for (int i = 0; i < 8; i++)
				spawn(20, i < 6, i % 2);
			storm += 1000000000LL;
		}
		if (now() >= next) {
			spawn(ms, n % 4 != 3, n % 2);
			n++;
			next += 1000000000LL / rate;
		}
		usleep(5000);
	}
	int c;
	while ((c = wait(NULL)) > 0)
		say("R %d %lld\n", c, now());
	return 0;
}

static void *watch_stdin(void *arg)
{
	char c;
	while (read(0, &c, 1) > 0)
		;
	exit(0);
	return arg;
}

int main(int argc, char **argv)
{
	self = argv[0];
	if (argc == 3 && strcmp(argv[1], "work") == 0)
		return work(atol(argv[2]));
	if (argc == 5 && strcmp(argv[1], "launch") == 0)
		return launch(atoi(argv[2]), atoi(argv[3]), atol(argv[4]));
	if (argc == 4 && strcmp(argv[1], "nsspan") == 0)
		return nsspan(atoi(argv[2]), atol(argv[3]));
	if (argc == 2 && strcmp(argv[1], "idle") == 0) {
		identify();
		say("ready %d\n", pid);
		say("P %d %llu\n", pid, start_ticks);
		pthread_t th;
		pthread_create(&th, NULL, watch_stdin, NULL);
		for (;;) {
			spans(10, 1);
			spin(now() + 10000000LL);
			usleep(30000);
		}
	}
	fprintf(stderr, "usage: churn work MS | launch SECONDS RATE MS | idle | nsspan TID MS\n");
	return 2;
}
