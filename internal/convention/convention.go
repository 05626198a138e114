// Package convention is perfprof's vocabulary: the attribute keys, state
// values, profile types and trace-file metadata keys that the receiver
// writes and the exporter, the CLI and the test builders read. Every key
// string is defined here once, as the collector's semconv packages do, so
// that a grep for a key finds its one definition.
//
// Keys taken from OpenTelemetry's semantic conventions keep their names;
// perfprof's own keys are documented where they are declared. The attributes
// the receiver emits are also listed in the attribute table of the receiver's
// README, which TestREADMEListsEveryAttribute checks against what it emits;
// pkg/pprofiledict writes and reads them.
package convention

import (
	"strings"
	"unicode/utf8"
)

// Resource attributes.
const (
	ProcessPid            = "process.pid"             // int
	ProcessExecutableName = "process.executable.name" // base name of the executable
	ProcessExecutablePath = "process.executable.path"
	ServiceName           = "service.name"
	HostName              = "host.name"
	// ContainerID is the id of the process's container (from its cgroup
	// path; on spans, what the SDK's container detector found).
	ContainerID = "container.id"
	// K8sPodUID is the uid of the process's Kubernetes pod, from its
	// cgroup path: what the k8sattributes processor associates by.
	K8sPodUID = "k8s.pod.uid"
)

// Mapping attributes: the build id of the mapped file, GNU (40 hex digits)
// or Go (a path-like id).
const (
	BuildIDGNU = "process.executable.build_id.gnu"
	BuildIDGo  = "process.executable.build_id.go"
)

// Sample attributes of the profiles the receiver emits.
const (
	ThreadID   = "thread.id"   // int: OS thread id (gettid); also a span attribute
	ThreadName = "thread.name" // string: the thread's comm
	CPU        = "cpu.logical_number"
	WorkerID   = "worker.id"      // int: runtime worker (tokio worker, pool slot); also a span attribute
	RootName   = "span.root.name" // string: name of the local root of the linked span
	// ThreadState is the state of an off-CPU sample's thread: ThreadStateBlocked
	// or ThreadStateRunnable.
	ThreadState = "thread.state"
	// CPUTimeDelta is the thread's CPU time since its previous on-CPU sample,
	// int ns (unit "ns"), rounded to CPUTimeDeltaQuantum; sched capture only.
	CPUTimeDelta        = "thread.cpu.time_delta"
	CPUTimeDeltaUnit    = "ns"
	CPUTimeDeltaQuantum = 10_000 // ns
	// LinkSource says how the span of a linked sample was found: one of
	// the LinkSource* values.
	LinkSource = "span.link.source"
)

// SampleAttribute reports whether key is one of the sample attributes
// above, which the receiver writes itself: a thread context record's
// attribute of the same name is not put on a sample beside it.
func SampleAttribute(key string) bool {
	switch key {
	case ThreadID, ThreadName, CPU, WorkerID, RootName, ThreadState, CPUTimeDelta, LinkSource:
		return true
	}
	return false
}

// Bounds of the thread context attributes a sample carries (the
// attributes of the OTEP 4947 record it was read in, under their key map
// names): at most ContextAttrsMax a sample, keys and values cut at
// ContextAttrMaxBytes. The receiver applies them when it decodes a
// record, the tracefile exporter again to what it writes, whatever sent
// the profile.
const (
	ContextAttrsMax     = 16
	ContextAttrMaxBytes = 128
)

// BoundContextAttr cuts a context attribute's key or value at
// ContextAttrMaxBytes, at a character's start, and replaces what is not
// UTF-8 (pdata and trace-file strings must be).
func BoundContextAttr(s string) string {
	if n := ContextAttrMaxBytes; len(s) > n {
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n]
	}
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// Context attributes that name what a request does, as publishers of
// thread contexts set them: the route of an HTTP server span, and
// dd-trace's endpoint of the local root span ("GET /alpha"). perfprof
// report groups samples by them without being asked.
const (
	HTTPRoute            = "http.route"
	DatadogTraceEndpoint = "datadog.trace_endpoint"
)

// Values of LinkSource.
const (
	// LinkSourceThread: the (thread, time) join of the spans received.
	LinkSourceThread = "thread"
	// LinkSourceGoLabels: the goroutine's pprof labels, read at the sample.
	LinkSourceGoLabels = "goroutine_labels"
	// LinkSourceThreadContext: the thread's OpenTelemetry context record
	// (OTEP 4947), read at the sample.
	LinkSourceThreadContext = "thread_context"
	// LinkSourceThreadLatest: the (thread, time) join where unrelated
	// spans covered the sample, the latest to start taken: a guess.
	LinkSourceThreadLatest = "thread_latest"
)

// Location attributes. FrameType is OpenTelemetry's profile.frame.type;
// the receiver sets it to FrameTypeKernel on kernel locations only (what a
// user-space frame runs, native or JIT code, it does not say).
const (
	FrameType       = "profile.frame.type"
	FrameTypeKernel = "kernel"
)

// Profile attributes.
const (
	// ClockOffset is the host's Unix time − CLOCK_MONOTONIC, int ns (unit
	// "ns"), with which the receiver converted the profile's timestamps
	// from the perf records' monotonic clock: a timestamp's CLOCK_MONOTONIC
	// value is its Unix ns − ClockOffset, exactly, however the wall clock
	// stepped since.
	ClockOffset     = "perfprof.clock.offset"
	ClockOffsetUnit = "ns"
)

// Values of ThreadState, and their codes in trace files (the thread_state
// field of a CpuSampleEvent).
const (
	ThreadStateBlocked  = "blocked"  // slept, waited on I/O or a lock
	ThreadStateRunnable = "runnable" // preempted, waiting for a CPU

	ThreadStateCodeBlocked  = 1
	ThreadStateCodeRunnable = 2
)

// ThreadStateCode returns the trace-file code of a ThreadState value, 0 for
// an unknown one.
func ThreadStateCode(state string) uint8 {
	switch state {
	case ThreadStateBlocked:
		return ThreadStateCodeBlocked
	case ThreadStateRunnable:
		return ThreadStateCodeRunnable
	}
	return 0
}

// ThreadStateName returns the ThreadState value of a trace-file code, "" for
// an unknown one.
func ThreadStateName(code uint8) string {
	switch code {
	case ThreadStateCodeBlocked:
		return ThreadStateBlocked
	case ThreadStateCodeRunnable:
		return ThreadStateRunnable
	}
	return ""
}

// Span attributes that runtime instrumentation sets, besides ThreadID and
// WorkerID.
const (
	// WorkerPark (bool) marks a worker span as a park (the worker waits for
	// work) rather than a poll.
	WorkerPark = "worker.park"
	// SpanCPUTime (int ns) is the thread CPU time a park span reports.
	SpanCPUTime      = "thread.cpu_time_ns"
	CodeFilePath     = "code.file.path"
	CodeLineNumber   = "code.line.number"
	CodeColumnNumber = "code.column.number"
)

// The pprof labels that hold a goroutine's running span in a Go program
// (pkg/spanlabels writes them, the eBPF programs read them by default),
// and the labels of the same names perfprof's pprof output gives samples.
const (
	GoLabelSpanID  = "span_id"
	GoLabelTraceID = "trace_id"
)

// Profile types: each profile has one sample type and one period type.
const (
	// On-CPU: a sample counts one period of CPU time.
	OnCPUSampleType = "samples"
	OnCPUSampleUnit = "count"
	OnCPUPeriodType = "cpu"
	OnCPUPeriodUnit = "nanoseconds"
	// Off-CPU: a sample's value is the time off CPU it stands for.
	OffCPUType = "off_cpu"
	OffCPUUnit = "nanoseconds"
)

// ScopeName is the instrumentation scope of the receiver's profiles.
const ScopeName = "github.com/perfprof/perfprof/receiver/perfprofreceiver"

// Segment metadata keys of the trace files the exporter writes.
const (
	MetaService      = "service"
	MetaHost         = "host"
	MetaPid          = "pid"
	MetaWorkers      = "runtime.perfprof" // worker ids, "0,1,2" (the dial9 convention)
	MetaSamplePeriod = "perfprof.sample_period_ns"
	// MetaBootID is dial9's boot_id: the producer run's id,
	// {4 lowercase letters}-{digits}, the same in all its segments.
	MetaBootID = "boot_id"
)

// "No worker" has one spelling per encoding, and these are all: a Go value
// of a worker id (int64) is NoWorkerID, a pdata sample has no worker.id
// attribute, and a trace file's worker_id is NoWorker (the format's byte;
// BlockingWorker, just below it, is tokio's blocking pool, a worker of a
// kind).
const (
	NoWorkerID     = -1  // a worker id in memory: the thread runs no worker
	NoWorker       = 255 // a trace file's worker_id of a sample outside any worker
	BlockingWorker = 254 // a trace file's worker_id of tokio's blocking pool
)

// Codes of the source field of a trace file's CpuSampleEvent: which profile
// the sample comes from.
const (
	SourceOnCPU  = 0 // the on-CPU profile (OnCPUSampleType)
	SourceOffCPU = 1 // the off-CPU profile (OffCPUType)
)
