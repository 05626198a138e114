package analysis_test

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/perfprof/perfprof/internal/analysis"
	"github.com/perfprof/perfprof/internal/analysis/analysistest"
)

func loadRequests(t *testing.T, q analysistest.Requests) (*analysis.Trace, analysistest.RequestsTruth) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "requests.bin")
	truth, err := q.WriteFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := analysis.Load([]string{path}, analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return tr, truth
}

// TestSelectSpan checks one span's breakdown, its child's samples
// included, against the generator's truth, for every request.
func TestSelectSpan(t *testing.T) {
	q := analysistest.DefaultRequests()
	q.Requests = 200
	tr, truth := loadRequests(t, q)
	per := tr.SpanBreakdowns()
	for _, want := range truth.Spans {
		sel, err := tr.Select(analysis.SpanSelector{SpanID: want.SpanID})
		if err != nil {
			t.Fatal(err)
		}
		b := sel.Breakdown
		if len(sel.Spans) != 1 || b.Spans != 1 || b.Wall != want.Duration || b.OnSamples != int64(want.OnCPU) ||
			b.OffSamples != int64(want.OffCPU) || b.OffStates[analysis.StateBlocked] != int64(want.OffCPU) ||
			b.Blocked != want.BlockedNs || b.Runnable != 0 {
			t.Fatalf("span %s %q: breakdown %+v, want %+v", want.SpanID, want.Name, b, want)
		}
		if b.OnCPU != uint64(want.OnCPU)*q.Period || b.OnCPU+b.Blocked+b.NotObserved != b.Wall {
			t.Fatalf("span %s: on-CPU %d + blocked %d + not observed %d != wall %d", want.SpanID, b.OnCPU, b.Blocked, b.NotObserved, b.Wall)
		}
		if want.ParentID != "" && b.NotObserved != 0 {
			t.Fatalf("child span %s: %d ns not observed, want 0 (its blocked sample covers it)", want.SpanID, b.NotObserved)
		}
		if want.ParentID == "" && b.NotObserved < q.Gap {
			t.Fatalf("request %s: %d ns not observed, want at least the gap %d", want.SpanID, b.NotObserved, q.Gap)
		}
		i, _ := tr.SpanByID(want.SpanID)
		idx := int32(slices.IndexFunc(tr.Spans, func(s analysis.Span) bool { return s.SpanID == i.SpanID }))
		if per[idx] != b {
			t.Fatalf("span %s: SpanBreakdowns %+v, Select %+v", want.SpanID, per[idx], b)
		}
		// The samples the selection has are exactly the span's.
		var n int64
		for k := range tr.Samples {
			if sel.Has(&tr.Samples[k]) {
				n++
			}
		}
		if n != int64(want.OnCPU+want.OffCPU) {
			t.Fatalf("span %s: selection has %d samples, want %d", want.SpanID, n, want.OnCPU+want.OffCPU)
		}
	}
}

// TestSelectTraceAndName checks --trace-id (the whole request), --span
// with --slowest, and that SpanNames agrees with Select by name.
func TestSelectTraceAndName(t *testing.T) {
	q := analysistest.DefaultRequests()
	q.Requests = 400
	tr, truth := loadRequests(t, q)
	req := truth.Spans[0]
	sel, err := tr.Select(analysis.SpanSelector{TraceID: req.TraceID})
	if err != nil {
		t.Fatal(err)
	}
	if b := sel.Breakdown; len(sel.Spans) != 2 || b.Spans != 1 || b.Wall != req.Duration || b.OnSamples != int64(req.OnCPU) {
		t.Errorf("trace %s: %d spans, breakdown %+v, want the request %+v", req.TraceID, len(sel.Spans), b, req)
	}

	var slow, uploads []analysistest.SpanTruth
	for _, s := range truth.Spans {
		if s.Name == analysistest.UploadSpan {
			uploads = append(uploads, s)
			if s.Slow {
				slow = append(slow, s)
			}
		}
	}
	sel, err = tr.Select(analysis.SpanSelector{Name: analysistest.UploadSpan, Slowest: len(slow)})
	if err != nil {
		t.Fatal(err)
	}
	var compress int
	for _, i := range sel.Spans {
		s := tr.Spans[i]
		k := slices.IndexFunc(slow, func(x analysistest.SpanTruth) bool { return x.SpanID == s.SpanID })
		if k < 0 {
			t.Fatalf("--slowest %d chose %s (%v), not a slow upload", len(slow), s.SpanID, s.Duration)
		}
		compress += slow[k].Compress
	}
	if b := sel.Breakdown; b.Spans != len(slow) || b.OnSamples != int64(len(slow)*(q.Typical+q.SlowExtra)) {
		t.Errorf("slowest uploads: %+v, want %d spans of %d on-CPU samples", b, len(slow), q.Typical+q.SlowExtra)
	}

	names := tr.SpanNames()
	if len(names) != 3 {
		t.Fatalf("span names: %+v", names)
	}
	for _, ns := range names {
		sel, err := tr.Select(analysis.SpanSelector{Name: ns.Name})
		if err != nil {
			t.Fatal(err)
		}
		if ns.Breakdown != sel.Breakdown || ns.Count != len(sel.Spans) {
			t.Errorf("%q: SpanNames %+v (count %d), Select %+v (%d spans)", ns.Name, ns.Breakdown, ns.Count, sel.Breakdown, len(sel.Spans))
		}
		if ns.Name == analysistest.UploadSpan {
			if ns.Count != len(uploads) {
				t.Errorf("uploads: %d, want %d", ns.Count, len(uploads))
			}
			durs := make([]uint64, len(uploads))
			for i, u := range uploads {
				durs[i] = u.Duration
			}
			slices.Sort(durs)
			if ns.P50 != analysis.Percentile(durs, 50) || ns.P99 != analysis.Percentile(durs, 99) || ns.Max != durs[len(durs)-1] {
				t.Errorf("uploads: p50 %d p99 %d max %d, want %d %d %d", ns.P50, ns.P99, ns.Max,
					analysis.Percentile(durs, 50), analysis.Percentile(durs, 99), durs[len(durs)-1])
			}
		}
	}

	if _, err := tr.Select(analysis.SpanSelector{Name: "no such span"}); err == nil {
		t.Error("selecting a span name that is not in the trace is not an error")
	}
}
