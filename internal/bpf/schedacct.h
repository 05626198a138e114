/* schedacct: on/off-CPU accounting of a thread from its context switches
 * and on-CPU samples, in the kernel. It is internal/sched's Tracker (the
 * reference; see its package doc) written for BPF: off-CPU time is summed
 * per thread and state (blocked, runnable) across sleeps of any length, and
 * only a crossing of one or more multiples of the interval makes a group;
 * the on-CPU time since the previous sample is the sample's CPU delta. A
 * thread's time never runs backwards. TestSchedAcctMatchesTracker feeds
 * generated sequences to both and compares. */
#ifndef PERFPROF_SCHEDACCT_H
#define PERFPROF_SCHEDACCT_H

#include <linux/types.h>

enum {
	ACCT_BLOCKED = 1,  /* sched.Blocked */
	ACCT_RUNNABLE = 2, /* sched.Runnable */
};

/* The state of one thread (sched.thread, without the totals). */
struct thread_acct {
	__u64 since;      /* start of the current period: the thread's latest time */
	__u64 cpu_delta;  /* on-CPU ns not yet taken by a sample */
	__u64 pending[2]; /* off-CPU ns below one interval, per state */
	__u8 off_cpu;     /* off-CPU since since (else on-CPU) */
	__u8 off_state;   /* ACCT_*: the state of this off period */
	__u8 _pad[6];
};

/* SC_STACK_MAX is the deepest user stack kept of a switch-out. */
#define SC_STACK_MAX 64

/* What the scheduler program keeps of a target thread: its accounting, and
 * the switch-out that began its current (or last) off period: the stack
 * where it left the CPU and the span it was running then. */
struct thread_state {
	struct thread_acct acct;
	__u64 out_time;  /* of the switch-out */
	__u32 out_flags; /* SC_* of the span read at the switch-out */
	__u32 nframes;   /* of ustack */
	__u8 span_id[8];
	__u8 trace_id[16];
	__u64 ustack[SC_STACK_MAX];
};

/* A group of off-CPU time (sched.Group). */
struct acct_group {
	__u64 begin, end, count;
	__u32 state;
	__u32 _pad;
};

static __always_inline __u64 acct_elapsed(struct thread_acct *th, __u64 ts)
{
	if (ts <= th->since)
		return 0;
	__u64 d = ts - th->since;
	th->since = ts;
	return d;
}

/* acct_switch_out: the thread left the CPU at ts (sched.Tracker.SwitchOut
 * of a known thread). A second switch-out without a switch-in between is
 * ignored. */
static __always_inline void acct_switch_out(struct thread_acct *th, __u64 ts, int preempted)
{
	if (th->off_cpu)
		return;
	th->cpu_delta += acct_elapsed(th, ts);
	th->off_cpu = 1;
	th->off_state = preempted ? ACCT_RUNNABLE : ACCT_BLOCKED;
}

/* acct_run: the thread runs at ts, by a switch-in or an on-CPU sample
 * (sched.Tracker.run). It returns 1 and fills g when the off period that
 * ends here makes its state's off-CPU time cross the interval. */
static __always_inline int acct_run(struct thread_acct *th, __u64 ts, __u64 interval, struct acct_group *g)
{
	__u64 d = acct_elapsed(th, ts);
	if (!th->off_cpu) {
		th->cpu_delta += d;
		return 0;
	}
	th->off_cpu = 0;
	int i = th->off_state == ACCT_RUNNABLE;
	__u64 a = th->pending[i & 1] + d;
	if (a < interval || !interval) {
		th->pending[i & 1] = a;
		return 0;
	}
	__u64 count = a / interval;
	__u64 rem = a - count * interval;
	th->pending[i & 1] = rem;
	g->begin = th->since - (a - interval);
	g->end = th->since - rem;
	g->count = count;
	g->state = th->off_state;
	return 1;
}

/* acct_take_cpu_delta returns the on-CPU ns since the previous call and
 * resets it (sched.Tracker.TakeCPUDelta). */
static __always_inline __u64 acct_take_cpu_delta(struct thread_acct *th)
{
	__u64 d = th->cpu_delta;
	th->cpu_delta = 0;
	return d;
}

/* One group of off-CPU time of a target thread, in the sched_records ring
 * buffer: written at the switch-in that crossed the interval, with the
 * switch-out that began the off period that ended there. */
struct sched_record {
	__u64 begin, end, count; /* CLOCK_MONOTONIC ns; count intervals */
	__u64 out_time;          /* the switch-out that began the last off period */
	__u32 pid, tid;
	__u32 state;     /* ACCT_* */
	__u32 out_flags; /* SC_* of the span read at the switch-out */
	__u8 span_id[8];
	__u8 trace_id[16];
	__u32 nframes;
	__u32 _pad;
	__u64 ustack[SC_STACK_MAX];
};

/* --- the test driver's context (BPF_PROG_TEST_RUN of schedacct_test) --- */

#define ACCT_BATCH 64

enum {
	ACCT_EV_OUT = 1,    /* switch-out */
	ACCT_EV_IN = 2,     /* switch-in */
	ACCT_EV_SAMPLE = 3, /* on-CPU sample: run, then take the CPU delta */
	ACCT_EV_EXIT = 4,   /* the thread exits */
};

struct acct_event {
	__u64 ts;
	__u32 tid;
	__u8 kind;      /* ACCT_EV_* */
	__u8 preempted; /* switch-out: still runnable */
	__u16 _pad;
};

struct acct_result {
	struct acct_group group;
	__u64 cpu_delta; /* ACCT_EV_SAMPLE */
	__u32 grouped;   /* group is set */
	__u32 _pad;
};

/* The driver's context: the events are in acct_events[0:n], the results go
 * to acct_results[0:n]. */
struct acct_batch {
	__u64 interval;
	__u32 n;
	__u32 _pad;
};

#endif
