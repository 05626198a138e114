/* The few kernel types the programs read, declared with
 * preserve_access_index: clang records each field access as a CO-RE
 * relocation, and the loader fixes the offsets up from the running
 * kernel's BTF (/sys/kernel/btf/vmlinux), so no vmlinux.h is needed. */
#ifndef PERFPROF_KERNEL_H
#define PERFPROF_KERNEL_H

struct thread_struct {
	unsigned long fsbase; /* x86-64: the user thread pointer (FS base) */
} __attribute__((preserve_access_index));

struct task_struct {
	struct thread_struct thread;
	int pid;  /* the thread id */
	int tgid; /* the process id */
} __attribute__((preserve_access_index));

#endif
