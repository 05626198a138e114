package perfprofreceiver

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/collector/config/configgrpc"
	"go.opentelemetry.io/collector/config/confighttp"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.uber.org/zap"

	"github.com/perfprof/perfprof/internal/container"
	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/profiler"
)

// Config configures the perfprof receiver. The mapstructure names are part
// of the user-facing contract.
type Config struct {
	// Targets says which processes to sample.
	Targets TargetsConfig `mapstructure:"targets"`
	// Scope is "process" (events per thread of each target, like
	// `perf record -p`) or "system" (one event per CPU, records of the
	// targets kept; needs CAP_PERFMON).
	Scope string `mapstructure:"scope"`
	// Frequency is the on-CPU sampling frequency in Hz, 1 to 10000.
	Frequency uint64 `mapstructure:"frequency"`
	// KernelStacks adds the kernel part of each stack.
	KernelStacks bool `mapstructure:"kernel_stacks"`
	// ReportInterval is how often profiles are emitted.
	ReportInterval time.Duration `mapstructure:"report_interval"`
	// DiscoveryInterval is how often /proc is scanned for new processes
	// of the target executables and for exited targets.
	DiscoveryInterval time.Duration `mapstructure:"discovery_interval"`
	// RingPages is the size of each per-CPU perf ring in 4 KiB pages, a
	// power of two. Raise it when receiver_perfprof_lost_records grows.
	// Unset (0): 64, or when samples copy their stacks (unwind auto or
	// dwarf) a second of one CPU's samples, up to 1024: 512 (2 MiB) at
	// 99 Hz, 1024 (4 MiB) from 121 Hz; the rings of all CPUs together at
	// most 128 MiB.
	RingPages int `mapstructure:"ring_pages"`
	// Unwind says how the user part of on-CPU stacks is found:
	//   - auto (default): each sample copies the top of its thread's
	//     stack (unwind_stack_bytes), which is unwound here by what each
	//     frame's code needs: the binary's .eh_frame (C, C++ and Rust
	//     built without frame pointers, as Debian's libraries are), Go's
	//     pcsp tables, the frame pointer in JIT code; where the copy ends
	//     first, the kernel's frame-pointer chain carries on;
	//   - frame_pointer: the kernel's frame-pointer chains only, the
	//     cheapest samples, cut short in code without frame pointers;
	//   - dwarf: as auto, never taking frames from the kernel's chain, as
	//     perf record --call-graph dwarf does.
	Unwind string `mapstructure:"unwind"`
	// UnwindStackBytes is the user stack each sample copies with unwind
	// auto or dwarf: a multiple of 8 in 512..61440, default 16384. Deeper
	// stacks are cut there (counted in receiver_perfprof_unwound_samples,
	// result stack_copy) unless auto finds the rest by frame pointers.
	UnwindStackBytes uint32 `mapstructure:"unwind_stack_bytes"`
	// Symbolize resolves frames to functions and file:line here, next to
	// the binaries. With false, locations keep their raw addresses with
	// their mappings and build ids, for a backend that symbolizes.
	Symbolize bool `mapstructure:"symbolize"`
	// Protocols enables span ingest over OTLP. Spans are passed on to the
	// traces pipeline (when the component is in one) and joined with the
	// samples. Without protocols the receiver only profiles.
	Protocols ProtocolsConfig `mapstructure:"protocols"`
	// Correlation configures the join of samples to spans.
	Correlation CorrelationConfig `mapstructure:"correlation"`
	// Sched configures off-CPU profiling from context switches.
	Sched SchedConfig `mapstructure:"sched"`
	// JVM configures what the receiver asks of target JVMs.
	JVM JVMConfig `mapstructure:"jvm"`
	// EBPF says whether eBPF programs on the sampling events read the span
	// each sample ran in inside the process (a Go goroutine's pprof
	// labels, a native thread's OpenTelemetry thread context) and let the
	// targets be sampled by per-CPU events: auto (when the kernel and
	// privileges allow; otherwise a warning says why, samples are joined
	// by thread and time and scope process opens per-thread events),
	// required (the receiver does not start without them) or off.
	EBPF string `mapstructure:"ebpf"`
	// EBPFRunStats turns on the kernel's BPF run-time statistics while
	// the receiver runs, so that receiver_perfprof_ebpf_runs and
	// _ebpf_run_time say what the programs cost. Off by default: they
	// cost two clock reads per run of every BPF program on the machine,
	// more than the scheduler program itself.
	EBPFRunStats bool `mapstructure:"ebpf_run_stats"`
	// RecoverLeafCaller restores the caller of a function sampled before
	// it pushed a frame (frameless leaves, first instructions), which
	// frame-pointer stacks skip: each on-CPU sample copies 512 bytes of
	// user stack and the user registers, and the return address at SP is
	// inserted when the function's unwind tables (.eh_frame, Go pcln) say
	// it is there. On by default.
	RecoverLeafCaller bool `mapstructure:"recover_leaf_caller"`

	// prevent unkeyed literal initialization
	_ struct{}
}

// TargetsConfig names the processes to sample: those whose pid is listed,
// and those that discovery finds (at start and every discovery_interval
// after, so that processes started later are sampled too) matching every
// one of the selectors executables, cgroups and container_ids that is
// given: `executables: [myapp]` with `cgroups: [...]` samples myapp in the
// chosen pods only, `cgroups` alone every process in them.
type TargetsConfig struct {
	// Pids must exist when the receiver starts; each is released when it
	// exits.
	Pids []int `mapstructure:"pids"`
	// Executables select processes by their executable: a name with a
	// "/" is the executable's path and matches it only; a bare name
	// matches the executable's base name or the comm. A process can take
	// any comm (prctl(PR_SET_NAME)) or run a copy of a binary under any
	// name, so a bare name is chosen by the target as much as by the
	// user; a path, or cgroups and container_ids, are not.
	Executables []string `mapstructure:"executables"`
	// Cgroups select processes by their cgroup: path.Match patterns over
	// the paths of /proc/PID/cgroup (cgroup v2, and each v1 hierarchy),
	// matched against a process's cgroup and each of its ancestors, so
	// that a pod's cgroup selects all of its containers. A pattern with a
	// leading "/" is anchored; one without matches a run of components at
	// any depth, also in the relative paths ("/../../kubepods-….slice/…")
	// that a collector in a cgroup namespace of its own reads. For a
	// per-node collector: "kubepods-burstable-pod*.slice" or one pod's
	// "*-pod<uid>.slice" (systemd driver; the uid's dashes as underscores),
	// "burstable/pod*" or "pod<uid>" (cgroupfs driver).
	Cgroups []string `mapstructure:"cgroups"`
	// ContainerIDs select the processes of these containers, by the id
	// in their cgroup path: the full id, or a prefix of at least 12
	// characters, as `docker ps` and `crictl ps` show it.
	ContainerIDs []string `mapstructure:"container_ids"`
}

// ProtocolsConfig holds the OTLP servers, as in the standard otlp receiver:
// each is enabled by naming it (`grpc:` alone takes the defaults).
type ProtocolsConfig struct {
	GRPC configoptional.Optional[configgrpc.ServerConfig] `mapstructure:"grpc"`
	HTTP configoptional.Optional[HTTPConfig]              `mapstructure:"http"`
	_    struct{}
}

// HTTPConfig is the OTLP/HTTP server (protobuf and JSON).
type HTTPConfig struct {
	ServerConfig confighttp.ServerConfig `mapstructure:",squash"`
	// TracesURLPath is where spans are posted; default /v1/traces.
	TracesURLPath string `mapstructure:"traces_url_path"`
	_             struct{}
}

// CorrelationConfig configures how samples are joined to spans.
type CorrelationConfig struct {
	// Window is how long a sample waits for the spans that cover it: SDKs
	// export spans in batches, seconds after they end. A sample is joined
	// and emitted once it is older than Window. Without protocols no span
	// can come: samples are emitted at the next report.
	Window time.Duration `mapstructure:"window"`
	// ThreadIDAttribute names the integer span attribute that holds the OS
	// thread id (gettid) the span ran on.
	ThreadIDAttribute string `mapstructure:"thread_id_attribute"`
	// WorkerIDAttribute names the integer span attribute that holds a
	// runtime worker's id (tokio worker, goroutine pool slot, ...).
	WorkerIDAttribute string `mapstructure:"worker_id_attribute"`
	// MaxBufferedSamples bounds the samples waiting for the window. Past
	// it the oldest are emitted early, without waiting for their spans,
	// and counted; at twice it new samples are dropped and counted.
	MaxBufferedSamples int `mapstructure:"max_buffered_samples"`
	// MaxSpans bounds the spans held for the join; spans over it are not
	// indexed (still passed on) and are counted.
	MaxSpans int `mapstructure:"max_spans"`
	// SpanIDLabel and TraceIDLabel are the pprof label keys under which Go
	// programs put the running span's ids on their goroutines
	// (pkg/spanlabels does); read with ebpf. The span id alone is enough
	// once the span has arrived.
	SpanIDLabel  string `mapstructure:"span_id_label"`
	TraceIDLabel string `mapstructure:"trace_id_label"`
	// Ambiguous says what the join does with a sample that unrelated
	// spans (other traces, siblings) cover on its thread: "unlinked"
	// (counted as ambiguous: the thread ran one of them, which cannot be
	// told) or "latest" (linked to the latest to start: a guess, counted
	// with source thread_latest).
	Ambiguous string `mapstructure:"ambiguous"`
	_         struct{}
}

// SchedConfig configures context-switch capture: off-CPU time with the
// stack where the thread blocked or was preempted, and the span it ran.
type SchedConfig struct {
	// Enabled: unset (the default), context switches are captured where
	// the eBPF scheduler program runs (kernel BTF, CAP_BPF and
	// CAP_PERFMON), and a warning says why not elsewhere; true captures
	// them there too, with perf's context-switch events (a sample with a
	// stack at every switch: ~5 µs of the thread's CPU, ten times the
	// program's cost); false never.
	Enabled *bool `mapstructure:"enabled"`
	// OffCPUInterval is the off-CPU sampling interval: off-CPU time is
	// accumulated across sleeps and emitted in multiples of it.
	OffCPUInterval time.Duration `mapstructure:"off_cpu_interval"`
	// MinBlockTime: off periods shorter than this are not off-CPU time
	// (offcputime's --min-block-time). 0 keeps them all.
	MinBlockTime time.Duration `mapstructure:"min_block_time"`
	// StackEvery and StackMinGap say at which of a thread's switch-outs
	// the scheduler program reads its stack and running span (about
	// 2 µs): one that comes at least StackEvery switch-outs after the
	// previous one read, and at most one per StackMinGap on average (a
	// thread that switches less often has its bursts of up to 16
	// switch-outs read whole). Off-CPU time after a switch-out not read
	// gets the thread's latest stack read and is joined to spans by
	// thread and time (counted: off_cpu_uncaptured). eBPF only: perf
	// events take a stack at every switch.
	StackEvery  int           `mapstructure:"stack_every"`
	StackMinGap time.Duration `mapstructure:"stack_min_gap"`
	// MaxRecordsPerSecond caps the off-CPU records a target process
	// makes a second (0: no cap). A thread's record past it is held back
	// and merged into its next one: its time is never lost, its
	// switch-out stack is (counted: ebpf_sched_deferred). eBPF only.
	MaxRecordsPerSecond int `mapstructure:"max_records_per_second"`
	_                   struct{}
}

// enabled says whether sched capture is asked for, and whether by the
// user (true) rather than by default.
func (s SchedConfig) enabled() (on, explicit bool) {
	if s.Enabled == nil {
		return true, false
	}
	return *s.Enabled, true
}

// JVMConfig configures the naming of JVM targets' JIT code and threads.
type JVMConfig struct {
	// PerfMap asks each target JVM (HotSpot, JDK 17 and later; no JVM
	// flags, no agent) to write its perf map, /tmp/perf-PID.map, with
	// `jcmd PID Compiler.perfmap` over the JVM's attach mechanism (the
	// receiver speaks it; no JDK needed on its side): when the JVM is
	// attached, and when a report finds JIT frames the map does not name
	// (code compiled since), whose samples then wait one report for the
	// answer. The full names of the JVM's threads are read then too. Off by default: attaching starts the JVM's attach
	// listener thread and writes files in its /tmp.
	PerfMap bool `mapstructure:"perf_map"`
	// RefreshInterval is the least time between two requests to a JVM;
	// it doubles, up to 32 times, while requests name no more frames.
	RefreshInterval time.Duration `mapstructure:"refresh_interval"`
	_               struct{}
}

const (
	ebpfAuto     = "auto"
	ebpfRequired = "required"
	ebpfOff      = "off"

	ambiguousUnlinked = "unlinked"
	ambiguousLatest   = "latest"
)

const (
	scopeProcess = "process"
	scopeSystem  = "system"
	maxFrequency = 10000
)

func createDefaultConfig() *Config {
	grpc := configgrpc.NewDefaultServerConfig()
	grpc.NetAddr.Endpoint = "localhost:4317"
	httpServer := confighttp.NewDefaultServerConfig()
	httpServer.NetAddr.Endpoint = "localhost:4318"
	return &Config{
		Scope:             scopeProcess,
		Frequency:         99,
		ReportInterval:    10 * time.Second,
		DiscoveryInterval: time.Second,
		Symbolize:         true,
		Unwind:            profiler.UnwindAuto.String(),
		UnwindStackBytes:  profiler.DefaultUnwindStackBytes,
		RecoverLeafCaller: true,
		Protocols: ProtocolsConfig{
			GRPC: configoptional.Default(grpc),
			HTTP: configoptional.Default(HTTPConfig{ServerConfig: httpServer, TracesURLPath: "/v1/traces"}),
		},
		JVM:  JVMConfig{RefreshInterval: time.Second},
		EBPF: ebpfAuto,
		Sched: SchedConfig{
			OffCPUInterval: 10 * time.Millisecond,
			StackEvery:     1,
			StackMinGap:    time.Millisecond,
		},
		Correlation: CorrelationConfig{
			Window:             10 * time.Second,
			ThreadIDAttribute:  convention.ThreadID,
			WorkerIDAttribute:  convention.WorkerID,
			MaxBufferedSamples: 1_000_000,
			MaxSpans:           100_000,
			SpanIDLabel:        convention.GoLabelSpanID,
			Ambiguous:          ambiguousUnlinked,
			TraceIDLabel:       convention.GoLabelTraceID,
		},
	}
}

// window is how long samples wait for their spans: correlation.window when
// spans can arrive, none when the receiver takes no spans (no protocols),
// so that its samples go out at the next report.
func (c *Config) window() time.Duration {
	if !c.Protocols.GRPC.HasValue() && !c.Protocols.HTTP.HasValue() {
		return 0
	}
	return c.Correlation.Window
}

// Validate checks the configuration; the collector refuses to start on an
// error and prints it.
func (c *Config) Validate() error {
	var errs []error
	tg := c.Targets
	if len(tg.Pids) == 0 && len(tg.Executables) == 0 && len(tg.Cgroups) == 0 && len(tg.ContainerIDs) == 0 {
		errs = append(errs, errors.New("targets: name at least one process in targets.pids, targets.executables, targets.cgroups or targets.container_ids"))
	}
	for _, p := range tg.Cgroups {
		if err := container.ValidatePattern(p); err != nil {
			errs = append(errs, fmt.Errorf("targets.cgroups: %w", err))
		}
	}
	for _, id := range tg.ContainerIDs {
		if err := container.ValidateID(id); err != nil {
			errs = append(errs, fmt.Errorf("targets.container_ids: %w", err))
		}
	}
	for _, p := range c.Targets.Pids {
		if p <= 0 {
			errs = append(errs, fmt.Errorf("targets.pids: %d is not a process id", p))
		}
	}
	for _, e := range c.Targets.Executables {
		if e == "" {
			errs = append(errs, errors.New("targets.executables: empty name"))
		}
	}
	if c.Scope != scopeProcess && c.Scope != scopeSystem {
		errs = append(errs, fmt.Errorf("scope: %q is not one of %q, %q", c.Scope, scopeProcess, scopeSystem))
	}
	if c.Frequency == 0 || c.Frequency > maxFrequency {
		errs = append(errs, fmt.Errorf("frequency: %d Hz is outside 1..%d", c.Frequency, maxFrequency))
	}
	if c.ReportInterval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("report_interval: %v is below the minimum of 100ms", c.ReportInterval))
	}
	if c.DiscoveryInterval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("discovery_interval: %v is below the minimum of 100ms", c.DiscoveryInterval))
	}
	if c.RingPages < 0 || c.RingPages&(c.RingPages-1) != 0 || c.RingPages > 1<<16 {
		errs = append(errs, fmt.Errorf("ring_pages: %d is not a power of two in 1..65536 (or 0 for the default)", c.RingPages))
	}
	if _, err := profiler.ParseUnwindMode(c.Unwind); err != nil {
		errs = append(errs, fmt.Errorf("unwind: %q is not auto, frame_pointer or dwarf", c.Unwind))
	}
	if b := c.UnwindStackBytes; b < 512 || b > profiler.MaxUnwindStackBytes || b%8 != 0 {
		errs = append(errs, fmt.Errorf("unwind_stack_bytes: %d is not a multiple of 8 in 512..%d", b, profiler.MaxUnwindStackBytes))
	}
	if c.Sched.OffCPUInterval < 100*time.Microsecond || c.Sched.OffCPUInterval > time.Minute {
		errs = append(errs, fmt.Errorf("sched.off_cpu_interval: %v is outside 100µs..1m", c.Sched.OffCPUInterval))
	}
	if c.Sched.MinBlockTime < 0 || c.Sched.MinBlockTime > time.Minute {
		errs = append(errs, fmt.Errorf("sched.min_block_time: %v is outside 0..1m", c.Sched.MinBlockTime))
	}
	if c.Sched.StackEvery < 1 || c.Sched.StackEvery > 1_000_000 {
		errs = append(errs, fmt.Errorf("sched.stack_every: %d is outside 1..1000000", c.Sched.StackEvery))
	}
	if c.Sched.StackMinGap < 0 || c.Sched.StackMinGap > time.Minute {
		errs = append(errs, fmt.Errorf("sched.stack_min_gap: %v is outside 0..1m", c.Sched.StackMinGap))
	}
	if c.Sched.MaxRecordsPerSecond < 0 {
		errs = append(errs, fmt.Errorf("sched.max_records_per_second: %d is negative", c.Sched.MaxRecordsPerSecond))
	}
	if c.Correlation.Ambiguous != ambiguousUnlinked && c.Correlation.Ambiguous != ambiguousLatest {
		errs = append(errs, fmt.Errorf("correlation.ambiguous: %q is not one of %q, %q", c.Correlation.Ambiguous, ambiguousUnlinked, ambiguousLatest))
	}
	if c.EBPF != ebpfAuto && c.EBPF != ebpfRequired && c.EBPF != ebpfOff {
		errs = append(errs, fmt.Errorf("ebpf: %q is not one of %q, %q, %q", c.EBPF, ebpfAuto, ebpfRequired, ebpfOff))
	}
	for name, key := range map[string]string{"correlation.span_id_label": c.Correlation.SpanIDLabel, "correlation.trace_id_label": c.Correlation.TraceIDLabel} {
		if key == "" || len(key) > 32 {
			errs = append(errs, fmt.Errorf("%s: %q must be a label key of 1 to 32 bytes", name, key))
		}
	}
	if c.JVM.RefreshInterval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("jvm.refresh_interval: %v is below the minimum of 100ms", c.JVM.RefreshInterval))
	}
	cc := c.Correlation
	if cc.Window < 0 || cc.Window > 10*time.Minute {
		errs = append(errs, fmt.Errorf("correlation.window: %v is outside 0..10m", cc.Window))
	}
	if cc.ThreadIDAttribute == "" {
		errs = append(errs, errors.New("correlation.thread_id_attribute: must name a span attribute"))
	}
	if cc.MaxBufferedSamples < 1 {
		errs = append(errs, fmt.Errorf("correlation.max_buffered_samples: %d must be at least 1", cc.MaxBufferedSamples))
	}
	if cc.MaxSpans < 1 {
		errs = append(errs, fmt.Errorf("correlation.max_spans: %d must be at least 1", cc.MaxSpans))
	}
	if h := c.Protocols.HTTP.Get(); h != nil && !strings.HasPrefix(h.TracesURLPath, "/") {
		errs = append(errs, fmt.Errorf("protocols.http.traces_url_path: %q must start with /", h.TracesURLPath))
	}
	return errors.Join(errs...)
}

// options turns the configuration into the engine's options.
func (c *Config) options(log *zap.Logger) profiler.Options {
	scope := perf.ScopeProcess
	if c.Scope == scopeSystem {
		scope = perf.ScopeSystem
	}
	sched, explicit := c.Sched.enabled()
	unwind, _ := profiler.ParseUnwindMode(c.Unwind) // Validate checked it
	return profiler.Options{
		Unwind:            unwind,
		UnwindStackBytes:  c.UnwindStackBytes,
		Pids:              c.Targets.Pids,
		Executables:       c.Targets.Executables,
		Cgroups:           c.Targets.Cgroups,
		ContainerIDs:      c.Targets.ContainerIDs,
		DiscoveryInterval: c.DiscoveryInterval,
		Perf: perf.Options{
			Scope:        scope,
			Frequency:    c.Frequency,
			KernelStacks: c.KernelStacks,
			RingPages:    c.RingPages,
			Sched:        sched,
		},
		OffCPUInterval:     c.Sched.OffCPUInterval,
		SchedMinBlock:      c.Sched.MinBlockTime,
		SchedCaptureGap:    c.Sched.StackMinGap,
		SchedCaptureEvery:  c.Sched.StackEvery,
		SchedMaxRate:       c.Sched.MaxRecordsPerSecond,
		SchedPerfFallback:  explicit,
		RecoverLeafCaller:  c.RecoverLeafCaller,
		Symbolize:          c.Symbolize,
		JVMPerfMap:         c.JVM.PerfMap,
		EBPF:               map[string]profiler.EBPFMode{ebpfAuto: profiler.EBPFAuto, ebpfRequired: profiler.EBPFRequired, ebpfOff: profiler.EBPFOff}[c.EBPF],
		SpanLabelKey:       c.Correlation.SpanIDLabel,
		EBPFRunStats:       c.EBPFRunStats,
		LinkAmbiguous:      c.Correlation.Ambiguous == ambiguousLatest,
		TraceLabelKey:      c.Correlation.TraceIDLabel,
		JVMRefreshInterval: c.JVM.RefreshInterval,
		Window:             c.window(),
		MaxBufferedSamples: c.Correlation.MaxBufferedSamples,
		MaxSpans:           c.Correlation.MaxSpans,
		Logger:             log,
	}
}
