// Package bpf holds perfprof's eBPF programs and their loaders.
//
// golabels (golabels.bpf.c) is a perf_event program attached, with
// PERF_EVENT_IOC_SET_BPF, to the cpu-clock sampling events of a
// perf.Session (perf.Options.BPFProgram). It runs at every sample, in the
// sampled thread's context, just before perf writes the sample. For a
// thread of a target process (AddTarget) it reads the thread's g pointer
// from its TLS (FS base from the BTF task_struct, CO-RE, then the
// runtime's slot), takes g itself when it has a goroutine id or else
// g.m.curg (g0 and gsignal work for curg) as the user goroutine, finds the span and trace
// keys in that goroutine's pprof labels, decodes their hex values, and
// writes a [Record] with bpf_ktime_get_ns to a BPF ring buffer. It always
// keeps the sample. Offsets come from the target binary
// (internal/goruntime), per process, in the targets map.
//
// Pairing a record with its perf sample is left to user space: same tid,
// nearest time ([Pairer]). The record is in the ring buffer before perf
// writes the sample, so a reader that drains the ring buffer ([Program.Drain])
// after reading a sample has its record; the record's time is 1–3 µs
// after the sample's (perf reads the clock and walks the callchain first).
//
// Cost, measured with the kernel's BPF run-time statistics on a 2-CPU
// virtual machine: 1.1–1.7 µs a run (0.1–0.2% of a CPU at 999 Hz), most of
// it dependent reads of the target's memory (g, its labels, their values).
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
