/*
 * hostile is a target built to take a profiler down. Every trick needs no
 * privilege; a node-wide collector profiles whatever process matches it.
 *
 *   hostile LIBJVM
 *
 * It
 *   - runs code in anonymous executable memory (as a JIT does), and makes
 *     its perf map, /tmp/perf-PID.map, a FIFO: a reader that opens it
 *     without O_NONBLOCK waits for a writer that never comes;
 *   - maps the file LIBJVM (any file named libjvm.so) so that it looks like
 *     a HotSpot JVM, and listens on the JVM's attach socket,
 *     /tmp/.java_pidPID, where it answers every request with status 0 and
 *     then an endless stream of one-byte lines, until the client hangs up;
 *   - burns CPU in hostile_nested, which the test gives a forged DWARF
 *     subprogram of 100 000 nested lexical blocks, and links (by
 *     .gnu_debuglink, set by the test) to a debug file that is a link to
 *     /dev/zero or a FIFO.
 *
 * It prints "ready PID" once all of that is in place, and
 * "attach N" after each attach connection it served (N bytes sent).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static volatile unsigned long sink;

/* jit_body is copied into anonymous memory and called there. */
__attribute__((noinline)) static unsigned long jit_body(unsigned long n) {
	unsigned long x = 1;
	for (unsigned long i = 0; i < n; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}

/* hostile_nested is the function of the forged DWARF. */
__attribute__((noinline)) void hostile_nested(unsigned long n) {
	unsigned long x = 3;
	for (unsigned long i = 0; i < n; i++)
		x = x * 2862933555777941757UL + 3037000493UL;
	sink += x;
}

static void *nested_thread(void *arg) {
	(void)arg;
	for (;;)
		hostile_nested(1000000);
	return NULL;
}

static void *attach_thread(void *arg) {
	int ls = *(int *)arg;
	static char garbage[1 << 16];
	for (size_t i = 0; i < sizeof garbage; i += 2) {
		garbage[i] = 'x';
		garbage[i + 1] = '\n';
	}
	for (;;) {
		int c = accept(ls, NULL, NULL);
		if (c < 0)
			continue;
		char req[4096];
		(void)read(c, req, sizeof req);
		long sent = 0;
		if (write(c, "0\n", 2) == 2) {
			for (;;) {
				ssize_t n = write(c, garbage, sizeof garbage);
				if (n <= 0)
					break;
				sent += n;
			}
		}
		close(c);
		printf("attach %ld\n", sent);
		fflush(stdout);
	}
	return NULL;
}

int main(int argc, char **argv) {
	if (argc != 2) {
		fprintf(stderr, "usage: hostile LIBJVM\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	signal(SIGQUIT, SIG_IGN);
	char path[256];

	snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
	unlink(path);
	if (mkfifo(path, 0644) != 0) {
		perror("mkfifo");
		return 1;
	}

	int jvm = open(argv[1], O_RDONLY);
	if (jvm < 0 || mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, jvm, 0) == MAP_FAILED) {
		perror(argv[1]);
		return 1;
	}
	int ls = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof sa.sun_path, "/tmp/.java_pid%d", (int)getpid());
	unlink(sa.sun_path);
	if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(ls, 8) != 0) {
		perror("attach socket");
		return 1;
	}
	pthread_t t;
	pthread_create(&t, NULL, attach_thread, &ls);
	pthread_create(&t, NULL, nested_thread, NULL);

	long page = sysconf(_SC_PAGESIZE);
	unsigned char *code = mmap(NULL, page, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (code == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	memcpy(code, (void *)jit_body, 128);
	unsigned long (*fn)(unsigned long) = (unsigned long (*)(unsigned long))code;

	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	for (;;)
		sink += fn(1000000);
}
