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
//	snaps, err = p.Close()        // stop sampling; the last report
//
// It knows nothing of the OpenTelemetry Collector: the receiver turns
// configuration into [Options], OTLP spans into [Span]s and [Snapshot]s
// into pdata profiles.
//
// It has three parts, each with one job:
//
//   - The registry (registry.go) knows the target process images: which
//     process has each pid, the images exec replaced, the processes gone
//     whose samples are still to be reported, and when a pid passed to
//     another process. Open's plan (plan.go) is what it could make of the
//     Options: the perf session, the span reader, sched capture.
//   - Workers keep what the report needs to know of the processes beyond
//     their records, and publish it on the process states: the facts
//     worker names threads and reads published process contexts
//     (facts.go), the symbol worker reads memory maps and unwind tables
//     (symbols.go, pending.go), the JIT poller perf maps, the JVM worker
//     asks JVMs for theirs (jvm.go), discovery attaches and releases
//     processes.
//   - The report (take.go, join.go) is a function of the samples
//     buffered, the spans and span contexts indexed, and those facts: it
//     splits off what the window passed, joins and symbolizes it, and
//     reads no file of a target, asks no JVM and attaches nothing. Before
//     it, [Profiler.Take] has the facts worker and the JIT poller catch up
//     with the records read so far, waiting for them a bounded time.
//
// Records come in on the read loop, which takes them off the perf rings
// and never waits for anything slow: it interns raw callchains and notes
// new threads, and reads no file; stacks are symbolized by the report,
// under a lock of their own. The span contexts read at sample time (eBPF,
// or Options.Contexts) come in on a goroutine of their own.
//
// Records come through the [Records] interface and process facts through
// [Procs], so the join, the context-switch pairing and the batch splitting
// are tested with synthetic records (see package profilertest); the perf
// session behind them is tested against the kernel in package perf.
package profiler
