package profiler

import (
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/counter"
	"github.com/perfprof/perfprof/internal/limits"
	"github.com/perfprof/perfprof/internal/otelctx"
	"github.com/perfprof/perfprof/internal/tidmap"
)

// Span is a span that ran on an OS thread, as the join needs it.
type Span struct {
	Tid uint32 // OS thread id (gettid) the span ran on
	// Pid is the process the span ran in (its resource's process.pid), 0
	// when unknown. A sample of another process on the same thread id is
	// not linked to it: thread ids are reused, and a process in a pid
	// namespace names its threads by ids that other processes have.
	Pid          uint32
	TraceID      [16]byte
	SpanID       [8]byte
	ParentSpanID [8]byte // zero: no parent
	ParentRemote bool    // the parent ran in another process: this span is a local root
	Start, End   uint64  // Unix ns
	Name         string
	WorkerID     int64 // runtime worker; -1 when none
	// Resource is the caller's handle of the span's resource (service
	// name, ...), returned in Snapshot.Resource; -1 when none.
	Resource int32
	// ContainerID and PodUID are the resource's container.id and
	// k8s.pod.uid, "" when none. With Pid and Tid they name the thread as
	// the app sees it: in its own pid namespace, which may not be the
	// collector's (see spanIDs).
	ContainerID, PodUID string
	// Service is the resource's service.name, "" when none: it names
	// the client in the log of a bound its spans reach.
	Service string
}

// SpanCounts are the outcomes of AddSpans, cumulative in Stats.
type SpanCounts struct {
	Indexed   int64
	Late      int64 // ended before the samples of its time were taken
	OverLimit int64 // MaxSpans reached
	Invalid   int64 // no thread, or ends before it starts
	// Future spans end more than futureSpanSlack past the window from
	// now (see AddSpans): refused.
	Future int64
	// Unmapped spans named their process or thread by ids of another
	// pid namespace that could not be mapped to the collector's (see
	// spanIDs): they are not joined by thread.
	Unmapped int64
	// Unmatched counts spans dropped behind the watermark that no sample
	// fell in (Stats only).
	Unmatched int64
}

// JoinCounts are the outcomes of the join of taken samples, cumulative in
// Stats.
type JoinCounts struct {
	Span int64 // linked to a span, by any source
	// Read are the samples of Span by source: joined by thread and time
	// (SourceThread), read in the process at the sample (SourceGoLabels,
	// SourceThreadContext), or an ambiguous thread join's guess
	// (SourceThreadLatest).
	Read   [4]int64
	NoSpan int64 // no span covered the sample on its thread, or the process said it ran none
	// Ambiguous samples were left unlinked: spans that are not one line of
	// ancestors (other traces, or siblings) were open on the thread at
	// once, and the thread ran one of them at the sample.
	Ambiguous int64
	Early     int64 // taken before the window passed (buffer bound), not joined
	// OtherProcess samples were left unlinked: the span on their thread
	// at their time named another process (Span.Pid).
	OtherProcess int64
}

// futureSpanSlack is how far past the correlation window from now a span
// may end. An exported span has ended, so an end in the future is the
// sender's clock running ahead of the collector's: a few seconds of such
// skew are normal and the window absorbs them; an end further out is a
// broken clock or a hostile client. Such a span would stay in the index
// until its end came (Forget drops spans by end), holding a slot of
// MaxSpans, and one without a pid would be the span of every sample of
// its thread until then: it is refused and counted (Future,
// limits.SpanFuture). It is not clamped: its real end is unknown, and a
// made-up one would link samples that the span did not cover.
const futureSpanSlack = time.Minute

// AddSpans indexes spans for the join. It may be called from any
// goroutine; it never waits for the read loop.
func (e *engine) AddSpans(spans []Span) SpanCounts {
	var c SpanCounts
	unmapped := e.ids.mapSpans(spans)
	latest := clock.Monotonic() + uint64(e.opts.Window+futureSpanSlack)
	var future []futureSpans
	defer func() {
		// After spansMu, which the log need not hold.
		for _, f := range future {
			e.opts.Limits.Add(limits.SpanFuture, f.subject, f.n, limits.Errorf(limits.SpanFuture,
				"span %x ends %v from now, more than the correlation window and %v", f.spanID, f.ahead.Round(time.Second), futureSpanSlack))
		}
	}()
	e.spansMu.Lock()
	defer e.spansMu.Unlock()
	for i := range spans {
		sp := &spans[i]
		if unmapped != nil && unmapped[i] {
			c.Unmapped++
			continue
		}
		end := e.clock.Mono(sp.End)
		if end <= e.watermark {
			// Its samples were taken already: it came later than the
			// window allows.
			c.Late++
			continue
		}
		if end > latest {
			c.Future++
			future = addFuture(future, sp, time.Duration(end-latest)+e.opts.Window+futureSpanSlack)
			continue
		}
		err := e.spans.Add(sp.Tid, tidmap.Span{
			TraceID:      sp.TraceID,
			SpanID:       sp.SpanID,
			ParentSpanID: sp.ParentSpanID,
			ParentRemote: sp.ParentRemote,
			Pid:          sp.Pid,
			Start:        e.clock.Mono(sp.Start),
			End:          end,
			Name:         sp.Name,
			WorkerID:     sp.WorkerID,
			Resource:     sp.Resource,
		})
		switch {
		case err == nil:
			c.Indexed++
		case errors.Is(err, tidmap.ErrFull):
			c.OverLimit++
		default:
			c.Invalid++
		}
	}
	e.tel.Add(cSpansIndexed, c.Indexed)
	e.tel.Add(cSpansLate, c.Late)
	e.tel.Add(cSpansOverLimit, c.OverLimit)
	e.tel.Add(cSpansInvalid, c.Invalid)
	e.tel.Add(cSpansUnmapped, c.Unmapped)
	e.tel.Add(cSpansFuture, c.Future)
	return c
}

// futureSpans are the future spans of one sender in one AddSpans, for
// limits.Recorder: one call per sender rather than per span.
type futureSpans struct {
	subject string
	n       int64
	spanID  [8]byte       // the first
	ahead   time.Duration // how far from now it ends
}

// addFuture counts sp among the future spans of its sender: its service,
// else its process. The spans of one resource come one after the other.
func addFuture(f []futureSpans, sp *Span, ahead time.Duration) []futureSpans {
	subject := sp.Service
	switch {
	case subject != "":
	case sp.Pid != 0:
		subject = "pid " + strconv.FormatUint(uint64(sp.Pid), 10)
	default:
		subject = "a sender naming neither service.name nor process.pid"
	}
	if n := len(f); n > 0 && f[n-1].subject == subject {
		f[n-1].n++
		return f
	}
	return append(f, futureSpans{subject: subject, n: 1, spanID: sp.SpanID, ahead: ahead})
}

// NameProcess says that the spans of resource came from process pid (their
// resource's process.pid) of container cid and pod pod (its container.id
// and k8s.pod.uid, "" when none), as the process sees itself (see
// spanIDs): its snapshots carry that resource from now on, also when none
// of their samples fell in a span.
func (e *engine) NameProcess(pid int, cid, pod string, resource int32) {
	if resource < 0 || pid <= 0 || pid > math.MaxUint32 {
		return
	}
	if pid = int(e.ids.pid(uint32(pid), cid, pod)); pid == 0 {
		return
	}
	now := clock.Monotonic()
	e.spansMu.Lock()
	defer e.spansMu.Unlock()
	e.names.name(pid, resource, now)
}

// linkContext links a sample to the span its process ran it in, as read
// at the sample, and reports whether there was one. The span index names
// its root and worker when the span has arrived; the link stands without.
// The contexts lock is held.
func (e *engine) linkContext(l *Link, sc SpanContext) bool {
	if sc.SpanID == ([8]byte{}) {
		return false
	}
	if sp := e.spans.Get(sc.TraceID, sc.SpanID); sp != nil {
		e.link(l, sp)
	} else if sc.TraceID == ([16]byte{}) {
		return false // no trace id, and no span to take it from
	} else {
		l.Linked = true
		l.TraceID, l.SpanID = sc.TraceID, sc.SpanID
	}
	l.Source = sc.Source
	return true
}

func (e *engine) link(l *Link, sp *tidmap.Span) {
	l.Linked = true
	l.TraceID, l.SpanID = sp.TraceID, sp.SpanID
	if sp.WorkerID >= 0 {
		l.Worker = sp.WorkerID
	}
	l.Root = e.spans.LocalRoot(sp).Name
}

// joined is what the join found for the samples of one batch.
type joined struct {
	links []Link // per sample
	// cpu is, per on-CPU sample, its thread's CPU time since its previous
	// sample as its process read it at the sample (0: not read), which
	// weighs it rather than the time between samples.
	cpu []uint64
	// resource is the span resource most of the linked samples share,
	// else the one the process's spans named it by while it lived; -1
	// when neither.
	resource int32
	attrs    [][]Attr // Snapshot.ContextAttrs
}

// Bounds of the thread context attributes a report carries: a sample
// carries at most maxSampleAttrs (a record holds at most bpf.AttrsMax
// bytes of them), a process's report at most maxAttrSets sets; a key's
// name and a value are cut at maxAttrBytes (the key map is the
// process's). The per-sample bounds are the convention's, which the
// tracefile exporter applies too.
const (
	maxSampleAttrs = convention.ContextAttrsMax // past it, and reserved names: cAttrsEntries
	maxAttrSets    = 1024
)

// attrSets decodes and interns the attrs-data of one process's contexts
// for one report: the samples of a span share one set.
type attrSets struct {
	keys  []string
	sets  [][]Attr
	index map[string]int32
}

// get returns the index of raw's set in a.sets (0: none), decoding it on
// first sight. Entries with a key the key map does not name are dropped,
// as OTEP 4947 asks, and those named as the receiver's own sample
// attributes (counted); values that are not UTF-8 are made so (pdata
// strings must be).
func (a *attrSets) get(tel *counter.Set, raw string) int32 {
	if raw == "" || len(a.keys) == 0 {
		return 0
	}
	if i, ok := a.index[raw]; ok {
		return i
	}
	if len(a.sets) > maxAttrSets {
		tel.Add(cAttrsSets, 1)
		return 0
	}
	var set []Attr
	for _, at := range otelctx.ParseAttrs([]byte(raw), a.keys) {
		if at.Name == "" {
			continue
		}
		if convention.SampleAttribute(at.Name) {
			tel.Add(cAttrsEntries, 1) // the receiver's own name: the others still count
			continue
		}
		if len(set) == maxSampleAttrs {
			tel.Add(cAttrsEntries, 1)
			break
		}
		set = append(set, Attr{Key: convention.BoundContextAttr(at.Name), Value: convention.BoundContextAttr(at.Value)})
	}
	if len(set) == 0 {
		return 0
	}
	if a.sets == nil {
		a.sets = [][]Attr{nil}
		a.index = map[string]int32{}
	}
	i := int32(len(a.sets))
	a.sets = append(a.sets, set)
	a.index[raw] = i
	return i
}

// join looks up, for every sample of b older than the watermark, the span
// that ran on its thread at its time; where unrelated spans were open on
// the thread at once, none (a wrong link misleads more than a missing
// one). It changes neither b nor st. Called with spansMu held, not mu:
// the samples of b are the caller's now.
func (e *engine) join(st *procState, b *batch, watermark uint64) joined {
	links := make([]Link, len(b.samples))
	var cpu []uint64
	attrs := attrSets{keys: st.contextKeys()}
	votes := map[int32]int{}
	if e.contexts != nil {
		e.contexts.mu.Lock()
		defer e.contexts.mu.Unlock()
	}
	for i, s := range b.samples {
		l := &links[i]
		l.Worker = convention.NoWorkerID
		if w, ok := e.spans.Worker(s.tid); ok {
			l.Worker = w
		}
		if s.time >= watermark {
			e.tel.Add(CountJoinEarly, 1)
			continue
		}
		// An off-CPU sample's time is its switch-out, where the
		// switch-out program read the span that blocked.
		if e.contexts != nil {
			if sc, ok := e.contexts.find(uint32(st.info.Pid), s.tid, s.state != 0, s.time); ok {
				if sc.CPUDelta > 0 && s.state == 0 {
					if cpu == nil {
						cpu = make([]uint64, len(b.samples))
					}
					cpu[i] = sc.CPUDelta
				}
				if !sc.CPUOnly {
					if sc.Attrs != "" {
						l.Attrs = attrs.get(e.tel, sc.Attrs)
						if sc.AttrsCut {
							e.tel.Add(cAttrsTruncated, 1)
						}
					}
					if e.linkContext(l, sc) {
						e.tel.Add(cLinked[sc.Source], 1)
					} else {
						e.tel.Add(cJoinNoSpan, 1)
					}
					continue
				}
			}
		}
		sp, ambiguous := e.spans.Resolve(s.tid, s.time)
		if ambiguous {
			if !e.opts.LinkAmbiguous {
				e.tel.Add(cJoinAmbiguous, 1)
				continue
			}
			sp = e.spans.Lookup(s.tid, s.time)
			if otherProcess(sp, st) {
				e.tel.Add(cJoinOther, 1)
				continue
			}
			e.tel.Add(cLinked[SourceThreadLatest], 1)
			e.link(l, sp)
			l.Source = SourceThreadLatest
			continue
		}
		if sp == nil {
			e.tel.Add(cJoinNoSpan, 1)
			continue
		}
		if otherProcess(sp, st) {
			e.tel.Add(cJoinOther, 1)
			continue
		}
		e.tel.Add(cLinked[SourceThread], 1)
		e.link(l, sp)
		if sp.Resource >= 0 {
			votes[sp.Resource]++
		}
	}
	best, bestN := int32(-1), 0
	for h, n := range votes {
		if n > bestN || (n == bestN && h < best) {
			best, bestN = h, n
		}
	}
	if best < 0 && !st.unnamed {
		if h, ok := e.names.get(st.info.Pid); ok {
			best = h
		}
	}
	return joined{links: links, cpu: cpu, resource: best, attrs: attrs.sets}
}

// otherProcess reports whether span sp names a process other than st's:
// the thread id is another process's.
func otherProcess(sp *tidmap.Span, st *procState) bool {
	return sp.Pid != 0 && int64(sp.Pid) != int64(st.info.Pid)
}
