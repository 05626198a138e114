package htmlview

import (
	"fmt"

	"github.com/perfprof/perfprof/internal/analysis"
)

// FromTrace converts a loaded trace for the view: one timeline row per
// worker and one per other thread; polls and parks on their worker's row,
// spans on the row of their thread's samples, unless a poll stands for
// them. Every span goes in with its breakdown and the per-name statistics,
// as internal/analysis computes them, so that the page's span views show
// what `perfprof report --span/--trace-id` prints. The caller sets Title.
func FromTrace(t *analysis.Trace) *Data {
	d := &Data{Start: int64(t.Start)}
	if p, ok := t.SamplePeriod(); ok {
		d.Period = int64(p)
	}
	addSpans(d, t)
	addStacks(d, t)
	rs := newRows(d)
	rs.addWorkers(t)
	rs.addSamples(t)
	rs.addBars(t)
	return d
}

func breakdownOf(b analysis.Breakdown) Breakdown {
	return Breakdown{Spans: b.Spans, Wall: int64(b.Wall), OnSamples: b.OnSamples, OffSamples: b.OffSamples,
		Blocked: int64(b.Blocked), Runnable: int64(b.Runnable), OffUnknown: int64(b.OffUnknown)}
}

// addSpans fills the spans, their parents and breakdowns, and the
// statistics per span name.
func addSpans(d *Data, t *analysis.Trace) {
	per := t.SpanBreakdowns()
	d.Spans = make([]Span, len(t.Spans))
	for i := range t.Spans {
		sp := &t.Spans[i]
		d.Spans[i] = Span{Name: sp.Name, TraceID: sp.TraceID, Start: int64(sp.Start), End: int64(sp.End()),
			Breakdown: breakdownOf(per[i])}
		if p := t.SpanParent(int32(i)); p >= 0 {
			d.Spans[i].Parent = SpanAt(int(p))
		}
	}
	for _, n := range t.SpanNames() {
		d.SpanNames = append(d.SpanNames, SpanName{Name: n.Name, Count: n.Count, P50: int64(n.P50), P95: int64(n.P95),
			P99: int64(n.P99), Max: int64(n.Max), Breakdown: breakdownOf(n.Breakdown)})
	}
}

// addStacks fills the frames and the stacks, root first with inlined
// frames expanded.
func addStacks(d *Data, t *analysis.Trace) {
	d.Frames = make([]Frame, len(t.Frames))
	for i, f := range t.Frames {
		d.Frames[i] = Frame{Name: f.Func, File: f.File, Line: f.Line}
	}
	d.Stacks = make([][]int32, len(t.Stacks))
	for i, st := range t.Stacks {
		var fs []int32
		for j := len(st) - 1; j >= 0; j-- {
			fs = append(fs, t.Locations[st[j]].Frames...)
		}
		d.Stacks[i] = fs
	}
}

// rows gives out the timeline's rows: one per worker, one per thread that
// is not a worker.
type rows struct {
	d         *Data
	workerRow map[uint64]int32
	threadRow map[int32]int32 // thread index -> row
	tidRow    map[uint32]int32
}

func newRows(d *Data) *rows {
	return &rows{d: d, workerRow: map[uint64]int32{}, threadRow: map[int32]int32{}, tidRow: map[uint32]int32{}}
}

func (rs *rows) row(name string) int32 {
	rs.d.Rows = append(rs.d.Rows, Row{Name: name})
	return int32(len(rs.d.Rows) - 1)
}

func (rs *rows) worker(w uint64) int32 {
	r, ok := rs.workerRow[w]
	if !ok {
		r = rs.row(fmt.Sprintf("worker %d", w))
		rs.workerRow[w] = r
	}
	return r
}

// addWorkers makes the workers' rows first, in id order, so that threads
// come after them in the order they appear.
func (rs *rows) addWorkers(t *analysis.Trace) {
	maxW := -1
	for i := range t.Samples {
		if w := t.Samples[i].Worker; w < analysis.BlockingWorker {
			maxW = max(maxW, int(w))
		}
	}
	for _, p := range t.Polls {
		maxW = max(maxW, int(min(p.Worker, analysis.BlockingWorker-1)))
	}
	for w := 0; w <= maxW; w++ {
		rs.worker(uint64(w))
	}
}

// thread returns the row of a sample's thread, making it if needed.
func (rs *rows) thread(t *analysis.Trace, s *analysis.TraceSample) int32 {
	if s.Worker < analysis.BlockingWorker {
		r := rs.worker(uint64(s.Worker))
		if _, ok := rs.tidRow[t.Threads[s.Thread].Tid]; !ok {
			rs.tidRow[t.Threads[s.Thread].Tid] = r
		}
		return r
	}
	r, ok := rs.threadRow[s.Thread]
	if !ok {
		th := t.Threads[s.Thread]
		name := fmt.Sprintf("tid %d", th.Tid)
		if th.Name != "" {
			name += " (" + th.Name + ")"
		}
		r = rs.row(name)
		rs.threadRow[s.Thread] = r
		rs.tidRow[th.Tid] = r
	}
	return r
}

func (rs *rows) addSamples(t *analysis.Trace) {
	d := rs.d
	d.Samples = make([]PageSample, 0, len(t.Samples))
	for i := range t.Samples {
		s := &t.Samples[i]
		hs := PageSample{Time: int64(s.Time), Row: rs.thread(t, s), Stack: s.Stack, Weight: 1}
		if s.Source == analysis.SourceOffCPU {
			hs.OffCPU = true
			hs.Weight = int64(s.Value)
			hs.State = State(s.State)
		}
		if sp := t.SpanOf(s); sp >= 0 {
			hs.Span = SpanAt(int(sp))
		}
		d.Samples = append(d.Samples, hs)
	}
}

// addBars draws polls and parks on their worker's row and spans that no
// poll stands for on the row of their thread's samples (a span of a thread
// without samples has no row and is left out).
func (rs *rows) addBars(t *analysis.Trace) {
	d := rs.d
	polled := map[string]bool{}
	for _, p := range t.Polls {
		polled[p.SpanID()] = true
		name := p.SpawnLoc
		if sp, ok := t.SpanByID(p.SpanID()); ok {
			name = sp.Name
		}
		d.Bars = append(d.Bars, Bar{Row: rs.worker(p.Worker), Start: int64(p.Start), End: int64(p.End),
			Name: fmt.Sprintf("poll task %d %s", p.TaskID, name), Kind: "poll"})
	}
	for _, p := range t.Parks {
		d.Bars = append(d.Bars, Bar{Row: rs.worker(p.Worker), Start: int64(p.Start), End: int64(p.End), Name: "park", Kind: "park"})
	}
	for i, sp := range t.Spans {
		if polled[sp.SpanID] {
			continue // drawn above as its poll
		}
		r, ok := rs.tidRow[sp.Tid]
		if !ok {
			continue
		}
		d.Bars = append(d.Bars, Bar{Row: r, Start: int64(sp.Start), End: int64(sp.End()), Name: sp.Name, Kind: "span",
			Span: SpanAt(i)})
	}
}
