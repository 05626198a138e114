// Package bpf holds perfprof's eBPF programs and their loaders.
//
// golabels (c/golabels.bpf.c) is a perf_event program attached, with
// PERF_EVENT_IOC_SET_BPF, to the cpu-clock sampling events of a
// perf.Session (perf.Options.BPFProgram). It runs at every sample, in the
// sampled thread's context, just before perf writes the sample. For a
// thread of a target process (AddTarget) it reads the thread's g pointer
// from its TLS (FS base from task_struct via CO-RE, then the runtime's
// slot), follows g.m.curg to the user goroutine, finds the span and trace
// keys in that goroutine's pprof labels, decodes their hex values, and
// writes a [Record] with bpf_ktime_get_ns to a BPF ring buffer. It always
// keeps the sample. Offsets come from the target binary
// (internal/goruntime), per process, in the targets map.
//
// Pairing a record with its perf sample is left to user space: same tid,
// nearest time ([Pairer]). The record is written first, a few hundred
// nanoseconds before perf's own timestamp.
//
// Needs: CAP_BPF and CAP_PERFMON (or root), kernel BTF
// (/sys/kernel/btf/vmlinux), BPF ring buffers (5.8). Without them Load
// fails with ErrPermission or ErrNotSupported and the caller goes on
// without labels (the (thread, time) join). Go 1.23 and older keep labels
// in a map the program does not read yet: their samples carry no span.
//
// Objects are built by bpf2go (gen.go) and committed; `make generate`
// rebuilds them.
package bpf
