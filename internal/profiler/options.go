package profiler

import (
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/perfprof/perfprof/internal/container"
	"github.com/perfprof/perfprof/internal/limits"
	"github.com/perfprof/perfprof/internal/perf"
)

// Options configure a [Profiler]. The zero values of the optional fields
// take the defaults noted.
type Options struct {
	// Pids are sampled from Open; each must exist then.
	Pids []int
	// Executables, Cgroups and ContainerIDs select the running processes
	// to sample, at Open and every DiscoveryInterval: a process is
	// sampled when it matches each of them that is not empty. Executables
	// match the base name of the executable (or its path, or the comm);
	// Cgroups are path.Match patterns over a process's cgroup paths and
	// their ancestors; ContainerIDs the container id of its cgroup, or a
	// prefix of at least 12 characters (container.MatchID).
	Executables  []string
	Cgroups      []string
	ContainerIDs []string
	// DiscoveryInterval: default 1 s.
	DiscoveryInterval time.Duration

	// Perf is the sampling configuration (scope, frequency, kernel
	// stacks, ring size, sched capture) as asked for. The session's is
	// Open's plan of it: the stack copies that Unwind and
	// RecoverLeafCaller need, per-CPU events for the eBPF programs, sched
	// capture by the scheduler program (see plan).
	Perf perf.Options
	// OffCPUInterval is the off-CPU sampling interval of sched capture:
	// off-CPU time is accumulated across sleeps and emitted in multiples
	// of it. Default 10 ms.
	OffCPUInterval time.Duration
	// SchedMinBlock: off periods shorter than this are not off-CPU time
	// (offcputime's --min-block-time); 0 keeps them all.
	SchedMinBlock time.Duration
	// SchedCaptureGap, SchedCaptureEvery and SchedMaxRate tune the eBPF
	// scheduler program (bpf.Options.CaptureGap, CaptureEvery, MaxRate):
	// a thread's switch-out stack and span are read when SchedCaptureEvery
	// switch-outs and SchedCaptureGap passed since its last capture, and a
	// target writes at most SchedMaxRate groups of off-CPU time a second,
	// holding the rest back into later ones.
	SchedCaptureGap   time.Duration
	SchedCaptureEvery int
	SchedMaxRate      int
	// SchedPerfFallback: with Perf.Sched and the eBPF scheduler program
	// unavailable, capture context switches with perf events, at a cost
	// to switch-heavy targets ten times the program's; otherwise sched
	// capture is then off, and Stats.OffCPU.Reason says why.
	SchedPerfFallback bool
	// RecoverLeafCaller restores the caller of a function sampled before
	// it pushed a frame (see unwind.InsertLeafCaller).
	RecoverLeafCaller bool
	// Unwind says how user stacks are found (see UnwindMode); with
	// UnwindAuto and UnwindDWARF each on-CPU sample copies
	// UnwindStackBytes of its user stack (default
	// DefaultUnwindStackBytes, at most MaxUnwindStackBytes), and the
	// rings default to stackRingPages.
	Unwind           UnwindMode
	UnwindStackBytes uint32
	// MaxPendingUnwindBytes bounds the stack copies of the samples that
	// wait for their process's unwind tables to be read (see
	// UnwindStats.Pending), across processes; one process holds at most
	// a quarter of it. Default DefaultMaxPendingUnwindBytes.
	MaxPendingUnwindBytes int64

	// Symbolize resolves frames to functions and lines; without it
	// locations keep their raw addresses with their mappings and build ids.
	Symbolize bool
	// MaxSymbolBytes bounds the memory of parsed binaries held for
	// symbolization (symbolize.Options.MaxBytes). Default 256 MiB.
	MaxSymbolBytes int64

	// JVMPerfMap asks target JVMs (HotSpot, JDK 17 and later) to write
	// their perf maps (jcmd Compiler.perfmap) over the attach mechanism,
	// so that their JIT frames are named: when they are attached, and
	// when a report finds JIT frames the map does not name, at most every
	// JVMRefreshInterval (default 1 s; longer while requests name nothing
	// more). Their full thread names are read then too.
	JVMPerfMap         bool
	JVMRefreshInterval time.Duration

	// Window is how long a sample waits for the spans that cover it.
	Window time.Duration
	// LinkAmbiguous links a sample that unrelated spans cover on its
	// thread (see tidmap.Resolve) to the latest of them to start, as the
	// join did before it knew better, with SourceThreadLatest; otherwise
	// such a sample is left unlinked and counted as ambiguous. For
	// comparison and for users who want every sample linked.
	LinkAmbiguous bool
	// MaxBufferedSamples bounds the samples waiting for the window: past
	// it the oldest are taken early, without waiting for their spans, and
	// at twice it new samples are dropped. Default 1 000 000.
	MaxBufferedSamples int
	// MaxSpans bounds the spans held for the join. Default 100 000.
	MaxSpans int

	// Records delivers perf records; nil opens a perf session with Perf.
	Records Records
	// Contexts, when set, delivers the span each thread ran at each
	// sample, read inside the process; the samples it covers are linked
	// by it rather than by the (thread, time) join. When nil and the
	// profiler opens its own perf session, EBPF decides.
	Contexts Contexts
	// EBPF says whether an eBPF program on the sampling events reads the
	// span of each sample of a Go target from its goroutine's pprof
	// labels (SpanLabelKey, TraceLabelKey: default span_id, trace_id).
	EBPF                        EBPFMode
	SpanLabelKey, TraceLabelKey string
	// EBPFRunStats turns on the kernel's BPF run-time statistics
	// (bpf.Options.RunStats), for Stats.EBPF.Program.RunCount and RunTime.
	EBPFRunStats bool

	// Procs answers questions about processes; nil reads /proc.
	Procs Procs
	// Logger receives what the engine has to say; nil discards it.
	Logger *zap.Logger
	// Limits counts the bounds that targets' and clients' data reach
	// (files refused, DWARF too deep, attach replies too large, spans
	// that end far in the future: see package limits);
	// nil: a Recorder that logs each bound once per subject to Logger.
	Limits *limits.Recorder
}

// stackRingPages sizes the ring of each of cpus CPUs when samples copy
// stacks: a second of samples of one CPU at frequency Hz (a CPU runs one
// thread at a time, so its samples come at most at that rate), at least
// 64 pages and at most unwindRingPages, and all of them together at most
// maxStackRingBytes. The reader passes over the rings at half full (and
// every 100 ms while a target is new), so a second leaves it half a second
// of slack. At 99 Hz a ring is 2 MiB (4 MiB from 121 Hz) of pinned memory
// (VmPin, outside RSS). Every wake-up costs the collector far more than its
// context switch: at 99 Hz on the C target 2 MiB rings cost it 0.21-0.28%
// of a core where 1 MiB rings, waking twice as often, cost 0.26-0.34%
// (3 interleaved rounds).
func stackRingPages(frequency, stackBytes, cpus int) int {
	const perSample = 1 << 10 // header, registers, callchain
	page := os.Getpagesize()
	want := frequency * (stackBytes + perSample) / page
	pages := 64
	for pages < want && pages < unwindRingPages {
		pages *= 2
	}
	for pages > 64 && pages*page*max(cpus, 1) > maxStackRingBytes {
		pages /= 2
	}
	return pages
}

// maxStackRingBytes bounds the pinned memory of the stack rings of all
// CPUs: 32 CPUs get 4 MiB rings, 64 CPUs 2 MiB. Hosts with more CPUs than
// that rarely profile a target at such rates on all of them; ring_pages
// sets the size. The count is of online CPUs (perf.RingCPUs), which a
// container with a cpuset of its own still has a ring on each of.
const maxStackRingBytes = 128 << 20

func (o *Options) setDefaults() {
	if o.DiscoveryInterval <= 0 {
		o.DiscoveryInterval = time.Second
	}
	if o.OffCPUInterval <= 0 {
		o.OffCPUInterval = 10 * time.Millisecond
	}
	if o.MaxSymbolBytes <= 0 {
		o.MaxSymbolBytes = 256 << 20
	}
	if o.MaxBufferedSamples <= 0 {
		o.MaxBufferedSamples = 1_000_000
	}
	if o.MaxSpans <= 0 {
		o.MaxSpans = 100_000
	}
	if o.JVMRefreshInterval <= 0 {
		o.JVMRefreshInterval = time.Second
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Limits == nil {
		log := o.Logger
		o.Limits = limits.NewRecorder(func(k limits.Kind, subject string, err error) {
			log.Warn("A target's or client's data reached a bound; what it concerns is left out, the rest is profiled",
				zap.Stringer("bound", k), zap.String("subject", subject), zap.Error(err))
		})
	}
	if o.Procs == nil {
		o.Procs = procfs{}
	}
	if o.Unwind != UnwindFramePointer {
		if o.UnwindStackBytes == 0 {
			o.UnwindStackBytes = DefaultUnwindStackBytes
		}
		o.UnwindStackBytes = min(o.UnwindStackBytes, MaxUnwindStackBytes)
		if o.MaxPendingUnwindBytes <= 0 {
			o.MaxPendingUnwindBytes = DefaultMaxPendingUnwindBytes
		}
	}
}

// leafStackBytes is the user stack copied per sample for
// RecoverLeafCaller: the return address is at SP, so 8 would do; 512
// leaves room to recover deeper prologue states later, for little more
// (the kernel's copy is a memcpy and the record stays under a cache page).
const leafStackBytes = 512

// discovers says whether discovery looks for processes.
func (o *Options) discovers() bool {
	return len(o.Executables) > 0 || !o.cgroups().Empty()
}

// cgroups is the cgroup part of what discovery looks for.
func (o *Options) cgroups() container.Selector {
	return container.Selector{Paths: o.Cgroups, IDs: o.ContainerIDs}
}
