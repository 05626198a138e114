// Package bpf holds perfprof's eBPF programs and their loaders.
//
// spanctx (spanctx.bpf.c) is two perf_event programs attached, with
// PERF_EVENT_IOC_SET_BPF, to the events of a perf.Session: spanctx_sample
// to the cpu-clock sampling events (perf.Options.BPFProgram), spanctx_switch
// to the context-switch events (perf.Options.BPFSwitchProgram). They run at
// every sample, in the sampled thread's context, just before perf writes
// the sample (a switch-out sample before the switch itself, while the
// thread's memory is still mapped). For a thread of a target process they
// read the span the thread runs, where its process keeps it, and write a
// [Record] with bpf_ktime_get_ns to a BPF ring buffer. They always keep the
// sample. Both start from the thread pointer (FS base, from the BTF
// task_struct, CO-RE):
//
//   - Go ([Program.AddTarget], offsets from the binary by
//     internal/goruntime): the g pointer in the runtime's TLS slot; g itself
//     when it has a goroutine id, else g.m.curg (g0 and gsignal work for
//     curg) as the user goroutine; the span and trace keys in its pprof
//     labels, their hex values decoded.
//   - OpenTelemetry thread context, OTEP 4947 ([Program.AddThreadContextTarget],
//     location from internal/otelctx.LocateTLS): otel_thread_ctx_v1 at a
//     static offset from the thread pointer, or through the thread's DTV for
//     a dynamic TLS block; the record it points to, whose ids are taken only
//     when its valid byte is 1 (FlagNotValid otherwise: being written).
//
// Every pid the programs take or write is in the collector's pid
// namespace ([PidNamespace]), where perf names the processes of its
// samples and /proc the processes discovery finds: a collector in a
// container or pod has one of its own. There the programs read a task's
// number from its struct pid at the collector's level (CO-RE), and a task
// with no number there (the host's, another pod's) is no target, whatever
// its pid is elsewhere. Load first runs pidns_self (a syscall program) on
// one of the collector's threads and refuses to load (ErrPidNamespace)
// unless it reads the ids getpid and gettid return; in the initial
// namespace the programs take the task's own fields.
//
// With Options.DropOthers the programs return 0 for the samples of
// processes that are not targets ([Program.AddPlainTarget] keeps a process
// whose span is not read), so that per-CPU events cost what sampling the
// targets costs.
//
// The scheduler program, spanctx_sched_switch (tp_btf/sched_switch),
// loaded with Options.SchedInterval and attached by [Program.AttachSched]:
// the off-CPU capture (sched.enabled) the profiler uses by default where
// eBPF runs, in place of perf's context-switch events. schedacct.h is internal/sched's
// Tracker written for BPF (off-CPU time accumulated per thread and state,
// a group only at a crossing of the interval, the CPU delta of each
// sample), checked against the Tracker record for record by
// TestSchedAcctMatchesTracker through a syscall test driver. The program
// keeps it for target threads, with the user stack and the span of the
// switch-out that began each off period, and writes a group to its own
// ring at the switch-in that crossed; [Program.DrainSched] reads the
// groups ([SchedRecord]). Its maps hold ~5 MiB, so they are not made
// without SchedInterval. When it cannot be loaded or attached the
// profiler loads the other programs alone, and perf's switch events run
// spanctx_switch.
//
// This package does not pair a record with its perf sample: the profiler
// does, in its context store (internal/profiler), by process, thread and
// nearest time. The record is in the ring buffer before perf writes the
// sample, so a reader that drains the ring buffer ([Program.Drain]) after
// reading a sample has its record; the record's time is 1–3 µs after the
// sample's (perf reads the clock and walks the callchain first).
//
// Cost, measured with the kernel's BPF run-time statistics on a 2-CPU
// virtual machine (README, Cost): at 999 Hz 1.7–2.6 µs a run for Go
// labels, 1.4–2.3 µs for thread contexts, most of it dependent reads of
// the target's memory (g, its labels, their values; the DTV, the record).
//
// Needs: CAP_BPF and CAP_PERFMON (or root), kernel BTF
// (/sys/kernel/btf/vmlinux), Linux 5.11 (ring buffers, BTF task pointer). Without them Load
// fails with ErrPermission or ErrNotSupported and the caller goes on
// without labels (the (thread, time) join). Go 1.23 and older keep labels
// in a map the program does not read yet: their samples carry no span.
//
// Objects are built by bpf2go (gen.go) and committed; `make generate`
// rebuilds them.
package bpf
