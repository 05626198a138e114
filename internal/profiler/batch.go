package profiler

import (
	"slices"

	"github.com/perfprof/perfprof/internal/symbolize"
)

// rawSample is one sample waiting for its report: an on-CPU perf sample,
// or (state != 0) a group of off-CPU time.
type rawSample struct {
	time uint64 // CLOCK_MONOTONIC ns
	// weight: see Sample.Weight.
	weight uint64
	tid    uint32
	cpu    uint32
	stack  int32 // index into batch.stacks; -1: unknown (off-CPU only)
	state  uint8 // 0: on-CPU; else a sched.State
	// moved: the sample is another image's, which has a copy of it
	// (moveQueued); it is dropped when taken.
	moved bool
}

// rawStack is a callchain as the kernel gave it (context markers kept),
// with the word at SP when the leaf may not have pushed its frame yet
// (0: none), and the generation of the process's perf map when it was
// read. Whether that word is the leaf's caller depends on the binary's
// unwind tables, which only symbolization reads; JIT code in the chain is
// named as the perf map stood at gen.
type rawStack struct {
	chain    []uint64
	leafCall uint64
	gen      symbolize.Gen
}

// batch holds what one process produced since its last report: samples,
// and the distinct raw stacks they use. Nothing in it is symbolized.
type batch struct {
	samples []rawSample
	stacks  []rawStack
	byHash  map[uint64][]int32 // stack hash → candidates in stacks
}

func newBatch() *batch { return &batch{byHash: map[uint64][]int32{}} }

// intern returns the index of the stack (chain, leafCall, gen), adding a
// copy of chain the first time it is seen in this batch.
func (b *batch) intern(chain []uint64, leafCall uint64, gen symbolize.Gen) int32 {
	h := hashStack(chain, leafCall, gen)
	for _, i := range b.byHash[h] {
		if s := &b.stacks[i]; s.leafCall == leafCall && s.gen == gen && slices.Equal(s.chain, chain) {
			return i
		}
	}
	i := int32(len(b.stacks))
	b.stacks = append(b.stacks, rawStack{chain: slices.Clone(chain), leafCall: leafCall, gen: gen})
	b.byHash[h] = append(b.byHash[h], i)
	return i
}

// internFrom interns stack i of another batch, sharing its chain (chains
// are never modified).
func (b *batch) internFrom(o *batch, i int32) int32 {
	s := o.stacks[i]
	h := hashStack(s.chain, s.leafCall, s.gen)
	for _, j := range b.byHash[h] {
		if t := &b.stacks[j]; t.leafCall == s.leafCall && t.gen == s.gen && slices.Equal(t.chain, s.chain) {
			return j
		}
	}
	j := int32(len(b.stacks))
	b.stacks = append(b.stacks, s)
	b.byHash[h] = append(b.byHash[h], j)
	return j
}

// takeBefore splits off the samples older than cut: out holds them (nil if
// none) and shares b's stack table; keep holds the rest, with a stack table
// of its own, so that out's can be dropped after the report. When the
// samples were split, moved maps the index of each kept sample in b to its
// index in keep.
func (b *batch) takeBefore(cut uint64) (out, keep *batch, moved map[int32]int32) {
	n := 0
	for _, s := range b.samples {
		if s.time < cut {
			n++
		}
	}
	switch n {
	case 0:
		return nil, b, nil
	case len(b.samples):
		return b, newBatch(), nil
	}
	out = &batch{samples: make([]rawSample, 0, n), stacks: b.stacks}
	keep = newBatch()
	moved = make(map[int32]int32, len(b.samples)-n)
	stacks := map[int32]int32{}
	for i, s := range b.samples {
		if s.time < cut {
			out.samples = append(out.samples, s)
			continue
		}
		if s.stack >= 0 {
			j, ok := stacks[s.stack]
			if !ok {
				j = keep.internFrom(b, s.stack)
				stacks[s.stack] = j
			}
			s.stack = j
		}
		moved[int32(i)] = int32(len(keep.samples))
		keep.samples = append(keep.samples, s)
	}
	return out, keep, moved
}

// hashStack is FNV-1a over the addresses, the leaf caller and the perf
// map generation; collisions are settled by comparing the stacks.
func hashStack(chain []uint64, leafCall uint64, gen symbolize.Gen) uint64 {
	h := uint64(14695981039346656037)
	for _, a := range chain {
		h ^= a
		h *= 1099511628211
	}
	h ^= leafCall
	h *= 1099511628211
	if gen != 0 { // a process with a perf map whose lines replaced others
		h ^= uint64(gen)
		h *= 1099511628211
	}
	return h
}
