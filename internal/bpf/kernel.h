/* The few kernel types the programs read, declared with
 * preserve_access_index: clang records each field access as a CO-RE
 * relocation, and the loader fixes the offsets up from the running
 * kernel's BTF (/sys/kernel/btf/vmlinux), so no vmlinux.h is needed. */
#ifndef PERFPROF_KERNEL_H
#define PERFPROF_KERNEL_H

struct thread_struct {
	unsigned long fsbase; /* x86-64: the user thread pointer (FS base) */
} __attribute__((preserve_access_index));

/* A pid namespace is named, as in /proc/PID/ns/pid, by its inode number. */
struct ns_common {
	unsigned int inum;
} __attribute__((preserve_access_index));

struct pid_namespace {
	struct ns_common ns;
} __attribute__((preserve_access_index));

/* One number of a pid: nr as the namespace ns sees it. */
struct upid {
	int nr;
	struct pid_namespace *ns;
} __attribute__((preserve_access_index));

/* A task's pid has a number in its own namespace, at numbers[level], and
 * in each ancestor, at numbers[0] (the initial namespace) to
 * numbers[level - 1]. */
struct pid {
	unsigned int level;
	struct upid numbers[];
} __attribute__((preserve_access_index));

struct task_struct {
	struct thread_struct thread;
	int pid;  /* the thread id, in the initial pid namespace */
	int tgid; /* the process id, in the initial pid namespace */
	struct pid *thread_pid;
	struct task_struct *group_leader;
} __attribute__((preserve_access_index));

#endif
