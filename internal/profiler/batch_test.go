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

// TestInternMany: across the index's growth and the arena's chunks, every
// stack keeps its index, and the stacks a batch keeps at a split are its
// own copies.
func TestInternMany(t *testing.T) {
	b := newBatch()
	chain := func(i int) []uint64 {
		c := make([]uint64, 1+i%40) // some longer than the first chunk's tail
		for k := range c {
			c[k] = uint64(i)<<20 | uint64(k)
		}
		return c
	}
	const n = 20_000
	for i := range n {
		if got := b.intern(chain(i), 0, 0); got != int32(i) {
			t.Fatalf("stack %d interned as %d", i, got)
		}
		b.samples = append(b.samples, rawSample{time: uint64(i), stack: int32(i)})
	}
	for i := range n {
		if got := b.intern(chain(i), 0, 0); got != int32(i) {
			t.Fatalf("stack %d found as %d", i, got)
		}
		if !slices.Equal(b.stacks[i].chain, chain(i)) {
			t.Fatalf("stack %d is %x", i, b.stacks[i].chain)
		}
	}
	if len(b.stacks) != n {
		t.Fatalf("%d stacks, want %d", len(b.stacks), n)
	}
	_, keep, _ := b.takeBefore(n / 2)
	for i, s := range keep.samples {
		st := keep.stacks[s.stack]
		if !slices.Equal(st.chain, chain(n/2+i)) {
			t.Fatalf("kept sample %d has %x", i, st.chain)
		}
		if &st.chain[0] == &b.stacks[n/2+i].chain[0] {
			t.Fatal("a kept stack shares the old batch's chunk")
		}
		if got := keep.intern(chain(n/2+i), 0, 0); got != s.stack {
			t.Fatalf("kept stack %d found as %d, want %d", i, got, s.stack)
		}
	}
}
