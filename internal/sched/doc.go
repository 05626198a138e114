// Package sched does the per-thread on/off-CPU accounting behind off-CPU
// profiling: it turns a thread's context-switch records (switch-out and
// switch-in, from perf's context_switch=1) and its on-CPU samples into
//
//   - the CPU time each on-CPU sample stands for, its "CPU delta": the on-CPU
//     time of the thread since the previous call to [Tracker.TakeCPUDelta],
//     which the caller makes once per sample; and
//   - off-CPU sample groups ([Group]): off-CPU time turned into samples of one
//     fixed interval each, to be attributed to the stack where the thread
//     left the CPU.
//
// Off-CPU time is handled the way samply's context-switch handler does it:
// the off-CPU time of a thread is accumulated across sleeps of any length,
// and a group is emitted at a switch-in once the accumulated time has
// crossed one or more multiples of the off-CPU interval; the remainder stays
// for the next sleep. So a thread that switches a million times emits no
// more samples than its off-CPU time is worth (no per-switch flood), there is
// no minimum sleep length, and many short sleeps keep their weight instead of
// being dropped.
//
// Unlike samply, off-CPU time is split by thread state. A switch-out with
// PERF_RECORD_MISC_SWITCH_OUT_PREEMPT set means the thread was preempted
// while still runnable: until it runs again it waits for a CPU ([Runnable]).
// Any other switch-out means the thread blocked: I/O, a lock, a sleep
// ([Blocked]). The state of the switch-out that began an off period holds
// for the whole period. Each state has its own accumulator and emits its own
// groups, so waiting for a CPU and waiting for something else never pool
// into one sample.
//
// The records of one thread must be fed in the order of their timestamps,
// as far as the kernel allows: records from different CPUs can go slightly
// backwards in time (a thread migrates between CPUs whose clocks disagree by
// a little, or a sample is recorded before the switch-in that preceded it).
// The tracker never lets a thread's time run backwards: a timestamp earlier
// than the thread's latest one counts as that latest one, so durations are
// never negative and the accounted on- and off-CPU times of a thread always
// add up to the time between its first record and its current period.
//
// The tracker keeps no history: times are CLOCK_MONOTONIC nanoseconds as
// perf reports them, it knows nothing of stacks, spans or the collector, and
// the caller attaches groups to the switch-out stack it kept. Off-CPU time
// below one interval that is still accumulated when a thread exits is
// dropped, as in samply.
//
// A Tracker is not safe for concurrent use: the caller feeds it from one
// goroutine (records come out of the per-CPU rings merged in time order) or
// serializes calls itself.
package sched
