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

#include "spanctx.h" /* struct ctx_attrs */

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

/* SC_STACK_MAX is the deepest user stack kept of a switch-out,
 * SC_KSTACK_MAX the deepest kernel stack (kernel_stacks). */
#define SC_STACK_MAX 64
#define SC_KSTACK_MAX 32

/* What the scheduler program keeps of a target thread (task storage): its
 * accounting, the switch-out that began its current (or last) off period,
 * and the latest switch-out captured: the stack where the thread left the
 * CPU and the span it was running then. Capturing costs ~2 µs (the stack
 * walk most of it), so a thread that switches often is not captured at
 * every switch-out: captures spend credit, capture_gap ns each, which
 * accrues with time up to CAPTURE_BURST captures' worth, so that a thread
 * is captured at most once per capture_gap on average while the bursts of
 * one that switches seldom are captured whole (capture_every counts too);
 * a preemption is captured only while a block's capture is left over.
 * When the latest switch-out was not captured, capture_time says which
 * earlier one the stack and span are from. */
#define CAPTURE_BURST 16
struct thread_state {
	struct thread_acct acct;
	__u64 out_time;     /* of the latest switch-out */
	__u64 capture_time; /* of the latest switch-out captured */
	__u64 credit;       /* ns of capture credit at credit_time */
	__u64 credit_time;
	__u32 uncaptured;   /* switch-outs since */
	__u32 out_flags;    /* SC_* of the span read at the capture */
	__u32 nframes;      /* of ustack */
	__u32 nkframes;     /* of kstack */
	__u8 span_id[8];
	__u8 trace_id[16];
	__u64 ustack[SC_STACK_MAX];
	__u64 kstack[SC_KSTACK_MAX];
	struct ctx_attrs attrs; /* out_flags & SC_ATTRS */
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
 * ends here makes its state's off-CPU time cross the interval; -1 when
 * the off period was shorter than min_block, and so not off-CPU time
 * (sched.Tracker.SetMinBlock). */
static __always_inline int acct_run(struct thread_acct *th, __u64 ts, __u64 interval, __u64 min_block,
				    struct acct_group *g)
{
	__u64 d = acct_elapsed(th, ts);
	if (!th->off_cpu) {
		th->cpu_delta += d;
		return 0;
	}
	th->off_cpu = 0;
	if (d < min_block)
		return -1;
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

/* acct_defer puts the time of group g back into its state's pending
 * time: a group not written now (a target over its rate) is written with
 * a later one, so that no off-CPU time is lost. */
static __always_inline void acct_defer(struct thread_acct *th, const struct acct_group *g, __u64 interval)
{
	int i = g->state == ACCT_RUNNABLE;
	th->pending[i & 1] += g->count * interval;
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
	__u64 capture_time;      /* the switch-out the stack and span are from */
	__u32 pid, tid;
	__u32 state;     /* ACCT_* */
	__u32 out_flags; /* SC_* of the span read at the capture */
	__u8 span_id[8];
	__u8 trace_id[16];
	__u32 nframes;
	__u32 nkframes;
	__u64 ustack[SC_STACK_MAX];
	__u64 kstack[SC_KSTACK_MAX]; /* kernel_stacks: where in the kernel it left the CPU */
	struct ctx_attrs attrs;      /* out_flags & SC_ATTRS */
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
	__u32 short_off; /* the off period that ended was below min_block */
};

/* The driver's context: the events are in acct_events[0:n], the results go
 * to acct_results[0:n]. */
struct acct_batch {
	__u64 interval;
	__u64 min_block;
	__u32 n;
	__u32 _pad;
};

#endif
