package analysis

import "testing"

// TestSpanParentCycle checks that a cycle of parent ids (a broken file) is
// cut where it closes, and that a span hanging below the cycle keeps its
// parent: its samples still count for the spans above it.
func TestSpanParentCycle(t *testing.T) {
	tr := &Trace{
		// C's parent is A; A and B are each other's parents. C comes first,
		// so a walk from C is the first to enter the cycle.
		Spans: []Span{
			{TraceID: "t", SpanID: "c", ParentID: "a", Name: "C", Duration: 10},
			{TraceID: "t", SpanID: "a", ParentID: "b", Name: "A", Duration: 30},
			{TraceID: "t", SpanID: "b", ParentID: "a", Name: "B", Duration: 20},
		},
		spanByID: map[string]int32{"c": 0, "a": 1, "b": 2},
		Links:    []Link{{TraceID: "t", SpanID: "c"}},
		Samples:  []TraceSample{{Link: 0, Source: SourceCPU}},
		Metadata: map[string]string{},
	}
	if p := tr.SpanParent(0); p != 1 {
		t.Errorf("C's parent: %d, want A (1)", p)
	}
	roots := 0
	for i := range tr.Spans {
		n := 0
		for p := tr.SpanParent(int32(i)); p >= 0; p = tr.SpanParent(p) {
			if n++; n > len(tr.Spans) {
				t.Fatalf("span %d: the parent chain still loops", i)
			}
		}
		if tr.SpanParent(int32(i)) < 0 {
			roots++
		}
	}
	if roots != 1 {
		t.Errorf("%d roots, want 1: the cycle is cut once", roots)
	}
	if b := tr.SpanBreakdowns()[1]; b.OnSamples != 1 {
		t.Errorf("A's breakdown %+v, want C's sample in it", b)
	}
	sel, err := tr.Select(SpanSelector{SpanID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if sel.Breakdown.OnSamples != 1 || !sel.Has(&tr.Samples[0]) {
		t.Errorf("--span-id a: %+v, want C's sample", sel.Breakdown)
	}
}
