package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/perfprof/perfprof/internal/analysis"
	"github.com/perfprof/perfprof/internal/htmlview/htmlviewtest"
)

// checkSpanPage is the question perfprof answers, asked of a real run's
// trace files as a user asks it: the demo's root span with the most
// samples is clicked in `perfprof html`'s page (headless Chromium), and
// the flamegraph it scopes to must hold exactly the samples, and show
// exactly the breakdown, that `perfprof report --trace-id` prints for its
// trace; the spans panel must show report's Spans section. Screenshots go
// to $TMPDIR/perfprof-spans/demo.
func checkSpanPage(t *testing.T, traceDir string) {
	node, chromium, dir := htmlviewtest.Tools(t)
	cli := filepath.Join(root, "_build", "perfprof")
	tr, err := analysis.Load([]string{traceDir}, analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The root span with the most samples, of a trace with one root.
	per := tr.SpanBreakdowns()
	roots := map[string]int{}
	for i := range tr.Spans {
		if tr.SpanParent(int32(i)) < 0 {
			roots[tr.Spans[i].TraceID]++
		}
	}
	best := -1
	for i := range tr.Spans {
		sp := &tr.Spans[i]
		if tr.SpanParent(int32(i)) < 0 && roots[sp.TraceID] == 1 &&
			(best < 0 || per[i].OnSamples+per[i].OffSamples > per[best].OnSamples+per[best].OffSamples) {
			best = i
		}
	}
	if best < 0 || per[best].OnSamples == 0 {
		t.Fatalf("no root span with on-CPU samples among %d spans", len(tr.Spans))
	}
	span := tr.Spans[best]
	run := func(args ...string) string {
		out, err := exec.Command(cli, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("perfprof %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	shots := htmlviewtest.Artifacts(t, filepath.Join("perfprof-spans", "demo"))
	page := filepath.Join(shots, "demo.html")
	run("html", traceDir, "-o", page)
	r, err := htmlviewtest.Run(t, node, chromium, dir, page, filepath.Join(shots, "page.png"), map[string]any{
		"scope": map[string]any{"traceId": span.TraceID, "spanName": span.Name, "diffName": span.Name, "shots": shots},
	})
	if err != nil {
		t.Fatal(err)
	}
	S := r.Scope
	if S == nil || S.Span == nil {
		t.Fatalf("clicking the span bar of trace %s scoped nothing: %+v", span.TraceID, S)
	}
	sp := S.Span
	t.Logf("%s of trace %s clicked: %s", span.Name, span.TraceID, strings.ReplaceAll(sp.Header, "\n", " | "))
	if sp.Kind != "span" || sp.TraceID != span.TraceID || !sp.Root {
		t.Errorf("clicked %+v, want the root span %q of trace %s", sp, span.Name, span.TraceID)
	}
	rep := htmlviewtest.ReportBreakdown(t, run("report", "--trace-id", span.TraceID, traceDir))
	if got := fmt.Sprintf("%d (on-CPU %d, off-CPU %d)", sp.Samples, sp.OnSamples, sp.OffSamples); got != rep.Samples {
		t.Errorf("the page has %s samples, report --trace-id %s: %s", got, span.TraceID, rep.Samples)
	}
	for _, want := range rep.Shown {
		if !strings.Contains(sp.Header, want) {
			t.Errorf("report --trace-id %s prints %q; the page's header lacks it:\n%s", span.TraceID, want, sp.Header)
		}
	}
	rows := htmlviewtest.ReportSpanNames(t, run("report", "--groups", "1000", traceDir))
	if len(S.Panel) != len(rows) {
		t.Errorf("the spans panel has %d names, report's Spans section %d", len(S.Panel), len(rows))
	}
	for _, row := range S.Panel {
		pct := func(k string) string { return strings.TrimSuffix(row.Cells[k], "%") + "%" }
		want := []string{strings.ReplaceAll(row.Cells["count"], ",", ""), strings.TrimSuffix(row.Cells["p50"], " ms"),
			strings.TrimSuffix(row.Cells["p95"], " ms"), strings.TrimSuffix(row.Cells["p99"], " ms"), pct("oncpu"), pct("blocked"),
			pct("runnable"), pct("unobserved")}
		if c := rows[row.Name]; !slices.Equal(c, want) {
			t.Errorf("span name %q: report's Spans section %v, the page's panel %v", row.Name, c, want)
		}
	}
	t.Logf("spans panel: %d names; selections drawn in: span %.1f ms, name %.1f ms, slow vs typical %.1f ms; screenshots %v",
		len(S.Panel), sp.SelectMs, S.Perf.Name, S.Perf.Diff, S.Shots)
}
