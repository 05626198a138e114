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
	hash     uint64 // hashStack of the above
}

// batch holds what one process produced since its last report: samples,
// and the distinct raw stacks they use. Nothing in it is symbolized.
//
// Most stacks of a profile are new to their batch (the leaf addresses of
// inner loops vary from sample to sample), so interning one must cost
// no allocation: chains are copied into chunks of arena, and index is
// an open-addressed table of stacks by hash.
type batch struct {
	samples []rawSample
	stacks  []rawStack
	index   []int32  // 1 + index into stacks, 0: empty; len a power of two
	arena   []uint64 // the free tail of the chunk chains are copied to
}

func newBatch() *batch { return &batch{} }

// sizedBatch is a batch with room for n samples: the next report's batch
// of a steady process holds about as many as the last, and growing to
// them by appends allocated twice their size (a tenth of the collector's
// allocations at 999 Hz).
func sizedBatch(n int) *batch { return &batch{samples: make([]rawSample, 0, n)} }

const (
	minIndex = 64      // slots of a batch's first index
	minChunk = 256     // words of a batch's first chunk of chains
	maxChunk = 8 << 10 // words of the largest chunks (64 KiB)
)

// intern returns the index of the stack (chain, leafCall, gen), adding a
// copy of chain the first time it is seen in this batch.
func (b *batch) intern(chain []uint64, leafCall uint64, gen symbolize.Gen) int32 {
	h := hashStack(chain, leafCall, gen)
	if i, ok := b.lookup(h, chain, leafCall, gen); ok {
		return i
	}
	return b.add(rawStack{chain: b.copyChain(chain), leafCall: leafCall, gen: gen, hash: h})
}

// internFrom interns stack i of another batch. The chain is copied, so
// that a batch's chunks are freed with the last batch that shares its
// stacks, not kept by one stack that is still sampled.
func (b *batch) internFrom(o *batch, i int32) int32 {
	s := &o.stacks[i]
	if j, ok := b.lookup(s.hash, s.chain, s.leafCall, s.gen); ok {
		return j
	}
	return b.add(rawStack{chain: b.copyChain(s.chain), leafCall: s.leafCall, gen: s.gen, hash: s.hash})
}

func (b *batch) lookup(h uint64, chain []uint64, leafCall uint64, gen symbolize.Gen) (int32, bool) {
	if len(b.index) == 0 {
		return 0, false
	}
	mask := uint64(len(b.index) - 1)
	for j := h & mask; ; j = (j + 1) & mask {
		v := b.index[j]
		if v == 0 {
			return 0, false
		}
		if s := &b.stacks[v-1]; s.hash == h && s.leafCall == leafCall && s.gen == gen && slices.Equal(s.chain, chain) {
			return v - 1, true
		}
	}
}

// add appends s to the stacks and indexes it, growing the index to keep
// it at most half full.
func (b *batch) add(s rawStack) int32 {
	i := int32(len(b.stacks))
	b.stacks = append(b.stacks, s)
	if 2*len(b.stacks) > len(b.index) {
		n := max(minIndex, 2*len(b.index))
		b.index = make([]int32, n)
		for k := range b.stacks {
			b.slot(b.stacks[k].hash, int32(k))
		}
		return i
	}
	b.slot(s.hash, i)
	return i
}

// slot puts stack i in the first free slot of its probe sequence.
func (b *batch) slot(h uint64, i int32) {
	mask := uint64(len(b.index) - 1)
	j := h & mask
	for b.index[j] != 0 {
		j = (j + 1) & mask
	}
	b.index[j] = i + 1
}

// copyChain copies chain to the arena: chunks double from minChunk words
// to maxChunk, so that the many processes with few stacks hold little.
// Chains are never modified, and a chunk is freed when no stack refers to
// it.
func (b *batch) copyChain(chain []uint64) []uint64 {
	if len(chain) > cap(b.arena)-len(b.arena) {
		n := minChunk
		if c := cap(b.arena); c > 0 {
			n = min(2*c, maxChunk)
		}
		b.arena = make([]uint64, 0, max(n, len(chain)))
	}
	start := len(b.arena)
	b.arena = append(b.arena, chain...)
	return b.arena[start:len(b.arena):len(b.arena)]
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
		return b, sizedBatch(len(b.samples)), nil
	}
	out = &batch{samples: make([]rawSample, 0, n), stacks: b.stacks}
	keep = sizedBatch(len(b.samples))
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
// map generation, with murmur3's finalizer: FNV's low bits depend only on
// the inputs' low bits, and the index probes by the low bits. Collisions
// are settled by comparing the stacks.
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
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return h
}
