package profiler

import (
	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/sched"
	"github.com/perfprof/perfprof/internal/symbolize"
)

// Snapshot is what one process produced between two reports: its samples,
// joined to spans, and their symbolized stacks.
type Snapshot struct {
	Pid  int
	Exe  string // path of the executable; "" when unknown
	Comm string
	// StartTime is the process's start time in clock ticks since boot
	// (field 22 of /proc/PID/stat): with Pid it names the process, as
	// pids are reused.
	StartTime uint64
	// Resource is the caller's handle of the process's span resource
	// (see [Span.Resource]): the one most of its linked samples share,
	// else the one its spans named it by ([Profiler.NameProcess]), else
	// the last it had; -1 when none.
	Resource int32
	// Start and End bound the report window in Unix ns, [Start, End).
	// Records read late may predate Start; the profile widens to them.
	Start, End uint64
	// ClockOffset is the Unix − CLOCK_MONOTONIC offset the snapshot's
	// times were converted with: a time's monotonic value is exactly
	// ClockOffset.Mono(time).
	ClockOffset clock.Fixed
	Samples     []Sample
	// Stacks are the stacks the samples index, leaf first.
	Stacks  [][]*Location
	Threads map[uint32]string // names of the samples' threads
	// ContainerID and PodUID are the process's container and Kubernetes
	// pod, from its cgroup paths; "" when they name none.
	ContainerID, PodUID string
	// ProcessContext is the resource the process publishes itself (OTEP
	// 4719's OTEL_CTX mapping: service.name, ...), nil when it publishes
	// none: it names the process before, or without, any span.
	ProcessContext map[string]any
	// ContextAttrs are the attribute sets of the thread context records
	// the samples were read in (OTEP 4947: http.route, ...), decoded with
	// the key map of the process's context; Link.Attrs indexes them.
	// ContextAttrs[0] is the empty set.
	ContextAttrs [][]Attr
}

// Attr is one attribute of a thread context record, named by the
// process's key map.
type Attr struct {
	Key, Value string
}

// Sample is one on-CPU perf sample, or one group of off-CPU time.
type Sample struct {
	Time uint64 // Unix ns
	// Weight is, on-CPU, the thread's CPU time since its previous sample
	// (0 when unknown: without sched capture) and, off-CPU, the time the
	// group stands for; both ns.
	Weight uint64
	Tid    uint32
	CPU    uint32
	Stack  int32       // index into Snapshot.Stacks; -1: unknown (off-CPU only)
	State  sched.State // 0: on-CPU
	Link   Link
}

// OffCPU reports whether s is a group of off-CPU time.
func (s *Sample) OffCPU() bool { return s.State != 0 }

// Link is what the join found for a sample.
type Link struct {
	Linked  bool // TraceID and SpanID name the span
	TraceID [16]byte
	SpanID  [8]byte
	Worker  int64  // runtime worker of the span or thread; -1: unknown
	Root    string // name of the span's local root; "" when not linked or not received
	Source  LinkSource
	// Attrs indexes Snapshot.ContextAttrs: the attributes of the thread
	// context record the sample was read in (0: none). A record without
	// a span may have some: the sample is then not Linked.
	Attrs int32
}

// Location is one stack address of one process, resolved. Locations are
// shared by pointer between the stacks of a process, so a dictionary can
// intern them by identity.
type Location struct {
	Addr    uint64
	Kernel  bool
	Mapping *symbolize.Mapping // nil when in no known mapping (or kernel)
	Frames  []symbolize.Frame  // innermost first; empty when unresolved
	// JIT says how JIT code was named by the perf map (NotJIT: code in
	// a file, or the kernel).
	JIT symbolize.JITNaming
}
