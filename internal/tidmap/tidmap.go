package tidmap

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
)

// Span is one span as the index keeps it. Times are CLOCK_MONOTONIC
// nanoseconds (the caller converts from Unix time).
type Span struct {
	TraceID      [16]byte
	SpanID       [8]byte
	ParentSpanID [8]byte // zero: no parent
	ParentRemote bool    // the parent ran in another process (so this span is a local root)
	Pid          uint32  // the caller's process of the span, 0 when unknown; opaque here
	Start, End   uint64  // [Start, End)
	Name         string
	WorkerID     int64 // -1 (any negative value) when the span has no worker id
	Resource     int32 // the caller's handle for the span's resource; opaque here
	Matched      bool  // set by Lookup when a sample fell in it
}

// DefaultMaxSpans is the bound on spans held when Options.MaxSpans is 0.
const DefaultMaxSpans = 100000

// Options configure a Map.
type Options struct {
	MaxSpans int // bound on spans held; 0 (or less) means DefaultMaxSpans
}

var (
	// ErrFull is returned by Add when MaxSpans spans are held. The span is
	// not added; the caller counts the drop.
	ErrFull = errors.New("tidmap: span bound reached")
	// ErrInvalidSpan is returned (wrapped) by Add for a span that ends before
	// it starts or has a zero trace or span id.
	ErrInvalidSpan = errors.New("tidmap: invalid span")
)

// Spans live in an arena of fixed-size chunks, addressed by int32 index:
// growing it never moves a span, and slots freed by Forget are reused.
const (
	chunkBits = 9
	chunkSize = 1 << chunkBits
)

type key struct {
	trace [16]byte
	span  [8]byte
}

// entry is one span in a thread's sorted view.
type entry struct {
	end uint64
	enc int32 // position of the enclosing span in the sorted view, -1 if none
	// ref is the arena index of the span, with parentBit set when the
	// enclosing span is its parent, so that Resolve confirms the common
	// nesting without reading either span.
	ref int32
}

const parentBit = -1 << 31

// span returns the arena index of the entry's span.
func (e *entry) span() int32 { return e.ref &^ parentBit }

// encIsParent reports whether the enclosing span is the span's parent.
func (e *entry) encIsParent() bool { return e.ref&parentBit != 0 }

// thread holds the spans of one tid.
type thread struct {
	// The sorted view, ordered outermost first (see compareSpans). starts is
	// kept apart from ents so that the binary search reads 8 bytes a probe.
	starts []uint64
	ents   []entry
	// Arena indexes of spans added since the last build, unsorted.
	pending []int32
	// The view must be rebuilt before the next lookup: spans were added, or
	// forgotten (which moves positions, so enc is stale).
	dirty bool
	// The smallest End held (pending included), so Forget can skip the thread.
	minEnd uint64

	hasWorker              bool
	worker                 int64
	workerStart, workerEnd uint64
}

// Map is the (thread, time) → span index. The zero value is not usable; call
// New. A Map is not safe for concurrent use.
type Map struct {
	max     int
	n       int // spans held
	chunks  []*[chunkSize]Span
	next    int32   // arena slots handed out so far
	free    []int32 // arena slots freed by Forget
	threads map[uint32]*thread
	byID    map[key]int32
	// bySpan finds a span by its span id alone, for readers that know
	// no trace id (a goroutine labelled with span_id only).
	bySpan map[[8]byte]int32
	stack  []int32 // scratch for build
}

// New returns an empty Map.
func New(opts Options) *Map {
	limit := opts.MaxSpans
	if limit <= 0 {
		limit = DefaultMaxSpans
	}
	if limit > math.MaxInt32 {
		limit = math.MaxInt32 // arena indexes are int32
	}
	return &Map{
		max:     limit,
		threads: make(map[uint32]*thread),
		byID:    make(map[key]int32),
		bySpan:  make(map[[8]byte]int32),
	}
}

// Len returns the number of spans held.
func (m *Map) Len() int { return m.n }

func (m *Map) span(i int32) *Span { return &m.chunks[i>>chunkBits][i&(chunkSize-1)] }

func (m *Map) alloc() int32 {
	if n := len(m.free); n > 0 {
		i := m.free[n-1]
		m.free = m.free[:n-1]
		return i
	}
	i := m.next
	if int(i>>chunkBits) == len(m.chunks) {
		m.chunks = append(m.chunks, new([chunkSize]Span))
	}
	m.next++
	return i
}

// Add copies s into the map as a span that ran on thread tid. Matched is
// cleared. A span whose (TraceID, SpanID) is already held is a duplicate (an
// exporter's retry): it is ignored and Add returns nil. Add returns ErrFull
// when MaxSpans spans are held, and an error wrapping ErrInvalidSpan when s
// ends before it starts or has a zero trace or span id. An empty span
// (Start == End) is held but covers no time.
func (m *Map) Add(tid uint32, s Span) error {
	if s.End < s.Start {
		return fmt.Errorf("%w: span %x on tid %d ends at %d, before its start %d", ErrInvalidSpan, s.SpanID, tid, s.End, s.Start)
	}
	if s.TraceID == ([16]byte{}) || s.SpanID == ([8]byte{}) {
		return fmt.Errorf("%w: span %x of trace %x on tid %d: zero id", ErrInvalidSpan, s.SpanID, s.TraceID, tid)
	}
	k := key{s.TraceID, s.SpanID}
	if _, ok := m.byID[k]; ok {
		return nil
	}
	if m.n >= m.max {
		return ErrFull
	}
	i := m.alloc()
	p := m.span(i)
	*p = s
	p.Matched = false
	m.byID[k] = i
	if _, ok := m.bySpan[s.SpanID]; !ok {
		m.bySpan[s.SpanID] = i
	}
	m.n++

	th := m.threads[tid]
	if th == nil {
		th = &thread{minEnd: math.MaxUint64}
		m.threads[tid] = th
	}
	th.pending = append(th.pending, i)
	th.dirty = true
	th.minEnd = min(th.minEnd, s.End)
	if s.WorkerID >= 0 && (!th.hasWorker || s.Start > th.workerStart || s.Start == th.workerStart && s.End < th.workerEnd) {
		th.hasWorker = true
		th.worker = s.WorkerID
		th.workerStart, th.workerEnd = s.Start, s.End
	}
	return nil
}

// Lookup returns the innermost span on tid that covers t (Start <= t < End),
// or nil if there is none, and marks it Matched. The pointer is valid until
// the next Add or Forget. The first Lookup on a thread after an Add or Forget
// rebuilds that thread's sorted view; later ones do not allocate.
func (m *Map) Lookup(tid uint32, t uint64) *Span {
	th, lo := m.view(tid, t)
	if th == nil {
		return nil
	}
	ents := th.ents
	for i := lo - 1; i >= 0; {
		e := &ents[i]
		if e.end > t {
			s := m.span(e.span())
			s.Matched = true
			return s
		}
		i = int(e.enc)
	}
	return nil
}

// view returns the sorted view of tid, built if spans changed, and the
// number of its spans with Start <= t; nil when tid holds no span.
func (m *Map) view(tid uint32, t uint64) (*thread, int) {
	th := m.threads[tid]
	if th == nil {
		return nil, 0
	}
	if th.dirty {
		m.build(th)
	}
	// A branchy search measured faster here than a branchless one:
	// speculation starts the next probe's load early, and the views of 64
	// threads do not fit in L1.
	starts := th.starts
	lo, hi := 0, len(starts)
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if starts[h] <= t {
			lo = h + 1
		} else {
			hi = h
		}
	}
	return th, lo
}

// Resolve returns the span running on tid at t, as Lookup does, unless the
// spans that cover t are not one line of ancestors, each outer one an
// ancestor of the next inner one:
// spans of other traces, or of one trace but not nested, open on the thread
// at once. Then it returns nil and ambiguous: a thread that interleaves
// them (goroutines, async tasks) ran one of them at t, and which cannot be
// told from the thread and the time. An ancestor that cannot be confirmed
// because a span between them is not held counts as one.
func (m *Map) Resolve(tid uint32, t uint64) (s *Span, ambiguous bool) {
	th, lo := m.view(tid, t)
	if th == nil {
		return nil, false
	}
	// The spans covering t, innermost first, each must be an ancestor of
	// the one before: usually its parent, one comparison away.
	ents := th.ents
	prev := -1 // position of the last covering span
	for i := lo - 1; i >= 0; i = int(ents[i].enc) {
		e := &ents[i]
		if e.end <= t {
			continue
		}
		switch {
		case prev < 0:
			s = m.span(e.span())
		case int(ents[prev].enc) == i && ents[prev].encIsParent():
		case !m.mayEnclose(m.span(e.span()), m.span(ents[prev].span())):
			return nil, true
		}
		prev = i
	}
	if s != nil {
		s.Matched = true
	}
	return s, false
}

// mayEnclose reports whether outer is an ancestor of inner, or may be one:
// the parent chain of inner reaches outer, or leaves the spans held
// before it reaches a root.
func (m *Map) mayEnclose(outer, inner *Span) bool {
	if outer.TraceID != inner.TraceID {
		return false
	}
	cur := inner
	for range 64 { // a chain longer than this, or a cycle: give it the benefit of the doubt
		if cur.ParentRemote || cur.ParentSpanID == ([8]byte{}) {
			return false
		}
		if cur.ParentSpanID == outer.SpanID {
			return true
		}
		i, ok := m.byID[key{cur.TraceID, cur.ParentSpanID}]
		if !ok {
			return true
		}
		cur = m.span(i)
	}
	return true
}

// compareSpans orders spans outermost first: by Start, then longer first,
// then by (TraceID, SpanID). The innermost of the spans covering a time is
// the last of them in this order.
func compareSpans(a, b *Span) int {
	if c := cmp.Compare(a.Start, b.Start); c != 0 {
		return c
	}
	if c := cmp.Compare(b.End, a.End); c != 0 {
		return c
	}
	if c := bytes.Compare(a.TraceID[:], b.TraceID[:]); c != 0 {
		return c
	}
	return bytes.Compare(a.SpanID[:], b.SpanID[:])
}

// build merges the pending spans of th into its sorted view and recomputes
// the enclosing span of each.
func (m *Map) build(th *thread) {
	if k := len(th.pending); k > 0 {
		slices.SortFunc(th.pending, func(a, b int32) int { return compareSpans(m.span(a), m.span(b)) })
		n := len(th.ents)
		th.starts = slices.Grow(th.starts, k)[:n+k]
		th.ents = slices.Grow(th.ents, k)[:n+k]
		// Merge from the back, in place.
		i, j := n-1, k-1
		for w := n + k - 1; j >= 0; w-- {
			if i >= 0 && compareSpans(m.span(th.ents[i].span()), m.span(th.pending[j])) > 0 {
				th.ents[w], th.starts[w] = th.ents[i], th.starts[i]
				i--
			} else {
				p := th.pending[j]
				s := m.span(p)
				th.ents[w], th.starts[w] = entry{end: s.End, ref: p}, s.Start
				j--
			}
		}
		th.pending = th.pending[:0]
	}
	// The enclosing span of i is the last j < i with End_j > Start_i (it
	// starts no later, since the view is sorted). Keep a stack of positions
	// that may still enclose something: a span that ended by Start_i cannot
	// enclose i or anything after it, as starts only grow.
	stack := m.stack[:0]
	for i := range th.ents {
		for len(stack) > 0 && th.ents[stack[len(stack)-1]].end <= th.starts[i] {
			stack = stack[:len(stack)-1]
		}
		e := &th.ents[i]
		e.enc, e.ref = -1, e.span()
		if len(stack) > 0 {
			e.enc = stack[len(stack)-1]
			in, out := m.span(e.ref), m.span(th.ents[e.enc].span())
			if in.TraceID == out.TraceID && in.ParentSpanID == out.SpanID && !in.ParentRemote {
				e.ref |= parentBit
			}
		}
		stack = append(stack, int32(i))
	}
	m.stack = stack[:0]
	th.dirty = false
}

// LocalRoot follows ParentSpanID within s's trace through the spans held, on
// any thread, and returns the first span whose parent is zero, remote or not
// held: the local root of s as far as the map knows. It returns s itself when
// s has no held parent, and also when the parents form a cycle. The pointer
// is valid until the next Add or Forget.
func (m *Map) LocalRoot(s *Span) *Span {
	if s == nil {
		return nil
	}
	// Brent's cycle detection: the tortoise jumps to the hare at powers of
	// two, so a cycle is found within a few times its length plus the path
	// into it.
	cur, tortoise := s, s
	power, steps := 1, 0
	for {
		if cur.ParentRemote || cur.ParentSpanID == ([8]byte{}) {
			return cur
		}
		i, ok := m.byID[key{cur.TraceID, cur.ParentSpanID}]
		if !ok {
			return cur
		}
		cur = m.span(i)
		if cur == tortoise {
			return s
		}
		if steps++; steps == power {
			tortoise, power, steps = cur, power*2, 0
		}
	}
}

// Get returns the span held with the ids, nil when there is none; with a
// zero trace id, the span with the span id. It marks the span Matched: a
// sample named it.
func (m *Map) Get(trace [16]byte, span [8]byte) *Span {
	var i int32
	var ok bool
	if trace == ([16]byte{}) {
		i, ok = m.bySpan[span]
	} else {
		i, ok = m.byID[key{trace, span}]
	}
	if !ok {
		return nil
	}
	s := m.span(i)
	s.Matched = true
	return s
}

// Worker returns the worker id of the latest-starting span with a worker id
// added for tid (of two starting together, the shorter). It is remembered as
// long as the map holds any span for tid, even after that span is forgotten.
// It returns -1, false when there is none.
func (m *Map) Worker(tid uint32) (int64, bool) {
	th := m.threads[tid]
	if th == nil || !th.hasWorker {
		return -1, false
	}
	return th.worker, true
}

// Forget drops the spans with End <= before and returns how many it dropped
// and how many of those were never Matched. A thread left with no spans is
// forgotten with its worker id.
func (m *Map) Forget(before uint64) (forgotten, unmatched int) {
	drop := func(i int32) {
		s := m.span(i)
		if !s.Matched {
			unmatched++
		}
		forgotten++
		delete(m.byID, key{s.TraceID, s.SpanID})
		if m.bySpan[s.SpanID] == i {
			delete(m.bySpan, s.SpanID)
		}
		*s = Span{} // release Name
		m.free = append(m.free, i)
		m.n--
	}
	for tid, th := range m.threads {
		if th.minEnd > before {
			continue
		}
		minEnd := uint64(math.MaxUint64)
		w := 0
		for _, i := range th.pending {
			if end := m.span(i).End; end > before {
				minEnd = min(minEnd, end)
				th.pending[w] = i
				w++
				continue
			}
			drop(i)
		}
		th.pending = shrink(th.pending[:w])
		w = 0
		for r, e := range th.ents {
			if e.end > before {
				minEnd = min(minEnd, e.end)
				th.ents[w], th.starts[w] = e, th.starts[r]
				w++
				continue
			}
			drop(e.span())
		}
		if w < len(th.ents) {
			th.dirty = true // positions moved: enc is stale
		}
		th.ents, th.starts = shrink(th.ents[:w]), shrink(th.starts[:w])
		th.minEnd = minEnd
		if len(th.ents)+len(th.pending) == 0 {
			delete(m.threads, tid)
		}
	}
	return forgotten, unmatched
}

// shrink reallocates s when it uses less than a quarter of a sizeable
// capacity, so that a burst of spans on a thread is not held forever.
func shrink[T any](s []T) []T {
	if cap(s) > 64 && len(s) < cap(s)/4 {
		return slices.Clone(s)
	}
	return s
}
