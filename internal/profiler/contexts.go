package profiler

import (
	"slices"
	"sync"

	"github.com/perfprof/perfprof/internal/convention"
)

// LinkSource says where the span of a sample came from.
type LinkSource uint8

const (
	// SourceThread: the (thread, time) join of the spans received.
	SourceThread LinkSource = iota
	// SourceGoLabels: the running goroutine's pprof labels, read at the
	// sample.
	SourceGoLabels
	// SourceThreadContext: the thread's OpenTelemetry context record
	// (OTEP 4947), read at the sample.
	SourceThreadContext
	// SourceThreadLatest: the (thread, time) join where unrelated spans
	// covered the sample, the latest to start taken
	// (Options.LinkAmbiguous): a guess.
	SourceThreadLatest
)

// String returns the source's value of the span.link.source attribute.
func (s LinkSource) String() string {
	switch s {
	case SourceGoLabels:
		return convention.LinkSourceGoLabels
	case SourceThreadContext:
		return convention.LinkSourceThreadContext
	case SourceThreadLatest:
		return convention.LinkSourceThreadLatest
	}
	return convention.LinkSourceThread
}

// SpanContext is the span a thread was running when it was sampled, read
// inside the process at the sample (by an eBPF program on the sampling
// event). A zero SpanID says the thread ran no span then.
type SpanContext struct {
	Pid, Tid uint32
	Time     uint64 // CLOCK_MONOTONIC ns, within contextSkew of the sample's
	// Switch: read at a switch-out sample (the thread leaving the CPU),
	// for the off-CPU time that follows; else at a cpu-clock sample.
	Switch bool
	// CPUOnly: the context is there for CPUDelta and says nothing of the
	// span; the sample is joined by thread and time. Otherwise SpanID
	// (zero for none) is the span.
	CPUOnly bool
	Source  LinkSource
	TraceID [16]byte // zero when only the span id is known
	SpanID  [8]byte
	// CPUDelta is, for a cpu-clock sample, the thread's CPU time since
	// its previous one (ns; 0 when unknown), from the scheduler program.
	CPUDelta uint64
	// Attrs is the attrs-data of the thread's OTEP 4947 record (a prefix
	// of it: bpf.AttrsMax bytes), "" when none: decoded with the key map
	// of the process's context at the join.
	Attrs string
	// AttrsCut: the record's attrs-data was longer than Attrs, whose
	// last entries are missing.
	AttrsCut bool
}

// Contexts delivers the span contexts read at sample time. The profiler
// attaches and detaches processes along with its Source; a process it
// cannot read (not Go, no published context) is joined by thread and time.
type Contexts interface {
	// Attach reads the spans of pid's threads where its runtime keeps
	// them; schema is the thread-context schema its process context
	// names (threadlocal.schema_version), "" when none is known yet.
	Attach(pid int, schema string) error
	Detach(pid int)
	// Read delivers contexts to fn until Close, on the calling goroutine.
	Read(fn func(SpanContext)) error
	Close() error
}

// contextSkew bounds the time between a sample and the context read for
// it: both are taken in the same overflow handler, microseconds apart,
// while samples of one thread are at least 100 µs apart (10 kHz).
const contextSkew = 50_000 // ns

// contextStore holds the contexts read per process and thread until their
// samples are joined. It has its own lock: the contexts reader and the
// report share it, the ring reader never takes it.
type contextStore struct {
	mu    sync.Mutex
	procs map[uint32]map[ctxKey]*ctxList // pid → thread
}

// ctxList is the contexts of one thread, by time.
type ctxList struct {
	l []SpanContext
	// next is where find looks first: after the context it found last.
	// A report joins a thread's samples in time order, one context per
	// sample, so it is most often the one; a binary search of a
	// thread's seconds of contexts per sample was 4% of the collector's
	// CPU at 999 Hz.
	next int
}

// ctxKey keeps a thread's switch-out contexts apart from its cpu-clock
// ones: a switch-out may come microseconds after a cpu-clock sample.
type ctxKey struct {
	tid uint32
	out bool
}

func (c *contextStore) add(sc SpanContext) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.procs == nil {
		c.procs = map[uint32]map[ctxKey]*ctxList{}
	}
	th := c.procs[sc.Pid]
	if th == nil {
		th = map[ctxKey]*ctxList{}
		c.procs[sc.Pid] = th
	}
	k := ctxKey{sc.Tid, sc.Switch}
	cl := th[k]
	if cl == nil {
		cl = &ctxList{}
		th[k] = cl
	}
	// Contexts of one thread come in time order, but for a thread that
	// moved between CPUs, whose records are read from different rings.
	i := len(cl.l)
	for i > 0 && cl.l[i-1].Time > sc.Time {
		i--
	}
	cl.l = slices.Insert(cl.l, i, sc)
}

// find returns the context read for the sample of tid at time t: a
// cpu-clock sample, or with out the switch-out that began off-CPU time.
func (c *contextStore) find(pid, tid uint32, out bool, t uint64) (SpanContext, bool) {
	cl := c.procs[pid][ctxKey{tid, out}]
	if cl == nil {
		return SpanContext{}, false
	}
	l := cl.l
	// The first context within contextSkew after t-contextSkew, if any:
	// at next when the one before it is too old, else found by search.
	i := cl.next
	if i > len(l) || (i < len(l) && l[i].Time+contextSkew < t) || (i > 0 && l[i-1].Time+contextSkew >= t) {
		i, _ = slices.BinarySearchFunc(l, t, func(sc SpanContext, t uint64) int {
			if sc.Time+contextSkew < t {
				return -1
			}
			return 1
		})
	}
	if i < len(l) && l[i].Time <= t+contextSkew {
		cl.next = i + 1
		return l[i], true
	}
	return SpanContext{}, false
}

// contextGrace is how long contexts are kept past the cut of the report
// that joined their time: a sample read late (the perf reader wakes every
// 100 ms, later under load) joins a later report, and needs its context.
const contextGrace = 5_000_000_000 // ns

// contextKeepOut is how long a thread's last switch-out context is kept
// whatever the cut: the off-CPU sample it is for is emitted when the thread
// runs again, which may be long after (a thread that blocks for minutes).
const contextKeepOut = 600_000_000_000 // ns

// forget drops the contexts older than before, but for each thread's last
// switch-out younger than contextKeepOut.
func (c *contextStore) forget(before uint64) {
	keepOut := before - min(before, contextKeepOut)
	for pid, th := range c.procs {
		for k, cl := range th {
			l := cl.l
			i, _ := slices.BinarySearchFunc(l, before, func(sc SpanContext, t uint64) int {
				if sc.Time < t {
					return -1
				}
				return 1
			})
			if k.out && i == len(l) && l[i-1].Time >= keepOut {
				i-- // the thread is off the CPU since: its sample is to come
			}
			if i == len(l) {
				delete(th, k)
			} else if i > 0 {
				cl.l = slices.Delete(l, 0, i)
				cl.next = max(0, cl.next-i)
			}
		}
		if len(th) == 0 {
			delete(c.procs, pid)
		}
	}
}
