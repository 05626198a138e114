// Package profiler is perfprof's engine: it samples target processes
// through a perf session, keeps their samples and context switches in
// per-process batches, accounts off-CPU time, joins every sample to the
// span that ran on its thread at its time, and symbolizes the stacks, all
// behind a small API:
//
//	p, err := profiler.Open(opts) // fails whole: perf denied, a pid missing
//	p.AddSpans(spans)             // as spans arrive (any goroutine)
//	snaps := p.Take(false)        // every report: what the window has passed
//	st := p.Stats()               // cumulative counters for telemetry
//	p.Close()                     // stop sampling; Take(true) then drains
//
// It knows nothing of the OpenTelemetry Collector: the receiver turns
// configuration into [Options], OTLP spans into [Span]s and [Snapshot]s
// into pdata profiles.
//
// Three goroutines work inside: the read loop, which takes records off the
// perf rings and never waits for anything slow (it interns raw callchains;
// it neither symbolizes nor reads binaries, so a binary's first parse, a
// quarter of a second for libc with its debug file, cannot stall a ring);
// discovery, which attaches new processes of the target executables and
// releases exited ones; and a symbol worker, which re-reads memory maps
// when code is mapped, and reads the unwind tables of the processes
// attached or exec'd, whose samples wait for them (pending.go). Stacks are
// symbolized when [Profiler.Take] builds a report, under a lock of their
// own.
//
// Records come through the [Source] interface and process facts through
// [Procs], so the join, the context-switch pairing and the batch splitting
// are tested with synthetic records (see package profilertest); the perf
// session behind them is tested against the kernel in package perf.
package profiler
