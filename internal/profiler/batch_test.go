package profiler

import (
	"slices"
	"testing"
)

func TestTakeBefore(t *testing.T) {
	chains := [][]uint64{{1, 2}, {3}, {1, 2, 3}}
	for _, c := range []struct {
		name       string
		times      []uint64 // sample i uses stack i%len(chains)
		cut        uint64
		outTimes   []uint64
		keepTimes  []uint64
		keepStacks int // distinct stacks in keep's own table
		split      bool
	}{
		{name: "nothing old enough", times: []uint64{5, 6}, cut: 5, keepTimes: []uint64{5, 6}, keepStacks: 2},
		{name: "everything", times: []uint64{1, 2, 3}, cut: 10, outTimes: []uint64{1, 2, 3}},
		{name: "split: keep re-interns only its stacks", times: []uint64{1, 9, 2, 8}, cut: 5,
			outTimes: []uint64{1, 2}, keepTimes: []uint64{9, 8}, keepStacks: 2, split: true},
		{name: "split: a stack shared by both sides", times: []uint64{1, 2, 3, 9}, cut: 5,
			outTimes: []uint64{1, 2, 3}, keepTimes: []uint64{9}, keepStacks: 1, split: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBatch()
			for i, tm := range c.times {
				idx := b.intern(chains[i%len(chains)], 0, 0)
				b.samples = append(b.samples, rawSample{time: tm, stack: idx})
			}
			out, keep, moved := b.takeBefore(c.cut)
			var outTimes, keepTimes []uint64
			if out != nil {
				for _, s := range out.samples {
					outTimes = append(outTimes, s.time)
					if !slices.Equal(out.stacks[s.stack].chain, b.stacks[s.stack].chain) {
						t.Errorf("out sample at %d lost its stack", s.time)
					}
				}
			}
			for _, s := range keep.samples {
				keepTimes = append(keepTimes, s.time)
			}
			if !slices.Equal(outTimes, c.outTimes) || !slices.Equal(keepTimes, c.keepTimes) {
				t.Fatalf("out %v keep %v; want %v, %v", outTimes, keepTimes, c.outTimes, c.keepTimes)
			}
			if keep != b && len(keep.stacks) != c.keepStacks {
				t.Errorf("keep holds %d stacks, want %d", len(keep.stacks), c.keepStacks)
			}
			if (moved != nil) != c.split {
				t.Fatalf("moved %v, split %v", moved, c.split)
			}
			for from, to := range moved {
				orig, kept := b.samples[from], keep.samples[to]
				if orig.time != kept.time || !slices.Equal(b.stacks[orig.stack].chain, keep.stacks[kept.stack].chain) {
					t.Errorf("moved %d→%d: %+v became %+v", from, to, orig, kept)
				}
			}
		})
	}
}

func TestInternTellsStacksApart(t *testing.T) {
	b := newBatch()
	a := b.intern([]uint64{1, 2}, 0, 0)
	c := b.intern([]uint64{1, 2}, 0x77, 0)
	if a == c || b.intern([]uint64{1, 2}, 0x77, 0) != c || b.intern([]uint64{1, 2}, 0, 0) != a {
		t.Fatal("a stack with a leaf caller candidate is another stack")
	}
	// The same addresses read at another generation of the perf map may
	// be other JIT code.
	g := b.intern([]uint64{1, 2}, 0, 1)
	if g == a || b.intern([]uint64{1, 2}, 0, 1) != g {
		t.Fatal("a stack read at another perf map generation is another stack")
	}
	chain := []uint64{5, 6}
	i := b.intern(chain, 0, 0)
	chain[0] = 9
	if b.stacks[i].chain[0] != 5 {
		t.Fatal("intern kept the caller's slice, which the ring reuses")
	}
}
