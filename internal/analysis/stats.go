package analysis

import (
	"cmp"
	"slices"
	"sort"
	"strings"
	"sync"
)

// derived holds tables computed on first use.
type derived struct {
	once      sync.Once
	funcNames []string  // function id -> name
	leaf      []int32   // stack -> function id of its leaf frame, -1 if empty
	funcs     [][]int32 // stack -> distinct function ids in it
	linkSpan  []int32   // link -> span-name id (into spanNames), -1 if none
	linkRoot  []int32   // link -> root-name id (into rootNames), -1 if none
	spanNames []string
	rootNames []string

	pollOnce  sync.Once
	workPolls map[uint32][]int32 // worker -> its polls, by start

	spanOnce sync.Once
	spans    *spanTree

	breakdownOnce sync.Once
	breakdowns    []Breakdown // per span, SpanBreakdowns
}

func (t *Trace) derive() *derived {
	d := &t.derived
	d.once.Do(func() {
		ids := map[string]int32{}
		frameFunc := make([]int32, len(t.Frames))
		for i, f := range t.Frames {
			id, ok := ids[f.Func]
			if !ok {
				id = int32(len(d.funcNames))
				d.funcNames = append(d.funcNames, f.Func)
				ids[f.Func] = id
			}
			frameFunc[i] = id
		}
		d.leaf = make([]int32, len(t.Stacks))
		d.funcs = make([][]int32, len(t.Stacks))
		for si, st := range t.Stacks {
			d.leaf[si] = -1
			var fs []int32
			for j, li := range st {
				fr := t.Locations[li].Frames
				if j == 0 && len(fr) > 0 {
					d.leaf[si] = frameFunc[fr[len(fr)-1]] // innermost inlined frame
				}
				for _, f := range fr {
					if id := frameFunc[f]; !slices.Contains(fs, id) {
						fs = append(fs, id)
					}
				}
			}
			d.funcs[si] = fs
		}
		spanIDs, rootIDs := map[string]int32{}, map[string]int32{}
		intern := func(m map[string]int32, names *[]string, s string) int32 {
			id, ok := m[s]
			if !ok {
				id = int32(len(*names))
				*names = append(*names, s)
				m[s] = id
			}
			return id
		}
		d.linkSpan = make([]int32, len(t.Links))
		d.linkRoot = make([]int32, len(t.Links))
		for i, l := range t.Links {
			d.linkSpan[i], d.linkRoot[i] = -1, -1
			if l.SpanID != "" {
				name := "(span without its span event)"
				if sp, ok := t.SpanByID(l.SpanID); ok {
					name = sp.Name
				}
				d.linkSpan[i] = intern(spanIDs, &d.spanNames, name)
			}
			if l.RootName != "" {
				d.linkRoot[i] = intern(rootIDs, &d.rootNames, l.RootName)
			}
		}
	})
	return d
}

// SpanName returns the name of the span a sample is linked to: the name of
// the SpanEvent with its span_id.
func (t *Trace) SpanName(s *TraceSample) (string, bool) {
	if s.Link < 0 {
		return "", false
	}
	d := t.derive()
	if id := d.linkSpan[s.Link]; id >= 0 {
		return d.spanNames[id], true
	}
	return "", false
}

// Agg is the weight of a set of samples per stack.
type Agg struct {
	Samples int64            // samples counted
	Total   uint64           // their weight
	Stacks  map[int32]uint64 // stack -> weight
}

func (a *Agg) add(stack int32, w uint64) {
	a.Samples++
	a.Total += w
	a.Stacks[stack] += w
}

// Weighting of samples.
type WeightFunc func(*TraceSample) uint64

// Count weighs every sample 1.
func Count(*TraceSample) uint64 { return 1 }

// OffCPUWeight weighs a sample by value_ns when present, else 1.
func OffCPUWeight(s *TraceSample) uint64 { return s.Weight() }

// Filters of samples.
func OnCPU(s *TraceSample) bool  { return s.Source == SourceCPU }
func OffCPU(s *TraceSample) bool { return s.Source == SourceOffCPU }

// Aggregate sums the weights of the samples that pass filter (nil = all)
// per stack.
func (t *Trace) Aggregate(filter func(*TraceSample) bool, weight WeightFunc) *Agg {
	a := &Agg{Stacks: map[int32]uint64{}}
	for i := range t.Samples {
		s := &t.Samples[i]
		if filter == nil || filter(s) {
			a.add(s.Stack, weight(s))
		}
	}
	return a
}

// Grouping assigns samples to named groups.
type Grouping struct {
	Key  func(*TraceSample) int32 // group id; -1 = in no group
	Name func(int32) string
}

// ByWorker groups samples by worker id.
func (t *Trace) ByWorker() Grouping {
	return Grouping{
		Key: func(s *TraceSample) int32 { return int32(s.Worker) },
		Name: func(k int32) string {
			switch k {
			case NoWorker:
				return "not a worker"
			case BlockingWorker:
				return "blocking pool"
			}
			return "worker " + itoa(int64(k))
		},
	}
}

// ByThread groups samples by thread.
func (t *Trace) ByThread() Grouping {
	return Grouping{
		Key:  func(s *TraceSample) int32 { return s.Thread },
		Name: func(k int32) string { return t.Threads[k].Label() },
	}
}

// BySpan groups samples linked to a span by the span's name (from the
// SpanEvent with its span_id).
func (t *Trace) BySpan() Grouping {
	d := t.derive()
	return Grouping{
		Key: func(s *TraceSample) int32 {
			if s.Link < 0 {
				return -1
			}
			return d.linkSpan[s.Link]
		},
		Name: func(k int32) string { return d.spanNames[k] },
	}
}

// ByRoot groups samples by the name of their local root span
// (span_root_name).
func (t *Trace) ByRoot() Grouping {
	d := t.derive()
	return Grouping{
		Key: func(s *TraceSample) int32 {
			if s.Link < 0 {
				return -1
			}
			return d.linkRoot[s.Link]
		},
		Name: func(k int32) string { return d.rootNames[k] },
	}
}

// Group is the aggregate of one group.
type Group struct {
	Name string
	*Agg
}

// AggregateBy aggregates the samples that pass filter per group, largest
// group first. Samples in no group are counted in the returned Agg.
func (t *Trace) AggregateBy(filter func(*TraceSample) bool, weight WeightFunc, g Grouping) ([]Group, *Agg) {
	groups := map[int32]*Agg{}
	none := &Agg{Stacks: map[int32]uint64{}}
	for i := range t.Samples {
		s := &t.Samples[i]
		if filter != nil && !filter(s) {
			continue
		}
		k := g.Key(s)
		if k < 0 {
			none.add(s.Stack, weight(s))
			continue
		}
		a := groups[k]
		if a == nil {
			a = &Agg{Stacks: map[int32]uint64{}}
			groups[k] = a
		}
		a.add(s.Stack, weight(s))
	}
	out := make([]Group, 0, len(groups))
	for k, a := range groups {
		out = append(out, Group{g.Name(k), a})
	}
	slices.SortFunc(out, func(a, b Group) int {
		if c := cmp.Compare(b.Total, a.Total); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, none
}

// FuncStat is one row of a function table. Self counts samples whose leaf
// frame is the function, Cum samples that have it anywhere in the stack
// (once per sample, however often it recurs).
type FuncStat struct {
	Name      string
	Self, Cum uint64
}

// Funcs returns the function table of a, by Self then Cum, descending.
func (t *Trace) Funcs(a *Agg) []FuncStat {
	d := t.derive()
	self := make([]uint64, len(d.funcNames))
	cum := make([]uint64, len(d.funcNames))
	for st, w := range a.Stacks {
		if l := d.leaf[st]; l >= 0 {
			self[l] += w
		}
		for _, f := range d.funcs[st] {
			cum[f] += w
		}
	}
	var out []FuncStat
	for i, c := range cum {
		if c > 0 {
			out = append(out, FuncStat{d.funcNames[i], self[i], c})
		}
	}
	slices.SortFunc(out, func(a, b FuncStat) int {
		if c := cmp.Compare(b.Self, a.Self); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Cum, a.Cum); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// FrameNames returns the function names of a stack, root first, with
// inlined frames expanded.
func (t *Trace) FrameNames(stack int32) []string {
	st := t.Stacks[stack]
	var out []string
	for j := len(st) - 1; j >= 0; j-- {
		for _, f := range t.Locations[st[j]].Frames {
			out = append(out, t.Frames[f].Func)
		}
	}
	return out
}

// StackFrames returns the frames of a stack, leaf first, with inlined frames
// expanded (the innermost inlined frame first).
func (t *Trace) StackFrames(stack int32) []Frame {
	var out []Frame
	for _, li := range t.Stacks[stack] {
		fr := t.Locations[li].Frames
		for k := len(fr) - 1; k >= 0; k-- {
			out = append(out, t.Frames[fr[k]])
		}
	}
	return out
}

// Folded returns folded stacks "root;...;leaf" with their weights, merged
// when identical. prefix, if not "", is a frame put before the root. Every
// frame, prefix included, is one field of one line whatever its name: a ';'
// (Rust's "[u8; 4]") becomes ',' and control characters, newlines
// included, are escaped as by Printable (a newline as \n).
func (t *Trace) Folded(a *Agg, prefix string) map[string]uint64 {
	out := map[string]uint64{}
	var sb strings.Builder
	prefix = foldedFrame(prefix)
	for st, w := range a.Stacks {
		sb.Reset()
		if prefix != "" {
			sb.WriteString(prefix)
		}
		for _, n := range t.FrameNames(st) {
			if sb.Len() > 0 {
				sb.WriteByte(';')
			}
			sb.WriteString(foldedFrame(n))
		}
		out[sb.String()] += w
	}
	return out
}

// foldedFrame is a frame name as one field of a folded line.
func foldedFrame(name string) string {
	return strings.ReplaceAll(Printable(name), ";", ",")
}

// StackWeight is a stack and its weight.
type StackWeight struct {
	Stack  int32
	Weight uint64
}

// TopStacks returns the n heaviest stacks of a.
func TopStacks(a *Agg, n int) []StackWeight {
	out := make([]StackWeight, 0, len(a.Stacks))
	for s, w := range a.Stacks {
		out = append(out, StackWeight{s, w})
	}
	slices.SortFunc(out, func(x, y StackWeight) int {
		if c := cmp.Compare(y.Weight, x.Weight); c != 0 {
			return c
		}
		return cmp.Compare(x.Stack, y.Stack)
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// workerPolls returns the polls of each worker sorted by start.
func (t *Trace) workerPolls() map[uint32][]int32 {
	d := &t.derived
	d.pollOnce.Do(func() {
		d.workPolls = map[uint32][]int32{}
		for i := range t.Polls {
			w := uint32(t.Polls[i].Worker)
			d.workPolls[w] = append(d.workPolls[w], int32(i))
		}
		for _, ps := range d.workPolls {
			slices.SortFunc(ps, func(a, b int32) int { return cmp.Compare(t.Polls[a].Start, t.Polls[b].Start) })
		}
	})
	return d.workPolls
}

// pollIn returns the poll among ps (sorted by start) that holds time ts,
// or -1.
func pollIn(t *Trace, ps []int32, ts uint64) int32 {
	i := sort.Search(len(ps), func(i int) bool { return t.Polls[ps[i]].Start > ts }) - 1
	if i >= 0 && ts < t.Polls[ps[i]].End {
		return ps[i]
	}
	return -1
}

// LongPoll is a poll longer than the threshold with the samples taken on
// its worker while it ran.
type LongPoll struct {
	Poll     int32 // index into Trace.Polls
	Duration uint64
	OnCPU    *Agg // on-CPU samples inside the poll
	OffCPU   *Agg // off-CPU samples inside the poll, weighted by value_ns when present
}

// LongPolls returns the polls longer than threshold ns, longest first.
func (t *Trace) LongPolls(threshold uint64) []LongPoll {
	var out []LongPoll
	byWorker := map[uint32][]int32{}
	for i := range t.Polls {
		p := &t.Polls[i]
		if p.End-p.Start > threshold {
			w := uint32(p.Worker)
			byWorker[w] = append(byWorker[w], int32(len(out)))
			out = append(out, LongPoll{Poll: int32(i), Duration: p.End - p.Start,
				OnCPU: &Agg{Stacks: map[int32]uint64{}}, OffCPU: &Agg{Stacks: map[int32]uint64{}}})
		}
	}
	if len(out) == 0 {
		return nil
	}
	// Per worker, the long polls by start, as poll indices for pollIn.
	polls := map[uint32][]int32{}
	lpOf := map[int32]int{}
	for w, ls := range byWorker {
		ps := make([]int32, len(ls))
		for j, l := range ls {
			ps[j] = out[l].Poll
			lpOf[out[l].Poll] = int(l)
		}
		slices.SortFunc(ps, func(a, b int32) int { return cmp.Compare(t.Polls[a].Start, t.Polls[b].Start) })
		polls[w] = ps
	}
	for i := range t.Samples {
		s := &t.Samples[i]
		ps, ok := polls[s.Worker]
		if !ok {
			continue
		}
		if p := pollIn(t, ps, s.Time); p >= 0 {
			lp := &out[lpOf[p]]
			if s.Source == SourceOffCPU {
				lp.OffCPU.add(s.Stack, s.Weight())
			} else {
				lp.OnCPU.add(s.Stack, 1)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b LongPoll) int { return cmp.Compare(b.Duration, a.Duration) })
	return out
}

// Blocking aggregates the off-CPU samples in which a thread blocked (state
// blocked or unknown, not runnable) while inside a span (linked) or a poll
// (its worker polling at that time), weighted by value_ns when present.
// weighted says whether any sample had value_ns.
func (t *Trace) Blocking() (a *Agg, weighted bool) {
	a = &Agg{Stacks: map[int32]uint64{}}
	wp := t.workerPolls()
	for i := range t.Samples {
		s := &t.Samples[i]
		if s.Source != SourceOffCPU || s.State == StateRunnable {
			continue
		}
		if (s.Link < 0 || !t.Links[s.Link].Linked()) && pollIn(t, wp[s.Worker], s.Time) < 0 {
			continue
		}
		if s.Value > 0 {
			weighted = true
		}
		a.add(s.Stack, s.Weight())
	}
	return a, weighted
}

// SchedDelay summarizes scheduling delays.
type SchedDelay struct {
	// From says where the values come from: "thread_state runnable
	// value_ns" (off-CPU samples of preempted threads) or "WorkerUnpark
	// sched_wait_ns" (dial9's schedstat wait while parked), "" if neither.
	From          string
	N             int
	P50, P99, Max uint64
}

// SchedDelays computes scheduling delay percentiles from off-CPU samples
// with thread_state runnable and value_ns, or, in files without them, from
// WorkerUnparkEvent.sched_wait_ns.
func (t *Trace) SchedDelays() SchedDelay {
	var v []uint64
	for i := range t.Samples {
		s := &t.Samples[i]
		if s.Source == SourceOffCPU && s.State == StateRunnable && s.Value > 0 {
			v = append(v, s.Value)
		}
	}
	d := SchedDelay{From: "thread_state runnable value_ns"}
	if len(v) == 0 {
		v = slices.Clone(t.Unparks)
		d.From = "WorkerUnpark sched_wait_ns"
	}
	if len(v) == 0 {
		return SchedDelay{}
	}
	slices.Sort(v)
	d.N = len(v)
	d.P50 = Percentile(v, 50)
	d.P99 = Percentile(v, 99)
	d.Max = v[len(v)-1]
	return d
}

// Percentile returns the p-th percentile of sorted v (nearest rank).
func Percentile(v []uint64, p float64) uint64 {
	if len(v) == 0 {
		return 0
	}
	r := int(p/100*float64(len(v))+0.999999) - 1
	return v[min(max(r, 0), len(v)-1)]
}
