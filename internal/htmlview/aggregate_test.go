package htmlview

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestTreeSmall(t *testing.T) {
	d := &Data{
		Frames: []Frame{
			{"main", "main.go", 10}, // 0
			{"a", "a.go", 5},        // 1
			{"a", "a.go", 6},        // 2: same function, other line
			{"b", "b.go", 1},        // 3
			{"c", "c.go", 2},        // 4
			{"a", "other.go", 5},    // 5: same name, other file: another function
			{"main", "main.go", 10}, // 6: duplicate of 0
			{"read", "kernel", 0},   // 7
		},
		Stacks: [][]int32{
			{0, 1, 3},    // main a b
			{0, 2, 4},    // main a(6) c
			{6, 1},       // main a (frame 6 = frame 0)
			{0, 5},       // main a(other.go)
			{},           // no frames
			{0, 1, 3, 7}, // main a b read
		},
		Rows: []Row{{"w0"}},
	}
	for s, n := range []int{3, 2, 1, 1, 1, 0} {
		for range n {
			d.Samples = append(d.Samples, PageSample{Stack: int32(s)})
		}
	}
	d.Samples = append(d.Samples, PageSample{Stack: 5, OffCPU: true, Weight: 700}, PageSample{Stack: 5, OffCPU: true}) // 0 counts as 1
	p := mustBuild(t, d)

	name := func(f *flame, i int) string {
		if f.Fn[i] < 0 {
			return "all"
		}
		return p.Funcs[f.Fn[i]][0] + "@" + p.Funcs[f.Fn[i]][1]
	}
	dump := func(f *flame) []string {
		var out []string
		for i := range f.Fn {
			out = append(out, fmt.Sprintf("%s%s=%d line %d+%d", strings.Repeat(" ", int(f.Depth[i])), name(f, i), f.Val[i], f.Line[i], f.NL[i]))
		}
		return out
	}
	wantOn := []string{
		"all=8 line 0+0",
		" main@main.go=7 line 10+0",
		"  a@a.go=6 line 5+1", // lines 5 (3+1 samples) and 6 (2)
		"   b@b.go=3 line 1+0",
		"   c@c.go=2 line 2+0",
		"  a@other.go=1 line 5+0",
	}
	if got := dump(p.On); !reflect.DeepEqual(got, wantOn) {
		t.Errorf("on-CPU tree:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantOn, "\n"))
	}
	wantOff := []string{
		"all=701 line 0+0",
		" main@main.go=701 line 10+0",
		"  a@a.go=701 line 5+0",
		"   b@b.go=701 line 1+0",
		"    read@kernel=701 line 0+0",
	}
	if got := dump(p.Off); !reflect.DeepEqual(got, wantOff) {
		t.Errorf("off-CPU tree:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantOff, "\n"))
	}
	if p.On.Total != 8 || p.Off.Total != 701 || p.Stats.OnCPU != 8 || p.Stats.OffCPU != 2 || p.Stats.OffCPUNs != 701 {
		t.Errorf("totals: on %d off %d, stats %+v", p.On.Total, p.Off.Total, p.Stats)
	}
}

func TestNoOffCPUTree(t *testing.T) {
	d := &Data{Frames: []Frame{{"f", "", 0}}, Stacks: [][]int32{{0}}, Rows: []Row{{"r"}}, Samples: []PageSample{{Stack: 0}}}
	if p := mustBuild(t, d); p.Off != nil {
		t.Errorf("off-CPU tree without off-CPU samples: %+v", p.Off)
	}
}

// checkTree checks that every node's value is its own plus its children's,
// that the values add up to the total, and that the value under the
// outermost frames of each function is the share of samples with that
// function on the stack (what the page's search reports).
func checkTree(t *testing.T, d *Data, p *page, f *flame, off bool, total int64) {
	t.Helper()
	if f.Total != total || f.Val[0] != total {
		t.Fatalf("total %d, root %d, want %d", f.Total, f.Val[0], total)
	}
	n := len(f.Fn)
	children := make([]int64, n)
	var path []int
	end := make([]int, n)
	for i := 0; i < n; i++ {
		d := int(f.Depth[i])
		for len(path) > d {
			end[path[len(path)-1]] = i
			path = path[:len(path)-1]
		}
		if d > 0 {
			if len(path) != d {
				t.Fatalf("node %d: depth %d after depth %d", i, d, len(path)-1)
			}
			children[path[d-1]] += f.Val[i]
		} else if i != 0 {
			t.Fatalf("node %d: a second root", i)
		}
		path = append(path, i)
	}
	for _, i := range path {
		end[i] = n
	}
	var selfSum int64
	for i := range n {
		self := f.Val[i] - children[i]
		if self < 0 || f.Val[i] <= 0 {
			t.Fatalf("node %d: value %d, children %d", i, f.Val[i], children[i])
		}
		selfSum += self
	}
	if selfSum != total {
		t.Errorf("self values add up to %d, want %d", selfSum, total)
	}
	for fn, name := range p.Funcs {
		var under int64
		for i := 1; i < n; {
			if int(f.Fn[i]) == fn {
				under += f.Val[i]
				i = end[i]
			} else {
				i++
			}
		}
		var want int64
		for _, s := range d.Samples {
			if s.OffCPU != off {
				continue
			}
			if slices.ContainsFunc(d.Stacks[s.Stack], func(fr int32) bool {
				return d.Frames[fr].Name == name[0] && d.Frames[fr].File == name[1]
			}) {
				if off {
					want += offWeight(s)
				} else {
					want++
				}
			}
		}
		if under != want {
			t.Errorf("%s: %d under its outermost frames, want %d", name[0], under, want)
		}
	}
}

func TestTreeTotals(t *testing.T) {
	d := genData(20_000, 7)
	p := mustBuild(t, d)
	var on, offNs int64
	for _, s := range d.Samples {
		if s.OffCPU {
			offNs += offWeight(s)
		} else {
			on++
		}
	}
	t.Run("on", func(t *testing.T) { checkTree(t, d, p, p.On, false, on) })
	t.Run("off", func(t *testing.T) { checkTree(t, d, p, p.Off, true, offNs) })
}

func TestMarksKeepTotals(t *testing.T) {
	for _, n := range []int{1, 1000, 100_000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			d := genData(n, uint64(n))
			p := mustBuild(t, d)
			type key struct {
				row    int
				bucket int64
				off    bool
			}
			// Brute force: the samples of each bucket.
			in := map[key][]PageSample{}
			for _, s := range d.Samples {
				k := key{int(s.Row), (s.Time - d.Start - p.T0) / p.BucketNs, s.OffCPU}
				in[k] = append(in[k], s)
			}
			nb := int64(0)
			entries := 0
			for row, m := range p.Marks {
				if len(m)%markFields != 0 {
					t.Fatalf("row %d: %d values", row, len(m))
				}
				for e := 0; e < len(m); e += markFields {
					entries++
					k := key{row, m[e], m[e+1] == 1}
					nb = max(nb, k.bucket+1)
					ss := in[k]
					delete(in, k)
					var weight int64
					freq := map[int32]int64{}
					for _, s := range ss {
						if s.OffCPU {
							weight += offWeight(s)
						} else {
							weight++
						}
						freq[s.Stack]++
					}
					if m[e+2] != int64(len(ss)) || m[e+3] != weight {
						t.Fatalf("%+v: count %d weight %d, want %d and %d", k, m[e+2], m[e+3], len(ss), weight)
					}
					// The representative stack is one of the most frequent.
					rep := p.Stacks[m[e+4]]
					var best int64
					for _, c := range freq {
						best = max(best, c)
					}
					var got int64
					for st, c := range freq {
						if sameStack(d, d.Stacks[st], p, rep) {
							got += c
						}
					}
					if m[e+5] != best || got != best {
						t.Fatalf("%+v: representative stack seen %d times (says %d), the most frequent %d", k, got, m[e+5], best)
					}
				}
			}
			if len(in) != 0 {
				t.Errorf("%d buckets with samples have no mark", len(in))
			}
			if nb > maxBuckets {
				t.Errorf("%d buckets, more than %d", nb, maxBuckets)
			}
			if p.Stats.MarkEntries != entries {
				t.Errorf("stats say %d entries, have %d", p.Stats.MarkEntries, entries)
			}
		})
	}
}

// sameStack says whether the page's stack (frame pairs) has the frames of src.
func sameStack(d *Data, src []int32, p *page, stack []int32) bool {
	if len(src) != len(stack) {
		return false
	}
	for i, fr := range src {
		f := d.Frames[fr]
		fn, line := p.Frames[2*stack[i]], p.Frames[2*stack[i]+1]
		if p.Funcs[fn] != [2]string{f.Name, f.File} || line != f.Line {
			return false
		}
	}
	return true
}

func TestBucketsPerRow(t *testing.T) {
	for _, tc := range []struct{ rows, want int }{{1, maxBuckets}, {4, maxBuckets}, {64, markBudget / 64}, {1000, minBuckets}} {
		d := &Data{Frames: []Frame{{"f", "", 0}}, Stacks: [][]int32{{0}}}
		for r := range tc.rows {
			d.Rows = append(d.Rows, Row{fmt.Sprint(r)})
			d.Samples = append(d.Samples, PageSample{Row: int32(r), Time: int64(r) * 1e9 / int64(tc.rows)}, PageSample{Row: int32(r), Time: 1e9})
		}
		p := mustBuild(t, d)
		if got := (p.T1-p.T0)/p.BucketNs + 1; got != int64(tc.want) {
			t.Errorf("%d rows: %d buckets, want %d", tc.rows, got, tc.want)
		}
	}
}

func TestMergeBars(t *testing.T) {
	d := &Data{Rows: []Row{{"a"}, {"b"}}}
	const n = maxBars + maxBars/2
	for i := range n {
		row := int32(i % 2)
		start := int64(i/2) * 1000
		kind := "poll"
		if i%6 >= 4 {
			kind = "park"
		}
		d.Bars = append(d.Bars, Bar{Row: row, Start: start, End: start + 600, Name: fmt.Sprint("task ", i), Kind: kind})
	}
	strs, bs, merged := barTable(d, keepSpans(d.Spans, maxSpans))
	if len(bs.Row) > maxBars || len(bs.Row)+merged != n || merged == 0 {
		t.Fatalf("%d bars, %d merged, from %d", len(bs.Row), merged, n)
	}
	// The merged bars cover the input bars (checked for a sample of them).
	for _, b := range d.Bars[:1000] {
		covered := false
		for i := range bs.Row {
			if bs.Row[i] == b.Row && strs[bs.Kind[i]] == b.Kind && bs.Start[i] <= b.Start && bs.End[i] >= b.End {
				covered = true
				break
			}
		}
		if !covered {
			t.Fatalf("bar %+v not covered", b)
		}
	}
	for i := 1; i < len(bs.Row); i++ {
		if bs.Row[i] < bs.Row[i-1] || (bs.Row[i] == bs.Row[i-1] && bs.Start[i] < bs.Start[i-1]) {
			t.Fatalf("bars not sorted at %d", i)
		}
	}
}

func TestBarsKeptBelowLimit(t *testing.T) {
	d := genData(100, 3)
	strs, bs, merged := barTable(d, keepSpans(d.Spans, maxSpans))
	if merged != 0 || len(bs.Row) != len(d.Bars) {
		t.Fatalf("%d of %d bars kept, %d merged", len(bs.Row), len(d.Bars), merged)
	}
	want := map[string]int{}
	for _, b := range d.Bars {
		want[fmt.Sprint(b.Row, b.Start-d.Start, b.End-d.Start, b.Name, b.Kind)]++
	}
	for i := range bs.Row {
		want[fmt.Sprint(bs.Row[i], bs.Start[i], bs.End[i], strs[bs.Name[i]], strs[bs.Kind[i]])]--
	}
	for k, v := range want {
		if v != 0 {
			t.Errorf("bar %s: %+d", k, v)
		}
	}
}

func mustBuild(t *testing.T, d *Data) *page {
	t.Helper()
	p, err := build(d)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
