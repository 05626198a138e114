package tidmap

import (
	"errors"
	"testing"
)

// sp makes a span of trace 1 with span id id, no parent and no worker id.
func sp(id byte, start, end uint64) Span {
	s := Span{Start: start, End: end, WorkerID: -1}
	s.TraceID[0] = 1
	s.SpanID[0] = id
	return s
}

// child makes sp(id, start, end) with parent span id parent.
func child(id, parent byte, start, end uint64) Span {
	s := sp(id, start, end)
	s.ParentSpanID[0] = parent
	return s
}

type add struct {
	tid uint32
	s   Span
}

type probe struct {
	tid  uint32
	t    uint64
	want byte // span id; 0: none
}

func id(s *Span) byte {
	if s == nil {
		return 0
	}
	return s.SpanID[0]
}

func TestLookup(t *testing.T) {
	const maxT = ^uint64(0)
	tests := []struct {
		name   string
		adds   []add
		probes []probe
	}{{
		name: "nesting",
		adds: []add{{1, sp(1, 0, 100)}, {1, sp(2, 10, 50)}, {1, sp(3, 20, 30)}},
		probes: []probe{{1, 0, 1}, {1, 9, 1}, {1, 10, 2}, {1, 19, 2}, {1, 20, 3}, {1, 29, 3},
			{1, 30, 2}, {1, 49, 2}, {1, 50, 1}, {1, 99, 1}, {1, 100, 0}},
	}, {
		name:   "siblings",
		adds:   []add{{1, sp(1, 0, 100)}, {1, sp(2, 10, 20)}, {1, sp(3, 20, 30)}, {1, sp(4, 40, 60)}},
		probes: []probe{{1, 15, 2}, {1, 20, 3}, {1, 35, 1}, {1, 59, 4}, {1, 60, 1}},
	}, {
		name:   "partial overlap",
		adds:   []add{{1, sp(1, 0, 50)}, {1, sp(2, 30, 80)}, {1, sp(3, 40, 60)}},
		probes: []probe{{1, 29, 1}, {1, 30, 2}, {1, 45, 3}, {1, 60, 2}, {1, 79, 2}, {1, 80, 0}},
	}, {
		// The binary search lands on a span that has ended; the answer is
		// further up the enclosing chain, past a sibling that has ended too.
		name:   "walk up the chain",
		adds:   []add{{1, sp(1, 0, 100)}, {1, sp(2, 10, 60)}, {1, sp(3, 20, 30)}, {1, sp(4, 40, 50)}, {1, sp(5, 15, 90)}},
		probes: []probe{{1, 55, 5}, {1, 95, 1}, {1, 45, 4}, {1, 25, 3}, {1, 12, 2}},
	}, {
		name:   "equal starts: the shorter is innermost",
		adds:   []add{{1, sp(2, 0, 50)}, {1, sp(1, 0, 100)}},
		probes: []probe{{1, 0, 2}, {1, 49, 2}, {1, 50, 1}},
	}, {
		name:   "equal intervals: the greater span id is innermost",
		adds:   []add{{1, sp(7, 0, 10)}, {1, sp(9, 0, 10)}, {1, sp(8, 0, 10)}},
		probes: []probe{{1, 5, 9}},
	}, {
		name:   "boundaries: [Start, End)",
		adds:   []add{{1, sp(1, 10, 20)}, {1, sp(2, 20, 30)}, {1, sp(3, 40, 40)}},
		probes: []probe{{1, 9, 0}, {1, 10, 1}, {1, 19, 1}, {1, 20, 2}, {1, 29, 2}, {1, 30, 0}, {1, 40, 0}},
	}, {
		name:   "extreme times",
		adds:   []add{{1, sp(1, 0, 1)}, {1, sp(2, maxT-1, maxT)}},
		probes: []probe{{1, 0, 1}, {1, 1, 0}, {1, maxT - 1, 2}, {1, maxT, 0}},
	}, {
		name:   "gaps",
		adds:   []add{{1, sp(1, 0, 10)}, {1, sp(2, 20, 30)}},
		probes: []probe{{1, 15, 0}, {1, 10, 0}, {1, 31, 0}},
	}, {
		name:   "unknown tid",
		adds:   []add{{1, sp(1, 0, 10)}},
		probes: []probe{{2, 5, 0}, {0, 5, 0}},
	}, {
		name:   "threads are separate",
		adds:   []add{{1, sp(1, 0, 100)}, {2, sp(2, 0, 100)}, {2, sp(3, 40, 60)}},
		probes: []probe{{1, 50, 1}, {2, 50, 3}, {2, 10, 2}},
	}, {
		name:   "out of order: children first",
		adds:   []add{{1, sp(3, 20, 30)}, {1, sp(4, 60, 70)}, {1, sp(2, 10, 50)}, {1, sp(1, 0, 100)}},
		probes: []probe{{1, 25, 3}, {1, 40, 2}, {1, 65, 4}, {1, 80, 1}},
	}, {
		name:   "empty map",
		probes: []probe{{0, 0, 0}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New(Options{})
			for _, a := range tt.adds {
				if err := m.Add(a.tid, a.s); err != nil {
					t.Fatalf("Add(%d, %+v): %v", a.tid, a.s, err)
				}
			}
			for _, p := range tt.probes {
				got := m.Lookup(p.tid, p.t)
				if id(got) != p.want {
					t.Errorf("Lookup(%d, %d) = span %d, want %d", p.tid, p.t, id(got), p.want)
				}
				if got != nil && !got.Matched {
					t.Errorf("Lookup(%d, %d): not marked Matched", p.tid, p.t)
				}
			}
		})
	}
}

func TestAddAfterLookup(t *testing.T) {
	m := New(Options{})
	must(t, m.Add(1, sp(1, 0, 100)))
	must(t, m.Add(1, sp(2, 50, 60)))
	check(t, m, 1, 55, 2)
	check(t, m, 1, 20, 1)
	// Into the middle of the built view, and in front of it.
	must(t, m.Add(1, sp(3, 20, 30)))
	must(t, m.Add(1, sp(4, 52, 54)))
	must(t, m.Add(1, sp(5, 0, 5)))
	check(t, m, 1, 25, 3)
	check(t, m, 1, 53, 4)
	check(t, m, 1, 55, 2)
	check(t, m, 1, 2, 5)
	check(t, m, 1, 10, 1)
	// An outer span added last.
	must(t, m.Add(1, sp(6, 0, 200)))
	check(t, m, 1, 150, 6)
	check(t, m, 1, 53, 4)
}

func TestForget(t *testing.T) {
	m := New(Options{})
	must(t, m.Add(1, sp(1, 0, 100)))
	must(t, m.Add(1, sp(2, 10, 20)))
	must(t, m.Add(1, sp(3, 30, 40)))
	must(t, m.Add(2, sp(4, 0, 30)))
	check(t, m, 1, 15, 2)
	f, u := m.Forget(30)
	if f != 2 || u != 1 {
		t.Errorf("Forget(30) = %d, %d; want 2 forgotten (spans 2 and 4), 1 unmatched (span 4)", f, u)
	}
	if m.Len() != 2 {
		t.Errorf("Len = %d, want 2", m.Len())
	}
	if _, ok := m.threads[2]; ok {
		t.Error("thread 2 still held after its last span was forgotten")
	}
	check(t, m, 1, 15, 1)
	check(t, m, 1, 35, 3)
	check(t, m, 2, 15, 0)
	// Forget without change, then add pending spans and forget some of them
	// before they were ever looked up.
	if f, u := m.Forget(30); f != 0 || u != 0 {
		t.Errorf("second Forget(30) = %d, %d; want 0, 0", f, u)
	}
	must(t, m.Add(1, sp(5, 110, 120)))
	must(t, m.Add(1, sp(6, 50, 60)))
	if f, u := m.Forget(60); f != 2 || u != 1 {
		t.Errorf("Forget(60) = %d, %d; want 2 (spans 3 and 6), 1 (span 6)", f, u)
	}
	check(t, m, 1, 55, 1)
	check(t, m, 1, 115, 5)
	if f, u := m.Forget(^uint64(0)); f != 2 || u != 0 {
		t.Errorf("Forget(all) = %d, %d; want 2, 0", f, u)
	}
	if m.Len() != 0 || len(m.threads) != 0 || len(m.byID) != 0 {
		t.Errorf("after forgetting all: Len %d, %d threads, %d ids", m.Len(), len(m.threads), len(m.byID))
	}
	// Freed slots are reused; a reused tid starts afresh.
	must(t, m.Add(1, sp(1, 200, 300)))
	check(t, m, 1, 50, 0)
	check(t, m, 1, 250, 1)
}

func TestDuplicates(t *testing.T) {
	m := New(Options{})
	must(t, m.Add(1, sp(1, 0, 100)))
	check(t, m, 1, 50, 1)
	must(t, m.Add(1, sp(1, 0, 100)))   // a retry
	must(t, m.Add(2, sp(1, 200, 300))) // same ids elsewhere: the first wins
	if m.Len() != 1 {
		t.Errorf("Len = %d, want 1", m.Len())
	}
	check(t, m, 2, 250, 0)
	if got := m.Lookup(1, 50); got == nil || !got.Matched {
		t.Error("duplicate reset the held span")
	}
	// The same span id in another trace is another span.
	other := sp(1, 0, 10)
	other.TraceID[0] = 2
	must(t, m.Add(1, other))
	if m.Len() != 2 {
		t.Errorf("Len = %d, want 2", m.Len())
	}
	if f, u := m.Forget(100); f != 2 || u != 1 {
		t.Errorf("Forget = %d, %d; want 2, 1", f, u)
	}
}

func TestBound(t *testing.T) {
	m := New(Options{MaxSpans: 3})
	for i := range byte(3) {
		must(t, m.Add(uint32(i), sp(i+1, 0, 10)))
	}
	if err := m.Add(0, sp(9, 0, 10)); !errors.Is(err, ErrFull) {
		t.Errorf("Add over the bound: %v, want ErrFull", err)
	}
	if err := m.Add(0, sp(1, 0, 10)); err != nil {
		t.Errorf("Add of a held duplicate at the bound: %v, want nil", err)
	}
	if m.Len() != 3 {
		t.Errorf("Len = %d, want 3", m.Len())
	}
	check(t, m, 0, 5, 1)
	m.Forget(10)
	must(t, m.Add(0, sp(9, 20, 30)))

	// The default bound.
	m = New(Options{})
	s := sp(1, 0, 1)
	for i := range DefaultMaxSpans {
		s.SpanID[1], s.SpanID[2], s.SpanID[3] = byte(i), byte(i>>8), byte(i>>16)
		must(t, m.Add(uint32(i%64), s))
	}
	s.SpanID[4] = 1
	if err := m.Add(0, s); !errors.Is(err, ErrFull) {
		t.Errorf("Add of span %d: %v, want ErrFull", DefaultMaxSpans+1, err)
	}
}

func TestInvalid(t *testing.T) {
	m := New(Options{})
	noTrace := sp(1, 0, 10)
	noTrace.TraceID = [16]byte{}
	for _, s := range []Span{sp(1, 10, 9), sp(0, 0, 10), noTrace} {
		if err := m.Add(1, s); !errors.Is(err, ErrInvalidSpan) {
			t.Errorf("Add(%+v) = %v, want ErrInvalidSpan", s, err)
		}
	}
	if m.Len() != 0 {
		t.Errorf("Len = %d, want 0", m.Len())
	}
}

func TestLocalRoot(t *testing.T) {
	remote := child(2, 1, 10, 90)
	remote.ParentRemote = true
	otherTrace := child(3, 1, 20, 30)
	otherTrace.TraceID[0] = 2
	tests := []struct {
		name string
		adds []add
		of   byte // span id (trace 1) to start from
		want byte
	}{
		{"no parent", []add{{1, sp(1, 0, 100)}}, 1, 1},
		{"chain on one thread", []add{{1, sp(1, 0, 100)}, {1, child(2, 1, 10, 90)}, {1, child(3, 2, 20, 30)}}, 3, 1},
		{"parent on another thread", []add{{7, sp(1, 0, 100)}, {8, child(2, 1, 10, 90)}, {9, child(3, 2, 20, 30)}}, 3, 1},
		{"remote parent", []add{{1, sp(1, 0, 100)}, {1, remote}, {1, child(3, 2, 20, 30)}}, 3, 2},
		{"missing parent", []add{{1, child(2, 1, 10, 90)}, {1, child(3, 2, 20, 30)}}, 3, 2},
		{"missing parent of s", []add{{1, child(3, 2, 20, 30)}}, 3, 3},
		{"parent id in another trace", []add{{1, sp(1, 0, 100)}, {1, child(4, 3, 20, 28)}, {1, otherTrace}}, 4, 4},
		{"self parent", []add{{1, child(1, 1, 0, 100)}}, 1, 1},
		{"cycle", []add{{1, child(1, 3, 0, 100)}, {1, child(2, 1, 10, 90)}, {1, child(3, 2, 20, 30)}}, 2, 2},
		{"path into a cycle", []add{{1, child(1, 2, 0, 100)}, {1, child(2, 1, 10, 90)}, {1, child(3, 2, 20, 30)}, {1, child(4, 3, 20, 25)}}, 4, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New(Options{})
			for _, a := range tt.adds {
				must(t, m.Add(a.tid, a.s))
			}
			var tid uint32
			s := sp(tt.of, 0, 0)
			i, ok := m.byID[key{s.TraceID, s.SpanID}]
			if !ok {
				t.Fatalf("span %d not held", tt.of)
			}
			for _, a := range tt.adds {
				if a.s.SpanID == s.SpanID {
					tid = a.tid
				}
			}
			from := m.span(i)
			if got := m.Lookup(tid, from.Start); got != from {
				t.Fatalf("Lookup(%d, %d) = span %d, want %d", tid, from.Start, id(got), tt.of)
			}
			if got := m.LocalRoot(from); id(got) != tt.want || got.TraceID != s.TraceID {
				t.Errorf("LocalRoot(span %d) = span %d, want %d", tt.of, id(got), tt.want)
			}
		})
	}
	if New(Options{}).LocalRoot(nil) != nil {
		t.Error("LocalRoot(nil) != nil")
	}
}

func TestWorker(t *testing.T) {
	w := func(s Span, worker int64) Span { s.WorkerID = worker; return s }
	m := New(Options{})
	if id, ok := m.Worker(1); ok || id != -1 {
		t.Errorf("Worker of an unknown tid = %d, %v; want -1, false", id, ok)
	}
	must(t, m.Add(1, sp(1, 0, 100)))
	if id, ok := m.Worker(1); ok || id != -1 {
		t.Errorf("Worker with no worker span = %d, %v; want -1, false", id, ok)
	}
	must(t, m.Add(1, w(sp(2, 50, 60), 5)))
	must(t, m.Add(1, w(sp(3, 20, 30), 4))) // starts earlier: ignored
	must(t, m.Add(1, sp(4, 70, 80)))       // no worker id: ignored
	must(t, m.Add(2, w(sp(5, 90, 95), 9))) // another thread
	if id, ok := m.Worker(1); !ok || id != 5 {
		t.Errorf("Worker(1) = %d, %v; want 5", id, ok)
	}
	must(t, m.Add(1, w(sp(6, 50, 55), 6))) // same start, shorter: innermost
	must(t, m.Add(1, w(sp(7, 50, 59), 7))) // same start, longer
	if id, ok := m.Worker(1); !ok || id != 6 {
		t.Errorf("Worker(1) = %d, %v; want 6", id, ok)
	}
	if id, ok := m.Worker(2); !ok || id != 9 {
		t.Errorf("Worker(2) = %d, %v; want 9", id, ok)
	}
	m.Forget(70) // the worker spans go, span 1 stays: the id is remembered
	if id, ok := m.Worker(1); !ok || id != 6 {
		t.Errorf("Worker(1) after Forget = %d, %v; want 6", id, ok)
	}
	m.Forget(100)
	if id, ok := m.Worker(1); ok || id != -1 {
		t.Errorf("Worker(1) after the thread was forgotten = %d, %v; want -1, false", id, ok)
	}
}

func TestLookupAllocs(t *testing.T) {
	m := New(Options{})
	for i := range byte(100) {
		must(t, m.Add(uint32(i%4), sp(i+1, uint64(i)*10, uint64(i)*10+25)))
	}
	m.Lookup(0, 0)
	m.Lookup(1, 0)
	if n := testing.AllocsPerRun(1000, func() {
		m.Lookup(0, 333)
		m.Lookup(1, 777)
		m.Lookup(9, 1)
	}); n != 0 {
		t.Errorf("Lookup allocates %v times", n)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func check(t *testing.T, m *Map, tid uint32, at uint64, want byte) {
	t.Helper()
	if got := m.Lookup(tid, at); id(got) != want {
		t.Errorf("Lookup(%d, %d) = span %d, want %d", tid, at, id(got), want)
	}
}

// TestResolve leaves a sample unlinked where the spans open on its thread
// are not one line of ancestors.
func TestResolve(t *testing.T) {
	other := func(s Span) Span { s.TraceID[0] = 2; return s }
	tests := []struct {
		name      string
		adds      []add
		t         uint64
		want      byte
		ambiguous bool
	}{
		{"one span", []add{{1, sp(1, 0, 100)}}, 50, 1, false},
		{"child in its parent", []add{{1, sp(1, 0, 100)}, {1, child(2, 1, 10, 60)}}, 50, 2, false},
		{"grandchild, the middle span on another thread", []add{{1, sp(1, 0, 100)}, {2, child(2, 1, 5, 90)}, {1, child(3, 2, 10, 60)}}, 50, 3, false},
		{"grandchild, the middle span not held", []add{{1, sp(1, 0, 100)}, {1, child(3, 2, 10, 60)}}, 50, 3, false},
		{"two traces", []add{{1, sp(1, 0, 100)}, {1, other(sp(2, 10, 60))}}, 50, 0, true},
		{"two traces, the outer one over", []add{{1, sp(1, 0, 40)}, {1, other(sp(2, 10, 60))}}, 50, 2, false},
		{"siblings of one trace", []add{{1, sp(1, 0, 100)}, {1, child(2, 1, 10, 60)}, {1, child(3, 1, 20, 70)}}, 50, 0, true},
		{"siblings, one over", []add{{1, sp(1, 0, 100)}, {1, child(2, 1, 10, 30)}, {1, child(3, 1, 20, 70)}}, 50, 3, false},
		{"two roots of one trace", []add{{1, sp(1, 0, 100)}, {1, sp(2, 10, 60)}}, 50, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New(Options{})
			for _, a := range tt.adds {
				if err := m.Add(a.tid, a.s); err != nil {
					t.Fatal(err)
				}
			}
			got, amb := m.Resolve(1, tt.t)
			if id(got) != tt.want || amb != tt.ambiguous {
				t.Errorf("Resolve = span %d, ambiguous %v; want %d, %v", id(got), amb, tt.want, tt.ambiguous)
			}
		})
	}
}

func TestGet(t *testing.T) {
	m := New(Options{})
	a := sp(1, 0, 100)
	if err := m.Add(7, a); err != nil {
		t.Fatal(err)
	}
	if got := m.Get(a.TraceID, a.SpanID); id(got) != 1 || !got.Matched {
		t.Errorf("Get by trace and span id: %v", got)
	}
	if got := m.Get([16]byte{}, a.SpanID); id(got) != 1 {
		t.Errorf("Get by span id alone: %v", got)
	}
	if got := m.Get([16]byte{9}, a.SpanID); got != nil {
		t.Errorf("Get with another trace id: %v", got)
	}
	m.Forget(^uint64(0))
	if got := m.Get([16]byte{}, a.SpanID); got != nil {
		t.Errorf("Get after Forget: %v", got)
	}
}
