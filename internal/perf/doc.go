// Package perf samples the stacks of chosen processes with the Linux
// perf_event_open interface and decodes what the kernel writes.
//
// A [Session] owns one mmap ring per CPU. Sampling events for the targets
// (per thread × CPU in [ScopeProcess], per CPU in [ScopeSystem]) are
// redirected into those rings with PERF_EVENT_IOC_SET_OUTPUT, so the reader
// polls as many rings as there are CPUs, however many threads it follows.
// Records are decoded in place, without copying or allocating, into a
// caller-owned [Record]; slices in it alias the ring and are valid only for
// the duration of the callback that receives them.
//
// Timestamps are CLOCK_MONOTONIC nanoseconds (use_clockid), the clock the
// rest of perfprof joins on.
//
// The package decodes records: it turns kernel records into Go values
// (a sample's callchain raw, with its context markers; its user registers
// and stack copy as the kernel wrote them, see [SampleRecord.UserSP]) and keeps
// the set of sampled processes current. Target discovery by executable
// name lives here too ([Scan]). It knows nothing of symbols, spans or the
// collector, and does not unwind: package unwind makes whole user stacks
// of its samples.
package perf
