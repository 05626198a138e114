package htmlview

import (
	"cmp"
	"fmt"
	"slices"
)

// Limits that keep the page small and fast for any number of samples.
const (
	// maxBuckets is the most time buckets a row's marks are split into;
	// fewer when there are many rows (markBudget / rows, at least
	// minBuckets), so that the page stays a few megabytes.
	maxBuckets = 8192
	minBuckets = 1024
	markBudget = 1 << 17
	// maxBars is the most bars kept as given; past it, bars of one row and
	// kind closer than a growing gap are merged.
	maxBars = 200_000
)

// page is what the script in the page reads (JSON). Times are nanoseconds
// relative to Data.Start. Field names are short: they repeat in big arrays.
type page struct {
	Funcs  [][2]string `json:"funcs"`  // function: name, file
	On     *flame      `json:"on"`     // on-CPU tree, by sample count
	Off    *flame      `json:"off"`    // off-CPU tree, by nanoseconds; null without off-CPU samples
	Frames []int       `json:"frames"` // flat pairs: function, line
	Stacks [][]int32   `json:"stacks"` // root-first, indices into the Frames pairs
	Rows   []string    `json:"rows"`

	T0       int64     `json:"t0"`       // first sample or bar start
	T1       int64     `json:"t1"`       // last sample or bar end
	BucketNs int64     `json:"bucketNs"` // mark bucket b covers [t0+b*bucketNs, t0+(b+1)*bucketNs)
	Marks    [][]int64 `json:"marks"`    // per row, flat entries of markFields

	Strings    []string `json:"strings"` // bar names and kinds
	Bars       bars     `json:"bars"`
	BarsMerged int      `json:"barsMerged"` // input bars folded into others

	Stats stats `json:"stats"`

	// For the scoped views (scope.go): the tree of all samples, on- and
	// off-CPU, by count, whose shape every scoped tree is cut from; the
	// spans' names and statistics; the per-sample and per-span columns.
	All          *flame     `json:"all"`
	Period       int64      `json:"period"`
	SpanNames    []spanName `json:"spanNames"`
	SpanStrings  []string   `json:"spanStrings"`
	SpansKept    int        `json:"spansKept"`
	SpansOmitted int        `json:"spansOmitted"`
	Detail       string     `json:"detail"`
}

// spanName is a SpanName; B is a breakdown as [7]int64 (breakdownJSON).
type spanName struct {
	Name  string   `json:"name"`
	Count int      `json:"count"`
	P50   int64    `json:"p50"`
	P95   int64    `json:"p95"`
	P99   int64    `json:"p99"`
	Max   int64    `json:"max"`
	B     [7]int64 `json:"b"`
}

// breakdownJSON is b as the page reads it: spans, wall, on-CPU samples,
// off-CPU samples, blocked, runnable and unknown-state off-CPU ns.
func breakdownJSON(b Breakdown) [7]int64 {
	return [7]int64{int64(b.Spans), b.Wall, b.OnSamples, b.OffSamples, b.Blocked, b.Runnable, b.OffUnknown}
}

// A mark entry: bucket, off-CPU (0/1), samples, weight (samples for on-CPU,
// ns for off-CPU), representative stack (index into page.Stacks), samples
// that have that stack.
const markFields = 6

type stats struct {
	Samples     int   `json:"samples"`
	OnCPU       int   `json:"onCPU"`
	OffCPU      int   `json:"offCPU"`
	OffCPUNs    int64 `json:"offCPUNs"`
	Bars        int   `json:"bars"`
	Stacks      int   `json:"stacks"`
	Frames      int   `json:"frames"`
	MarkEntries int   `json:"markEntries"`
}

// flame is a merged call tree in preorder: node i has function Fn[i] (-1
// for the root), depth Depth[i], value Val[i] (its samples or ns, children
// included) and the line Line[i] that has most of its value; NL[i] other
// lines were merged into it. Children follow their parent, sorted by name.
type flame struct {
	Total int64   `json:"total"`
	Fn    []int32 `json:"fn"`
	Depth []int32 `json:"depth"`
	Val   []int64 `json:"val"`
	Line  []int   `json:"line"`
	NL    []int32 `json:"nl"`
}

type bars struct {
	Row   []int32 `json:"row"`
	Start []int64 `json:"start"`
	End   []int64 `json:"end"`
	Name  []int32 `json:"name"` // index into page.Strings
	Kind  []int32 `json:"kind"` // index into page.Strings
	Span  []int32 `json:"span"` // 1 + page span index; 0 none; -1 a span the page left out
}

// funcKey identifies a function: frames merge by it in the flamegraph.
type funcKey struct{ name, file string }

// builder holds the interned functions shared by the trees and the stacks.
type builder struct {
	d         *Data
	funcs     [][2]string
	funcID    map[funcKey]int32
	frameFunc []int32 // Data.Frames index -> function, -1 until interned
}

func build(d *Data) (*page, error) {
	b := &builder{d: d, funcID: make(map[funcKey]int32), frameFunc: make([]int32, len(d.Frames))}
	for i := range b.frameFunc {
		b.frameFunc[i] = -1
	}
	p := &page{Rows: make([]string, len(d.Rows))}
	for i, r := range d.Rows {
		p.Rows[i] = r.Name
	}

	// Per distinct stack first: trees then cost stacks x depth, not samples x depth.
	onW := make([]int64, len(d.Stacks))
	offW := make([]int64, len(d.Stacks))
	for _, s := range d.Samples {
		if s.OffCPU {
			offW[s.Stack] += offWeight(s)
			p.Stats.OffCPU++
			p.Stats.OffCPUNs += offWeight(s)
		} else {
			onW[s.Stack]++
			p.Stats.OnCPU++
		}
	}
	p.Stats.Samples = len(d.Samples)
	p.Stats.Bars = len(d.Bars)
	p.Stats.Stacks = len(d.Stacks)
	p.Stats.Frames = len(d.Frames)

	p.On = b.tree(onW)
	if p.Stats.OffCPU > 0 {
		p.Off = b.tree(offW)
	}

	p.T0, p.T1 = timeRange(d)
	p.BucketNs, p.Marks = b.marks(p, p.T0, p.T1)
	for _, m := range p.Marks {
		p.Stats.MarkEntries += len(m) / markFields
	}
	// Every sample, by count, so that each stack has a node to end at.
	allW := make([]int64, len(d.Stacks))
	for _, s := range d.Samples {
		allW[s.Stack]++
	}
	var leaf []int32
	p.All, leaf = b.treeLeaves(allW)
	st := keepSpans(d.Spans, maxSpans)
	p.Strings, p.Bars, p.BarsMerged = barTable(d, st)
	p.Funcs = b.funcs
	p.Period = d.Period
	p.SpanNames = make([]spanName, len(d.SpanNames))
	for i, n := range d.SpanNames {
		p.SpanNames[i] = spanName{n.Name, n.Count, n.P50, n.P95, n.P99, n.Max, breakdownJSON(n.Breakdown)}
	}
	var nameID []int32
	p.SpanStrings, nameID = spanStrings(d, st)
	p.SpansKept = len(st.order)
	p.SpansOmitted = len(d.Spans) - len(st.order)
	var err error
	if p.Detail, err = encodeDetail(d, p, st, nameID, leaf); err != nil {
		return nil, err
	}
	return p, nil
}

// offWeight is what an off-CPU sample stands for, in ns.
func offWeight(s PageSample) int64 {
	if s.Weight == 0 {
		return 1
	}
	return s.Weight
}

func (b *builder) fn(frame int32) int32 {
	if id := b.frameFunc[frame]; id >= 0 {
		return id
	}
	f := b.d.Frames[frame]
	k := funcKey{f.Name, f.File}
	id, ok := b.funcID[k]
	if !ok {
		id = int32(len(b.funcs))
		b.funcs = append(b.funcs, [2]string{f.Name, f.File})
		b.funcID[k] = id
	}
	b.frameFunc[frame] = id
	return id
}

// tnode is a node of the tree while it is built.
type tnode struct {
	fn     int32
	parent int32
	val    int64
	lines  []lineVal // usually one or two
}

type lineVal struct {
	line int
	val  int64
}

// tree merges the stacks with weight w[stack] > 0 into a call tree.
func (b *builder) tree(w []int64) *flame {
	f, _ := b.treeLeaves(w)
	return f
}

// treeLeaves is tree, and for each stack the node (preorder index) its
// leaf frame merged into, -1 for stacks of weight 0.
func (b *builder) treeLeaves(w []int64) (*flame, []int32) {
	nodes := []tnode{{fn: -1, parent: -1}}
	child := make(map[[2]int32]int32) // (parent, function) -> node
	leaf := make([]int32, len(w))
	for si, weight := range w {
		leaf[si] = -1
		if weight == 0 {
			continue
		}
		nodes[0].val += weight
		cur := int32(0)
		for _, fr := range b.d.Stacks[si] {
			fn := b.fn(fr)
			k := [2]int32{cur, fn}
			n, ok := child[k]
			if !ok {
				n = int32(len(nodes))
				nodes = append(nodes, tnode{fn: fn, parent: cur})
				child[k] = n
			}
			nd := &nodes[n]
			nd.val += weight
			line := b.d.Frames[fr].Line
			found := false
			for i := range nd.lines {
				if nd.lines[i].line == line {
					nd.lines[i].val += weight
					found = true
					break
				}
			}
			if !found {
				nd.lines = append(nd.lines, lineVal{line, weight})
			}
			cur = n
		}
		leaf[si] = cur
	}

	// Children lists, sorted by function name then file, for a stable layout.
	kids := make([][]int32, len(nodes))
	for i := 1; i < len(nodes); i++ {
		p := nodes[i].parent
		kids[p] = append(kids[p], int32(i))
	}
	for _, k := range kids {
		slices.SortFunc(k, func(x, y int32) int {
			fx, fy := b.funcs[nodes[x].fn], b.funcs[nodes[y].fn]
			return cmp.Or(cmp.Compare(fx[0], fy[0]), cmp.Compare(fx[1], fy[1]))
		})
	}

	f := &flame{
		Total: nodes[0].val,
		Fn:    make([]int32, 0, len(nodes)),
		Depth: make([]int32, 0, len(nodes)),
		Val:   make([]int64, 0, len(nodes)),
		Line:  make([]int, 0, len(nodes)),
		NL:    make([]int32, 0, len(nodes)),
	}
	type item struct{ node, depth int32 }
	todo := []item{{0, 0}}
	pre := make([]int32, len(nodes)) // node -> preorder index
	for len(todo) > 0 {
		it := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		pre[it.node] = int32(len(f.Fn))
		nd := &nodes[it.node]
		best := lineVal{}
		for i, l := range nd.lines {
			if i == 0 || l.val > best.val || (l.val == best.val && l.line < best.line) {
				best = l
			}
		}
		nl := int32(0)
		if len(nd.lines) > 1 {
			nl = int32(len(nd.lines) - 1)
		}
		f.Fn = append(f.Fn, nd.fn)
		f.Depth = append(f.Depth, it.depth)
		f.Val = append(f.Val, nd.val)
		f.Line = append(f.Line, best.line)
		f.NL = append(f.NL, nl)
		k := kids[it.node]
		for i := len(k) - 1; i >= 0; i-- { // reversed: the first child pops first
			todo = append(todo, item{k[i], it.depth + 1})
		}
	}
	for si, n := range leaf {
		if n >= 0 {
			leaf[si] = pre[n]
		}
	}
	return f, leaf
}

// timeRange is the first and last instant of samples and bars, relative to
// d.Start; both 0 when there are neither.
func timeRange(d *Data) (t0, t1 int64) {
	first := true
	see := func(lo, hi int64) {
		if first {
			t0, t1, first = lo, hi, false
			return
		}
		t0 = min(t0, lo)
		t1 = max(t1, hi)
	}
	for _, s := range d.Samples {
		see(s.Time-d.Start, s.Time-d.Start)
	}
	for _, b := range d.Bars {
		see(b.Start-d.Start, b.End-d.Start)
	}
	return t0, t1
}

// marks buckets the samples per row, on/off-CPU and time bucket, keeping per
// bucket the count, the weight and the most frequent stack. It adds the
// representative stacks to p.Frames and p.Stacks.
func (b *builder) marks(p *page, t0, t1 int64) (bucketNs int64, marks [][]int64) {
	d := b.d
	marks = make([][]int64, len(d.Rows))
	if len(d.Samples) == 0 {
		return 1, marks
	}
	rowsUsed := make(map[int32]struct{})
	for _, s := range d.Samples {
		rowsUsed[s.Row] = struct{}{}
	}
	nb := int64(min(maxBuckets, max(minBuckets, markBudget/len(rowsUsed))))
	bucketNs = (t1-t0)/nb + 1 // so that (t1-t0)/bucketNs < nb

	type entry struct {
		row           int32
		bucket        int64
		off           bool
		count, weight int64
	}
	var entries []entry
	index := make(map[uint64]int32)
	ofSample := make([]int32, len(d.Samples))
	for i, s := range d.Samples {
		bk := (s.Time - d.Start - t0) / bucketNs
		key := uint64(s.Row)<<33 | uint64(bk)<<1
		if s.OffCPU {
			key |= 1
		}
		e, ok := index[key]
		if !ok {
			e = int32(len(entries))
			entries = append(entries, entry{row: s.Row, bucket: bk, off: s.OffCPU})
			index[key] = e
		}
		entries[e].count++
		if s.OffCPU {
			entries[e].weight += offWeight(s)
		} else {
			entries[e].weight++
		}
		ofSample[i] = e
	}

	// Counting sort of the samples' stacks by entry, then the mode of each
	// entry's run: no per-bucket maps.
	startOf := make([]int32, len(entries)+1)
	for _, e := range ofSample {
		startOf[e+1]++
	}
	for i := 1; i < len(startOf); i++ {
		startOf[i] += startOf[i-1]
	}
	fill := slices.Clone(startOf[:len(entries)])
	stacks := make([]int32, len(d.Samples))
	for i, e := range ofSample {
		stacks[fill[e]] = d.Samples[i].Stack
		fill[e]++
	}
	mode := make([]int32, len(entries))
	modeCount := make([]int64, len(entries))
	for e := range entries {
		run := stacks[startOf[e]:startOf[e+1]]
		slices.Sort(run)
		best, bestN := run[0], 0
		for i := 0; i < len(run); {
			j := i
			for j < len(run) && run[j] == run[i] {
				j++
			}
			if j-i > bestN {
				best, bestN = run[i], j-i
			}
			i = j
		}
		mode[e], modeCount[e] = best, int64(bestN)
	}

	// Only the representative stacks (and their frames) go into the page.
	stackRef := make(map[int32]int32)
	frameRef := make(map[int32]int32)
	ref := func(stack int32) int32 {
		if r, ok := stackRef[stack]; ok {
			return r
		}
		src := d.Stacks[stack]
		out := make([]int32, len(src))
		for i, fr := range src {
			r, ok := frameRef[fr]
			if !ok {
				r = int32(len(p.Frames) / 2)
				p.Frames = append(p.Frames, int(b.fn(fr)), d.Frames[fr].Line)
				frameRef[fr] = r
			}
			out[i] = r
		}
		r := int32(len(p.Stacks))
		p.Stacks = append(p.Stacks, out)
		stackRef[stack] = r
		return r
	}

	order := make([]int32, len(entries))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(x, y int32) int {
		ex, ey := &entries[x], &entries[y]
		return cmp.Or(cmp.Compare(ex.row, ey.row), cmp.Compare(ex.bucket, ey.bucket), cmpBool(ex.off, ey.off))
	})
	for _, e := range order {
		en := &entries[e]
		off := int64(0)
		if en.off {
			off = 1
		}
		marks[en.row] = append(marks[en.row], en.bucket, off, en.count, en.weight, int64(ref(mode[e])), modeCount[e])
	}
	return bucketNs, marks
}

func cmpBool(x, y bool) int {
	switch {
	case x == y:
		return 0
	case !x:
		return -1
	default:
		return 1
	}
}

// barTable sorts the bars by row and start, interns their names and kinds,
// and merges close bars of one row and kind when there are more than maxBars.
func barTable(d *Data, st *spanTable) (strs []string, out bars, merged int) {
	bs := slices.Clone(d.Bars)
	slices.SortStableFunc(bs, func(x, y Bar) int {
		return cmp.Or(cmp.Compare(x.Row, y.Row), cmp.Compare(x.Start, y.Start), cmp.Compare(x.End, y.End))
	})
	n := len(bs)
	if n > maxBars {
		bs = mergeBars(bs)
		merged = n - len(bs)
	}
	ids := make(map[string]int32)
	intern := func(s string) int32 {
		id, ok := ids[s]
		if !ok {
			id = int32(len(strs))
			strs = append(strs, s)
			ids[s] = id
		}
		return id
	}
	out = bars{
		Row:   make([]int32, len(bs)),
		Start: make([]int64, len(bs)),
		End:   make([]int64, len(bs)),
		Name:  make([]int32, len(bs)),
		Kind:  make([]int32, len(bs)),
		Span:  make([]int32, len(bs)),
	}
	for i, b := range bs {
		if b.Span != NoSpan {
			out.Span[i] = st.pageRef[b.Span.Index()]
			if out.Span[i] == 0 {
				out.Span[i] = -1
			}
		}
		out.Row[i] = b.Row
		out.Start[i] = b.Start - d.Start
		out.End[i] = b.End - d.Start
		out.Name[i] = intern(b.Name)
		out.Kind[i] = intern(b.Kind)
	}
	if strs == nil {
		strs = []string{}
	}
	return strs, out, merged
}

// mergeBars merges, per row and kind, bars that start less than gap after
// the previous one ended, doubling gap until at most maxBars remain. A merged
// bar is named after its kind and how many bars it stands for. bs is sorted
// by row and start.
func mergeBars(bs []Bar) []Bar {
	span := int64(1)
	if len(bs) > 0 {
		lo, hi := bs[0].Start, bs[0].End
		for _, b := range bs {
			lo, hi = min(lo, b.Start), max(hi, b.End)
		}
		span = max(1, hi-lo)
	}
	for gap := max(1, span/(maxBars/4)); ; gap *= 2 {
		var out []Bar
		last := make(map[string]int) // kind -> index in out, for the current row
		row := int32(-1)
		counts := map[int]int{}
		for _, b := range bs {
			if b.Row != row {
				row = b.Row
				clear(last)
			}
			if i, ok := last[b.Kind]; ok && b.Start-out[i].End < gap {
				out[i].End = max(out[i].End, b.End)
				counts[i]++
				continue
			}
			last[b.Kind] = len(out)
			counts[len(out)] = 1
			out = append(out, b)
		}
		if len(out) <= maxBars {
			for i, n := range counts {
				if n > 1 {
					out[i].Name = fmt.Sprintf("%d %s bars merged", n, out[i].Kind)
					out[i].Span = NoSpan
				}
			}
			return out
		}
	}
}
