package analysis

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/perfprof/perfprof/internal/convention"
)

// What a span did, from its samples.
//
// A span's samples are the samples linked to it or to any span below it
// (its descendants by parent_span_id, on any thread): the receiver links a
// sample to the innermost span running on its thread, so without the
// descendants a request that spends its time in a child span ("db.query")
// would look idle. Spans are never split by time: a sample counts, whole,
// where its link puts it.

// Breakdown is where the wall time of one or more spans went, estimated
// from their samples.
type Breakdown struct {
	// Spans is the number of spans whose durations make up Wall: the
	// chosen spans that are not below another chosen span.
	Spans int
	// Wall is the sum of those spans' durations, ns.
	Wall uint64
	// OnCPU is on-CPU samples × the sample period (0 when the period is
	// unknown: Period is then 0).
	OnCPU uint64
	// Blocked, Runnable and OffUnknown are the value_ns of off-CPU samples
	// by thread state (OffUnknown: files that record no state).
	Blocked, Runnable, OffUnknown uint64
	// NotObserved is Wall less everything above: time no sample stands
	// for (a thread the profiler did not see, sampling error). It is 0
	// when the samples account for more than Wall, which happens when a
	// span's children ran on other threads at the same time.
	NotObserved uint64
	// Samples by kind; OffStates splits OffSamples by thread state
	// (indexed by StateUnknown, StateBlocked, StateRunnable).
	OnSamples, OffSamples int64
	OffStates             [3]int64
	// Period is the on-CPU sample period (perfprof.sample_period_ns), 0 if
	// the files do not say.
	Period uint64
}

// add counts one sample.
func (b *Breakdown) add(s *TraceSample) {
	if s.Source != SourceOffCPU {
		b.OnSamples++
		return
	}
	b.OffSamples++
	if int(s.State) < len(b.OffStates) {
		b.OffStates[s.State]++
	}
	switch s.State {
	case StateBlocked:
		b.Blocked += s.Value
	case StateRunnable:
		b.Runnable += s.Value
	default:
		b.OffUnknown += s.Value
	}
}

// plus adds the counts of o (not its Wall or Spans).
func (b *Breakdown) plus(o *Breakdown) {
	b.OnSamples += o.OnSamples
	b.OffSamples += o.OffSamples
	for i, n := range o.OffStates {
		b.OffStates[i] += n
	}
	b.Blocked += o.Blocked
	b.Runnable += o.Runnable
	b.OffUnknown += o.OffUnknown
}

// finish derives OnCPU and NotObserved.
func (b *Breakdown) finish(period uint64) {
	b.Period = period
	b.OnCPU = uint64(b.OnSamples) * period
	seen := b.OnCPU + b.Blocked + b.Runnable + b.OffUnknown
	b.NotObserved = 0
	if seen < b.Wall {
		b.NotObserved = b.Wall - seen
	}
}

// SamplePeriod returns the on-CPU sample period the files give, in ns.
func (t *Trace) SamplePeriod() (uint64, bool) {
	v, err := strconv.ParseUint(t.Metadata[convention.MetaSamplePeriod], 10, 64)
	return v, err == nil && v > 0
}

// spanTree holds the span links of a trace, computed on first use.
type spanTree struct {
	parent   []int32 // span -> parent span, -1 for a root or a parent without SpanEvent
	linkSpan []int32 // link -> span with its span_id, -1 if none
}

func (t *Trace) spanTree() *spanTree {
	d := t.derive()
	d.spanOnce.Do(func() {
		st := &spanTree{parent: make([]int32, len(t.Spans)), linkSpan: make([]int32, len(t.Links))}
		for i := range t.Spans {
			st.parent[i] = -1
			if p, ok := t.spanByID[t.Spans[i].ParentID]; ok && t.Spans[i].ParentID != "" && p != int32(i) {
				st.parent[i] = p
			}
		}
		// A cycle of parent ids (a broken file) must not loop forever. Cut
		// it where it closes, at the span whose parent is already on the
		// walk: cutting the span the walk started from instead would also
		// detach spans that merely hang below the cycle, and their samples
		// would no longer count for the spans above them.
		state := make([]uint8, len(t.Spans)) // 0 unseen, 1 on this walk, 2 done
		var walk []int32
		for i := range st.parent {
			walk = walk[:0]
			for j := int32(i); j >= 0 && state[j] == 0; {
				state[j] = 1
				walk = append(walk, j)
				p := st.parent[j]
				if p >= 0 && state[p] == 1 {
					st.parent[j], p = -1, -1
				}
				j = p
			}
			for _, j := range walk {
				state[j] = 2
			}
		}
		for i, l := range t.Links {
			st.linkSpan[i] = -1
			if sp, ok := t.spanByID[l.SpanID]; ok && l.SpanID != "" {
				st.linkSpan[i] = sp
			}
		}
		d.spans = st
	})
	return d.spans
}

// SpanParent returns the index of span i's parent in t.Spans, or -1 when
// it is a root or its parent has no SpanEvent.
func (t *Trace) SpanParent(i int32) int32 { return t.spanTree().parent[i] }

// SpanOf returns the index in t.Spans of the span a sample is linked to,
// or -1 when it is not linked or its span has no SpanEvent.
func (t *Trace) SpanOf(s *TraceSample) int32 {
	if s.Link < 0 {
		return -1
	}
	return t.spanTree().linkSpan[s.Link]
}

// SpanBreakdowns returns the breakdown of every span (by index into
// t.Spans), each covering the span's own samples and its descendants'.
// It is computed once per trace: the slice is shared, not to be modified.
func (t *Trace) SpanBreakdowns() []Breakdown {
	d := t.derive()
	d.breakdownOnce.Do(func() { d.breakdowns = t.spanBreakdowns() })
	return d.breakdowns
}

func (t *Trace) spanBreakdowns() []Breakdown {
	st := t.spanTree()
	own := make([]Breakdown, len(t.Spans))
	for i := range t.Samples {
		if sp := t.SpanOf(&t.Samples[i]); sp >= 0 {
			own[sp].add(&t.Samples[i])
		}
	}
	// Children before parents: order spans by depth, deepest first.
	depth := make([]int32, len(t.Spans))
	for i := range t.Spans {
		for p := st.parent[i]; p >= 0; p = st.parent[p] {
			depth[i]++
		}
	}
	order := make([]int32, len(t.Spans))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int { return cmp.Compare(depth[b], depth[a]) })
	out := own
	for _, i := range order {
		if p := st.parent[i]; p >= 0 {
			out[p].plus(&out[i])
		}
	}
	period, _ := t.SamplePeriod()
	for i := range out {
		out[i].Spans = 1
		out[i].Wall = t.Spans[i].Duration
		out[i].finish(period)
	}
	return out
}

// SpanSelector chooses spans. Every field set must match; Slowest then
// keeps the longest spans of those.
type SpanSelector struct {
	Name    string // span name
	TraceID string // 32 hex digits
	SpanID  string // 16 hex digits
	Slowest int    // keep the N longest; 0 keeps all
}

// IsZero reports whether s chooses nothing in particular (the whole trace).
func (s SpanSelector) IsZero() bool { return s == SpanSelector{} }

// String describes s as the CLI's flags would.
func (s SpanSelector) String() string {
	var parts []string
	if s.Name != "" {
		parts = append(parts, fmt.Sprintf("--span %q", s.Name))
	}
	if s.TraceID != "" {
		parts = append(parts, "--trace-id "+s.TraceID)
	}
	if s.SpanID != "" {
		parts = append(parts, "--span-id "+s.SpanID)
	}
	if s.Slowest > 0 {
		parts = append(parts, "--slowest "+strconv.Itoa(s.Slowest))
	}
	return strings.Join(parts, " ")
}

// Selection is the spans a selector chose and the samples they cover.
type Selection struct {
	Selector SpanSelector
	// Spans are the chosen spans (indices into Trace.Spans), longest
	// first, ties by start.
	Spans []int32
	// Breakdown of the chosen spans together.
	Breakdown Breakdown

	covered []bool // link -> a sample with it belongs to the selection
}

// Has reports whether sample s belongs to the selection. A nil selection
// has every sample.
func (sel *Selection) Has(s *TraceSample) bool {
	if sel == nil {
		return true
	}
	return s.Link >= 0 && sel.covered[s.Link]
}

// Filter returns a sample filter for Aggregate: the samples of the
// selection that also pass f (nil passes all).
func (sel *Selection) Filter(f func(*TraceSample) bool) func(*TraceSample) bool {
	if sel == nil {
		return f
	}
	return func(s *TraceSample) bool { return sel.Has(s) && (f == nil || f(s)) }
}

// Select chooses spans and the samples they cover: the samples linked to a
// chosen span or to a span below one. With a TraceID, samples linked to
// that trace are covered even when their span has no SpanEvent (a runtime
// whose spans carry no thread), and a trace whose spans all lack
// SpanEvents is still a selection, of Wall 0. It is an error when nothing
// matches.
func (t *Trace) Select(q SpanSelector) (*Selection, error) {
	if q.Slowest < 0 {
		return nil, fmt.Errorf("slowest %d: want a positive number", q.Slowest)
	}
	if q.TraceID != "" {
		q.TraceID = strings.ToLower(q.TraceID)
	}
	if q.SpanID != "" {
		q.SpanID = strings.ToLower(q.SpanID)
	}
	st := t.spanTree()
	sel := &Selection{Selector: q}
	for i := range t.Spans {
		sp := &t.Spans[i]
		if (q.Name == "" || sp.Name == q.Name) && (q.TraceID == "" || sp.TraceID == q.TraceID) &&
			(q.SpanID == "" || sp.SpanID == q.SpanID) {
			sel.Spans = append(sel.Spans, int32(i))
		}
	}
	slices.SortStableFunc(sel.Spans, func(a, b int32) int {
		if c := cmp.Compare(t.Spans[b].Duration, t.Spans[a].Duration); c != 0 {
			return c
		}
		return cmp.Compare(t.Spans[a].Start, t.Spans[b].Start)
	})
	if q.Slowest > 0 && len(sel.Spans) > q.Slowest {
		sel.Spans = sel.Spans[:q.Slowest]
	}

	chosen := make([]bool, len(t.Spans))
	for _, i := range sel.Spans {
		chosen[i] = true
	}
	// A span is in the selection when it or an ancestor is chosen.
	in := make([]int8, len(t.Spans)) // 0 unknown, 1 in, -1 out
	var inSel func(i int32) bool
	inSel = func(i int32) bool {
		var path []int32
		res := false
		for j := i; j >= 0; j = st.parent[j] {
			if in[j] != 0 {
				res = in[j] > 0
				break
			}
			if chosen[j] {
				res = true
				path = append(path, j)
				break
			}
			path = append(path, j)
		}
		v := int8(-1)
		if res {
			v = 1
		}
		for _, j := range path {
			in[j] = v
		}
		return res
	}
	sel.covered = make([]bool, len(t.Links))
	traceOnly := q.TraceID != "" && q.Name == "" && q.SpanID == "" && q.Slowest == 0
	for li, l := range t.Links {
		if sp := st.linkSpan[li]; sp >= 0 {
			sel.covered[li] = inSel(sp)
		} else if traceOnly {
			sel.covered[li] = l.TraceID == q.TraceID
		}
	}
	if len(sel.Spans) == 0 && !slices.Contains(sel.covered, true) {
		return nil, fmt.Errorf("no span matches %s", q)
	}

	b := &sel.Breakdown
	for _, i := range sel.Spans {
		if p := st.parent[i]; p < 0 || !inSel(p) {
			b.Spans++
			b.Wall += t.Spans[i].Duration
		}
	}
	for i := range t.Samples {
		if s := &t.Samples[i]; sel.Has(s) {
			b.add(s)
		}
	}
	period, _ := t.SamplePeriod()
	b.finish(period)
	return sel, nil
}

// NameStat is what the spans of one name did.
type NameStat struct {
	Name  string
	Count int // spans of the name
	// Durations of the spans, nearest-rank percentiles.
	P50, P95, P99, Max uint64
	// Breakdown of the spans of the name together: a span below another
	// span of the same name is inside that one's breakdown and not
	// counted twice.
	Breakdown
}

// SpanNames returns the statistics of every span name, the largest total
// wall time first. It is Select({Name: n}) for every name, in one pass.
func (t *Trace) SpanNames() []NameStat {
	per := t.SpanBreakdowns()
	st := t.spanTree()
	byName := map[string]*NameStat{}
	durs := map[string][]uint64{}
	var order []string
	for i := range t.Spans {
		sp := &t.Spans[i]
		ns := byName[sp.Name]
		if ns == nil {
			ns = &NameStat{Name: sp.Name}
			byName[sp.Name] = ns
			order = append(order, sp.Name)
		}
		ns.Count++
		durs[sp.Name] = append(durs[sp.Name], sp.Duration)
		top := true
		for p := st.parent[i]; p >= 0; p = st.parent[p] {
			if t.Spans[p].Name == sp.Name {
				top = false
				break
			}
		}
		if top {
			ns.Spans++
			ns.Wall += per[i].Wall
			ns.plus(&per[i])
		}
	}
	period, _ := t.SamplePeriod()
	out := make([]NameStat, 0, len(order))
	for _, n := range order {
		ns := byName[n]
		d := durs[n]
		slices.Sort(d)
		ns.P50, ns.P95, ns.P99, ns.Max = Percentile(d, 50), Percentile(d, 95), Percentile(d, 99), d[len(d)-1]
		ns.finish(period)
		out = append(out, *ns)
	}
	slices.SortStableFunc(out, func(a, b NameStat) int {
		if c := cmp.Compare(b.Wall, a.Wall); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}
