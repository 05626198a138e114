package analysis

import (
	"fmt"
	"time"

	"github.com/perfprof/perfprof/internal/convention"
)

// Worker ids with a special meaning in CpuSampleEvent.worker_id.
const (
	NoWorker       = convention.NoWorker       // not a runtime worker thread
	NoWorkerID     = convention.NoWorkerID     // a Span.Worker of no worker
	BlockingWorker = convention.BlockingWorker // tokio blocking pool
)

// Sample sources (CpuSampleEvent.source).
const (
	SourceCPU    = convention.SourceOnCPU  // on-CPU: perf frequency sampling
	SourceOffCPU = convention.SourceOffCPU // off-CPU: context switch (sched event)
)

// Thread states of off-CPU samples (CpuSampleEvent.thread_state): the
// convention's codes.
const (
	StateUnknown  = 0
	StateBlocked  = convention.ThreadStateCodeBlocked
	StateRunnable = convention.ThreadStateCodeRunnable
)

// TraceSample is one CPU sample of a trace file, as read back. It holds no
// pointers: tables of the Trace resolve its indices.
type TraceSample struct {
	Time   uint64 // ns, CLOCK_MONOTONIC of the writer
	Value  uint64 // value_ns: off-CPU ns this sample stands for; 0 if unknown
	Stack  int32  // index into Trace.Stacks
	Thread int32  // index into Trace.Threads
	Link   int32  // index into Trace.Links; -1 = not linked to a span and no context attributes
	Worker uint32 // worker id; NoWorker, BlockingWorker
	CPU    int32  // -1 if unknown
	Source uint8  // SourceCPU or SourceOffCPU
	State  uint8  // StateUnknown, StateBlocked, StateRunnable
}

// Weight is the sample's weight in off-CPU nanoseconds when known, else 1.
func (s *TraceSample) Weight() uint64 {
	if s.Value > 0 {
		return s.Value
	}
	return 1
}

// Thread identifies the thread of a sample.
type Thread struct {
	Tid  uint32
	Pid  uint32 // 0 if unknown
	Name string // "" if unknown
}

// Label is a human-readable name: the thread name, else "tid N".
func (t Thread) Label() string {
	if t.Name != "" {
		return t.Name
	}
	return fmt.Sprintf("tid %d", t.Tid)
}

// Link is the span a sample is linked to (perfprof's extra fields) and
// the attributes of the thread context it was read in: what the samples of
// one span share.
type Link struct {
	TraceID  string
	SpanID   string
	RootName string // span_root_name
	// Attrs is the index of the sample's context attributes in
	// Trace.AttrSets; 0, the empty set, when it has none.
	Attrs int32
}

// Linked reports whether l names a span, by its ids or its root's name;
// a Link of context attributes alone does not.
func (l *Link) Linked() bool { return l.TraceID != "" || l.SpanID != "" || l.RootName != "" }

// AttrSet is a set of context attributes (ContextAttributeSet): key/value
// pairs in the order of the record they came from, each key once.
type AttrSet []KV

// Get returns the value of key in the set.
func (a AttrSet) Get(key string) (string, bool) {
	for _, kv := range a {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return "", false
}

// Frame is one function frame of a location.
type Frame struct {
	Func string
	File string // "" if unknown, "kernel" for kernel frames
	Line int
}

// Location is one address of a stack with the frames it stands for, outermost
// first (the function owning the address first, then the functions inlined
// into it). An unsymbolized address has one frame named by its hex address.
type Location struct {
	Addr   uint64
	Frames []int32 // indices into Trace.Frames, outermost first
	Known  bool    // symbolized from the file's symbol table
}

// Stack is a callchain, leaf first, as indices into Trace.Locations.
type Stack []int32

// Span is a SpanEvent.
type Span struct {
	TraceID, SpanID, ParentID string
	Name                      string
	Service                   string
	Start, Duration           uint64
	Tid, Pid                  uint32 // 0 if unknown
	Worker                    int64  // -1 if unknown
}

// Poll is a task poll on a worker, from a PollStartEvent/PollEndEvent pair.
type Poll struct {
	Worker     uint64
	Start, End uint64
	TaskID     uint64
	SpawnLoc   string
}

// SpanID is the span id the task id stands for in files of the perfprof
// exporter (the span id read as a big-endian u64).
func (p *Poll) SpanID() string { return fmt.Sprintf("%016x", p.TaskID) }

// Park is a worker park, from a WorkerParkEvent/WorkerUnparkEvent pair.
type Park struct {
	Worker      uint64
	Tid         uint32
	Start, End  uint64
	SchedWaitNs uint64 // from the unpark
}

// ClockSync pairs a monotonic timestamp with Unix-epoch nanoseconds.
type ClockSync struct {
	Mono, Real uint64
}

// FileInfo describes one input file.
type FileInfo struct {
	Path       string
	Format     string // "trc" or "tokiotrc"
	Version    uint32 // TOKIOTRC version; 1 for TRC
	Gzip       bool
	Size       int64 // bytes on disk
	Bytes      int64 // decoded (decompressed) bytes
	Events     int64
	Streams    int   // TRC stream headers
	Truncated  bool  // the file ends inside a record (crash, .active)
	Metadata   []KV  // segment metadata entries, in file order
	FirstEvent int64 // index of the file's first sample in Trace.Samples
}

// KV is a metadata entry.
type KV struct{ Key, Value string }

// Trace is everything loaded from a set of inputs.
type Trace struct {
	Files    []FileInfo
	Warnings []string // truncated tails, unpaired polls, ...

	Counts  map[string]int64  // events by schema name (legacy records by their TRC name)
	Dropped map[string]uint64 // "Event.field" sums of fields named dropped*/lost*

	Samples   []TraceSample
	Stacks    []Stack
	Locations []Location
	Frames    []Frame
	Threads   []Thread
	Links     []Link
	// AttrSets are the context attribute sets of the links; AttrSets[0] is
	// the empty set.
	AttrSets []AttrSet

	Spans    []Span
	Polls    []Poll
	Parks    []Park
	Unparks  []uint64 // sched_wait_ns of every WorkerUnparkEvent, file order
	Clock    []ClockSync
	Metadata map[string]string // merged segment metadata (last value wins)

	Start, End uint64 // time range of timestamped events (ns monotonic)

	spanByID map[string]int32
	attrIdx  map[string]int32 // AttrSets by setKey
	pending  *pending         // of a partial trace: ends whose start is in an earlier file
	derived  derived
}

type pending struct {
	pollEnds, unparks []orphanEnd
	// samples of the partial trace in chunks, in file order (its Samples
	// is nil): the merger copies them once, so growing one slice by
	// doubling would copy them for nothing.
	samples [][]TraceSample
}

// SpanByID returns the span with id, if a SpanEvent has it.
func (t *Trace) SpanByID(id string) (*Span, bool) {
	i, ok := t.spanByID[id]
	if !ok {
		return nil, false
	}
	return &t.Spans[i], true
}

// WallOffset returns realtime − monotonic from the first ClockSyncEvent.
func (t *Trace) WallOffset() (int64, bool) {
	if len(t.Clock) == 0 {
		return 0, false
	}
	c := t.Clock[0]
	return int64(c.Real - c.Mono), true
}

// Wall converts a monotonic timestamp to wall-clock time, if a ClockSync is
// known.
func (t *Trace) Wall(mono uint64) (time.Time, bool) {
	off, ok := t.WallOffset()
	if !ok {
		return time.Time{}, false
	}
	return time.Unix(0, int64(mono)+off).UTC(), true
}

// FuncName returns the function of frame f.
func (t *Trace) FuncName(f int32) string { return t.Frames[f].Func }
