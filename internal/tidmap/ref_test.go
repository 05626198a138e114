package tidmap

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// ref is a brute-force model of Map: a flat list of the spans held, scanned
// on every question.
type ref struct {
	max     int
	spans   []refSpan
	workers map[uint32]refWorker
}

type refSpan struct {
	tid uint32
	s   Span
}

type refWorker struct {
	id         int64
	start, end uint64
}

func newRef(max int) *ref { return &ref{max: max, workers: map[uint32]refWorker{}} }

func (r *ref) find(trace [16]byte, span [8]byte) int {
	for i := range r.spans {
		if r.spans[i].s.TraceID == trace && r.spans[i].s.SpanID == span {
			return i
		}
	}
	return -1
}

func (r *ref) add(tid uint32, s Span) error {
	if s.End < s.Start || s.TraceID == ([16]byte{}) || s.SpanID == ([8]byte{}) {
		return ErrInvalidSpan
	}
	if r.find(s.TraceID, s.SpanID) >= 0 {
		return nil
	}
	if len(r.spans) >= r.max {
		return ErrFull
	}
	s.Matched = false
	r.spans = append(r.spans, refSpan{tid, s})
	if s.WorkerID >= 0 {
		w, ok := r.workers[tid]
		if !ok || s.Start > w.start || s.Start == w.start && s.End < w.end {
			r.workers[tid] = refWorker{s.WorkerID, s.Start, s.End}
		}
	}
	return nil
}

// inner reports whether a is nested inside b by the package's rule: later
// start, else shorter, else greater (trace id, span id).
func inner(a, b *Span) bool {
	if a.Start != b.Start {
		return a.Start > b.Start
	}
	if a.End != b.End {
		return a.End < b.End
	}
	if c := bytes.Compare(a.TraceID[:], b.TraceID[:]); c != 0 {
		return c > 0
	}
	return bytes.Compare(a.SpanID[:], b.SpanID[:]) > 0
}

func (r *ref) lookup(tid uint32, t uint64) *Span {
	var best *Span
	for i := range r.spans {
		s := &r.spans[i].s
		if r.spans[i].tid == tid && s.Start <= t && t < s.End && (best == nil || inner(s, best)) {
			best = s
		}
	}
	if best != nil {
		best.Matched = true
	}
	return best
}

// resolve is Resolve by brute force: of the spans covering t, innermost
// first, each must be an ancestor of the one before, or may be one (a span
// between them is not held, or the chain is 64 long).
func (r *ref) resolve(tid uint32, t uint64) (*Span, bool) {
	var best *Span
	var covering []*Span
	for i := range r.spans {
		s := &r.spans[i].s
		if r.spans[i].tid == tid && s.Start <= t && t < s.End {
			covering = append(covering, s)
			if best == nil || inner(s, best) {
				best = s
			}
		}
	}
	slices.SortFunc(covering, func(a, b *Span) int {
		if inner(a, b) {
			return -1
		}
		return 1
	})
	for j := 1; j < len(covering); j++ {
		if !r.mayEnclose(covering[j], covering[j-1]) {
			return nil, true
		}
	}
	if best != nil {
		best.Matched = true
	}
	return best, false
}

func (r *ref) mayEnclose(outer, inner *Span) bool {
	if outer.TraceID != inner.TraceID {
		return false
	}
	cur := inner
	for range 64 {
		if cur.ParentRemote || cur.ParentSpanID == ([8]byte{}) {
			return false
		}
		if cur.ParentSpanID == outer.SpanID {
			return true
		}
		i := r.find(cur.TraceID, cur.ParentSpanID)
		if i < 0 {
			return true
		}
		cur = &r.spans[i].s
	}
	return true
}

func (r *ref) localRoot(s *Span) *Span {
	seen := map[[8]byte]bool{s.SpanID: true}
	cur := s
	for {
		if cur.ParentRemote || cur.ParentSpanID == ([8]byte{}) {
			return cur
		}
		i := r.find(cur.TraceID, cur.ParentSpanID)
		if i < 0 {
			return cur
		}
		cur = &r.spans[i].s
		if seen[cur.SpanID] {
			return s
		}
		seen[cur.SpanID] = true
	}
}

func (r *ref) forget(before uint64) (forgotten, unmatched int) {
	kept := r.spans[:0]
	for _, rs := range r.spans {
		if rs.s.End <= before {
			forgotten++
			if !rs.s.Matched {
				unmatched++
			}
			continue
		}
		kept = append(kept, rs)
	}
	r.spans = kept
	for tid := range r.workers {
		held := false
		for _, rs := range r.spans {
			held = held || rs.tid == tid
		}
		if !held {
			delete(r.workers, tid)
		}
	}
	return forgotten, unmatched
}

// checker runs the same operations on a Map and a ref and fails on the first
// difference.
type checker struct {
	t   testing.TB
	m   *Map
	r   *ref
	ops []op // the operations so far, for the failure message

	// What the operations exercised, so a test can check its generator.
	hits, full, dups, chains, cycles, ambiguous int
}

// op is one operation, formatted only when a check fails.
type op struct {
	kind string
	tid  uint32
	t    uint64
	s    Span
}

func (o op) String() string {
	switch o.kind {
	case "add":
		return fmt.Sprintf("add(%d, %s parent %x remote %v worker %d)", o.tid, name(&o.s), o.s.ParentSpanID[:1], o.s.ParentRemote, o.s.WorkerID)
	case "lookup":
		return fmt.Sprintf("lookup(%d, %d)", o.tid, o.t)
	case "worker":
		return fmt.Sprintf("worker(%d)", o.tid)
	}
	return fmt.Sprintf("forget(%d)", o.t)
}

func newChecker(t testing.TB, max int) *checker {
	return &checker{t: t, m: New(Options{MaxSpans: max}), r: newRef(max)}
}

func (c *checker) fail(format string, args ...any) {
	c.t.Helper()
	const tail = 40
	ops := c.ops
	if len(ops) > tail {
		ops = ops[len(ops)-tail:]
	}
	c.t.Fatalf("%s\nlast %d of %d operations:\n%v", fmt.Sprintf(format, args...), len(ops), len(c.ops), ops)
}

func name(s *Span) string {
	if s == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%x/%x[%d,%d)", s.TraceID[:1], s.SpanID[:1], s.Start, s.End)
}

func (c *checker) add(tid uint32, s Span) {
	c.t.Helper()
	c.ops = append(c.ops, op{kind: "add", tid: tid, s: s})
	dup := c.r.find(s.TraceID, s.SpanID) >= 0
	got, want := c.m.Add(tid, s), c.r.add(tid, s)
	if errors.Is(want, ErrFull) {
		c.full++
	} else if want == nil && dup {
		c.dups++
	}
	if !errors.Is(got, want) || (got == nil) != (want == nil) {
		c.fail("Add: got %v, want %v", got, want)
	}
	if c.m.Len() != len(c.r.spans) {
		c.fail("Len: got %d, want %d", c.m.Len(), len(c.r.spans))
	}
}

func (c *checker) lookup(tid uint32, t uint64) {
	c.t.Helper()
	c.ops = append(c.ops, op{kind: "lookup", tid: tid, t: t})
	got, want := c.m.Lookup(tid, t), c.r.lookup(tid, t)
	if (got == nil) != (want == nil) || got != nil && (got.TraceID != want.TraceID || got.SpanID != want.SpanID) {
		c.fail("Lookup(%d, %d): got %s, want %s", tid, t, name(got), name(want))
	}
	if got == nil {
		return
	}
	c.hits++
	if *got != *want {
		c.fail("Lookup(%d, %d): got %+v, want %+v", tid, t, *got, *want)
	}
	gr, wr := c.m.LocalRoot(got), c.r.localRoot(want)
	if gr.TraceID != wr.TraceID || gr.SpanID != wr.SpanID {
		c.fail("LocalRoot(%s): got %s, want %s", name(got), name(gr), name(wr))
	}
	if wr != want {
		c.chains++
	} else if want.ParentSpanID != ([8]byte{}) && !want.ParentRemote && c.r.find(want.TraceID, want.ParentSpanID) >= 0 {
		c.cycles++
	}
}

func (c *checker) resolve(tid uint32, t uint64) {
	c.t.Helper()
	c.ops = append(c.ops, op{kind: "resolve", tid: tid, t: t})
	got, gamb := c.m.Resolve(tid, t)
	want, wamb := c.r.resolve(tid, t)
	if gamb != wamb || (got == nil) != (want == nil) || got != nil && *got != *want {
		c.fail("Resolve(%d, %d): got %s, %v; want %s, %v", tid, t, name(got), gamb, name(want), wamb)
	}
	if wamb {
		c.ambiguous++
	}
}

func (c *checker) forget(before uint64) {
	c.t.Helper()
	c.ops = append(c.ops, op{kind: "forget", t: before})
	gf, gu := c.m.Forget(before)
	wf, wu := c.r.forget(before)
	if gf != wf || gu != wu {
		c.fail("Forget(%d): got %d forgotten, %d unmatched; want %d, %d", before, gf, gu, wf, wu)
	}
	if c.m.Len() != len(c.r.spans) {
		c.fail("Len: got %d, want %d", c.m.Len(), len(c.r.spans))
	}
}

func (c *checker) worker(tid uint32) {
	c.t.Helper()
	c.ops = append(c.ops, op{kind: "worker", tid: tid})
	gid, gok := c.m.Worker(tid)
	w, wok := c.r.workers[tid]
	if !wok {
		w.id = -1
	}
	if gid != w.id || gok != wok {
		c.fail("Worker(%d): got %d, %v; want %d, %v", tid, gid, gok, w.id, wok)
	}
}

// TestLookupMatchesReference runs random interleavings of Add, Lookup and
// Forget on a few threads, with nested, overlapping and equal intervals,
// duplicates, a bound that is sometimes reached and parents that sometimes
// form cycles, and compares every answer with the brute-force model.
func TestLookupMatchesReference(t *testing.T) {
	var lookups, resolves, ambiguous, hits, full, dups, chains, cycles int
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 0x7469646d6170))
		max := 1000
		if seed%4 == 0 {
			max = 20 + rng.IntN(30)
		}
		c := newChecker(t, max)
		lo := uint64(0) // times stay near the watermark, so intervals collide
		for range 400 {
			switch op := rng.IntN(100); {
			case op < 45:
				tid := uint32(rng.IntN(3))
				s := Span{WorkerID: -1}
				s.TraceID[0] = byte(1 + rng.IntN(3))
				s.SpanID[0] = byte(1 + rng.IntN(120))
				if rng.IntN(3) > 0 {
					s.ParentSpanID[0] = byte(rng.IntN(121))
				}
				s.ParentRemote = rng.IntN(10) == 0
				if rng.IntN(4) == 0 {
					s.WorkerID = int64(rng.IntN(5))
				}
				held := c.r.spans
				if len(held) > 0 && rng.IntN(2) == 0 {
					// Nest in (or share an edge with) a span held on tid.
					p := held[rng.IntN(len(held))]
					tid = p.tid
					s.Start = p.s.Start + uint64(rng.IntN(int(p.s.End-p.s.Start)+1))
					s.End = s.Start + uint64(rng.IntN(int(p.s.End-s.Start)+1))
				} else {
					s.Start = lo + uint64(rng.IntN(100))
					s.End = s.Start + uint64(rng.IntN(40))
				}
				c.add(tid, s)
			case op < 70:
				c.lookup(uint32(rng.IntN(4)), lo+uint64(rng.IntN(140)))
				lookups++
			case op < 92:
				c.resolve(uint32(rng.IntN(4)), lo+uint64(rng.IntN(140)))
				resolves++
			case op < 96:
				c.worker(uint32(rng.IntN(4)))
			default:
				lo += uint64(rng.IntN(30))
				c.forget(lo)
			}
		}
		hits, full, dups, chains, cycles = hits+c.hits, full+c.full, dups+c.dups, chains+c.chains, cycles+c.cycles
		ambiguous += c.ambiguous
		c.forget(^uint64(0))
		if c.m.Len() != 0 || len(c.m.threads) != 0 || len(c.m.byID) != 0 || len(c.m.bySpan) != 0 {
			t.Fatalf("seed %d: after forgetting all: %d spans, %d threads, %d ids", seed, c.m.Len(), len(c.m.threads), len(c.m.byID))
		}
	}
	t.Logf("%d lookups compared: %d found a span, %d local roots up a chain, %d in a cycle; %d adds over the bound, %d duplicates; %d resolves, %d ambiguous",
		lookups, hits, chains, cycles, full, dups, resolves, ambiguous)
	if hits < lookups/3 || chains == 0 || cycles == 0 || full == 0 || dups == 0 || ambiguous == 0 || ambiguous > resolves/2 {
		t.Error("the generator no longer exercises every case")
	}
}

// FuzzLookup decodes operations from the input (8 bytes each, at most 256)
// and compares the Map with the brute-force model.
func FuzzLookup(f *testing.F) {
	f.Add([]byte{
		0, 1, 0, 100, 1, 1, 0, 0, // add tid 1 [0,100) span 1
		0, 1, 10, 40, 2, 1, 1, 1, // add tid 1 [10,50) span 2 parent 1
		0, 1, 20, 10, 3, 1, 2, 2, // add tid 1 [20,30) span 3 parent 2
		5, 1, 25, 0, 0, 0, 0, 0, // lookup tid 1 at 25
		5, 1, 30, 0, 0, 0, 0, 0,
		5, 1, 50, 0, 0, 0, 0, 0,
		7, 0, 30, 0, 0, 0, 0, 0, // forget before 30
		5, 1, 25, 0, 0, 0, 0, 0,
	})
	f.Add([]byte{
		0, 0, 5, 5, 1, 1, 2, 0, // equal starts, cycle 1 → 2 → 1
		0, 0, 5, 3, 2, 1, 1, 0,
		0, 0, 5, 5, 3, 2, 0, 0,
		5, 0, 6, 0, 0, 0, 0, 0,
		5, 0, 9, 0, 0, 0, 0, 0,
		0, 0, 5, 3, 2, 1, 1, 0, // duplicate
		7, 0, 8, 0, 0, 0, 0, 0,
		5, 0, 6, 0, 0, 0, 0, 0,
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		c := newChecker(t, 16)
		data = data[:min(len(data), 256*8)]
		for ; len(data) >= 8; data = data[8:] {
			b := data[:8]
			tid := uint32(b[1] % 3)
			switch op := b[0] % 8; {
			case op < 5:
				s := Span{WorkerID: int64(b[7]%4) - 1}
				s.Start = uint64(b[2])
				s.End = s.Start + uint64(b[3]%64)
				if b[3] == 255 {
					s.End = s.Start - 1 // invalid
				}
				s.SpanID[0] = b[4] % 32
				s.TraceID[0] = b[5] % 3
				s.ParentSpanID[0] = b[6] % 33
				s.ParentRemote = b[6]&0x80 != 0
				c.add(tid, s)
			case op < 7:
				c.lookup(tid, uint64(b[2]))
				c.resolve(tid, uint64(b[3]))
				c.worker(tid)
			default:
				c.forget(uint64(b[2]))
			}
		}
	})
}
