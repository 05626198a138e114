package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/perfprof/perfprof/exporter/tracefileexporter"
	"github.com/perfprof/perfprof/exporter/tracefileexporter/tracefiletest"
	"github.com/perfprof/perfprof/internal/analysis"
	"github.com/perfprof/perfprof/internal/analysis/analysistest"
	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/htmlview"
	"github.com/perfprof/perfprof/internal/htmlview/htmlviewtest"
)

// spanShots is where the span views' pages and screenshots are kept.
func spanShots(t *testing.T) string { return htmlviewtest.Artifacts(t, "perfprof-spans") }

// requestsTruth is what writeRequestsWithExporter sent.
type requestsTruth struct {
	slowTrace string // trace id of the first slow upload
	uploads   int
}

// writeRequestsWithExporter sends, through the real tracefile exporter
// (format trc), 160 requests on two tokio workers, each its own trace: a
// root span (POST /upload or GET /items, on its thread) whose on-CPU
// samples are in app.parse, every 10th upload with three times as many
// more in app.compress; a child span db.query during which the thread is
// blocked for 1 ms; and a scheduling delay of 30 µs inside the root.
func writeRequestsWithExporter(t *testing.T, dir string) requestsTruth {
	t.Helper()
	cfg := tracefileexporter.NewFactory().CreateDefaultConfig().(*tracefileexporter.Config)
	cfg.Directory, cfg.Format = dir, tracefileexporter.FormatTRC
	write := startExporter(t, cfg)

	const (
		period   = 250_000
		typical  = 8
		extra    = 24
		blockNs  = 1_000_000
		delayNs  = 30_000
		stride   = 10_000_000
		requests = 160
	)
	var truth requestsTruth
	base := uint64(time.Now().UnixNano())
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr(convention.ServiceName, "shop")
	rs.Resource().Attributes().PutInt(convention.ProcessPid, 778)
	spans := rs.ScopeSpans().AppendEmpty().Spans()

	b := tracefiletest.NewProfBuilder()
	loc := func(addr uint64, name, file string, line int64) int32 {
		return b.Location(addr, tracefiletest.F(name, file, line))
	}
	mainL := loc(0x401000, "main", "src/main.rs", 5)
	runL := loc(0x402000, "tokio::runtime::worker::run", "tokio/src/worker.rs", 50)
	serveL := loc(0x403000, "app::serve", "src/app.rs", 10)
	parseL := loc(0x404000, analysistest.ParseFunc, "src/parse.rs", 20)
	compressL := loc(0x405000, analysistest.CompressFunc, "src/compress.rs", 30)
	queryL := loc(0x406000, "db::query", "src/db.rs", 40)
	futexL := loc(0x407000, "futex_wait", "", 0)
	parseS := b.Stack(parseL, serveL, runL, mainL)
	compressS := b.Stack(compressL, serveL, runL, mainL)
	blockS := b.Stack(futexL, queryL, serveL, runL, mainL)
	on := b.Profile(778, "shop", false)
	on.SetPeriod(period)
	off := b.Profile(778, "shop", true)

	uploads := 0
	for r := range requests {
		w := r % 2
		tid := 300 + w
		name, slow := analysistest.ItemsSpan, false
		if r%2 == 0 || r%4 == 1 { // uploads on both workers
			name = analysistest.UploadSpan
			slow = uploads%10 == 9
			uploads++
		}
		traceID := pcommon.TraceID{0x17, byte(r >> 8), byte(r), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}
		rootID := pcommon.SpanID{0xbb, byte(r >> 8), byte(r), 1, 0, 0, 0, 1}
		childID := pcommon.SpanID{0xbb, byte(r >> 8), byte(r), 2, 0, 0, 0, 2}
		if slow && truth.slowTrace == "" {
			truth.slowTrace = traceID.String()
		}
		start := base + uint64(r/2)*stride + uint64(w)*100_000
		n := typical
		if slow {
			n += extra
		}
		cpuEnd := start + uint64(n)*period
		childStart := cpuEnd + 50_000
		end := childStart + blockNs + 300_000

		attrs := []int32{b.Attr(convention.ThreadID, tid), b.Attr(convention.ThreadName, fmt.Sprintf("tokio-rt-worker-%d", w)),
			b.Attr(convention.WorkerID, w), b.Attr(convention.RootName, name)}
		for k := range n {
			st := parseS
			if k >= typical {
				st = compressS
			}
			b.Sample(on, st, b.Link(traceID, rootID), attrs, []uint64{start + uint64(k)*period + 1000}, []int64{1})
		}
		b.Sample(off, parseS, b.Link(traceID, rootID), append(slices.Clone(attrs), b.Attr(convention.ThreadState, convention.ThreadStateRunnable)),
			[]uint64{start + 60_000}, []int64{delayNs})
		b.Sample(off, blockS, b.Link(traceID, childID), append(slices.Clone(attrs), b.Attr(convention.ThreadState, convention.ThreadStateBlocked)),
			[]uint64{childStart + 10_000}, []int64{blockNs})

		root := spans.AppendEmpty()
		root.SetName(name)
		root.SetTraceID(traceID)
		root.SetSpanID(rootID)
		root.SetStartTimestamp(pcommon.Timestamp(start))
		root.SetEndTimestamp(pcommon.Timestamp(end))
		root.Attributes().PutInt(convention.ThreadID, int64(tid))
		child := spans.AppendEmpty()
		child.SetName(analysistest.QuerySpan)
		child.SetTraceID(traceID)
		child.SetSpanID(childID)
		child.SetParentSpanID(rootID)
		child.SetStartTimestamp(pcommon.Timestamp(childStart))
		child.SetEndTimestamp(pcommon.Timestamp(childStart + blockNs))
		child.Attributes().PutInt(convention.ThreadID, int64(tid))
	}
	truth.uploads = uploads
	write(td, b.Profiles)
	return truth
}

// checkBreakdown compares a breakdown the page shows with analysis's.
func checkBreakdown(t *testing.T, what string, got htmlviewtest.Breakdown, want analysis.Breakdown) {
	t.Helper()
	w := htmlviewtest.Breakdown{Spans: want.Spans, Wall: int64(want.Wall), OnSamples: want.OnSamples, OffSamples: want.OffSamples,
		OnCPU: int64(want.OnCPU), Blocked: int64(want.Blocked), Runnable: int64(want.Runnable), OffUnknown: int64(want.OffUnknown),
		NotObserved: int64(want.NotObserved)}
	if got != w {
		t.Errorf("%s: page breakdown %+v, analysis %+v", what, got, w)
	}
}

// checkHeader checks that the header shows the breakdown in ms with 3
// decimals, as `perfprof report` prints it.
func checkHeader(t *testing.T, what, header string, b analysis.Breakdown) {
	t.Helper()
	ms := func(ns uint64) string { return fmt.Sprintf("%.3f ms", float64(ns)/1e6) }
	for _, want := range []string{"wall " + ms(b.Wall), "on-CPU " + ms(b.OnCPU), "off-CPU blocked " + ms(b.Blocked),
		"off-CPU runnable " + ms(b.Runnable), "not observed " + ms(b.NotObserved)} {
		if !strings.Contains(header, want) {
			t.Errorf("%s: header lacks %q:\n%s", what, want, header)
		}
	}
}

// TestHTMLSpansInBrowser writes request spans and samples through the real
// exporter, turns them into a page with `perfprof html` and clicks through
// the span views in headless Chromium: a root span's bar scopes the
// flamegraph to exactly the samples and breakdown of `--trace-id`; Esc and
// the root frame go back; a brushed range has the lane's samples in it;
// the spans panel shows SpanNames' counts and percentiles and a name's
// flamegraph is Select({Name}); the differential view of the uploads puts
// app.compress on top. Screenshots go to $TMPDIR/perfprof-spans.
func TestHTMLSpansInBrowser(t *testing.T) {
	node, chromium, dir := htmlviewtest.Tools(t)
	traces := t.TempDir()
	truth := writeRequestsWithExporter(t, traces)
	tr, err := analysis.Load([]string{traces}, analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	out := spanShots(t)
	page := filepath.Join(out, "exporter-requests.html")
	mustRun(t, "html", traces, "-o", page)
	r, err := htmlviewtest.Run(t, node, chromium, dir, page, filepath.Join(out, "exporter-requests.png"), map[string]any{
		"clickFrame": "app::serve",
		"scope": map[string]any{"traceId": truth.slowTrace, "spanName": analysistest.UploadSpan, "diffName": analysistest.UploadSpan,
			"brushRow": 0, "perfClicks": 5, "shots": out},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Requests)+len(r.Blocked) > 0 {
		t.Errorf("the page made requests: %v %v", r.Requests, r.Blocked)
	}
	S := r.Scope
	if S == nil || S.Span == nil {
		t.Fatalf("no scope steps: %+v", S)
	}

	// A root span's bar: the samples and breakdown of --trace-id.
	sel, err := tr.Select(analysis.SpanSelector{TraceID: truth.slowTrace})
	if err != nil {
		t.Fatal(err)
	}
	b := sel.Breakdown
	sp := S.Span
	if sp.Kind != "span" || sp.TraceID != truth.slowTrace || !sp.Root || sp.Name != analysistest.UploadSpan {
		t.Errorf("clicked %+v, want the root span of trace %s", sp, truth.slowTrace)
	}
	if sp.Samples != b.OnSamples+b.OffSamples || sp.OnSamples != b.OnSamples || sp.OffSamples != b.OffSamples {
		t.Errorf("span of trace %s: %d samples (on %d, off %d), Select has %d (on %d, off %d)", truth.slowTrace,
			sp.Samples, sp.OnSamples, sp.OffSamples, b.OnSamples+b.OffSamples, b.OnSamples, b.OffSamples)
	}
	checkBreakdown(t, "span bar", sp.Breakdown, b)
	checkHeader(t, "span bar", sp.Header, b)
	if want := fmt.Sprintf("%s samples (on-CPU %d, off-CPU %d)", htmlviewtest.Thousands(b.OnSamples+b.OffSamples), b.OnSamples, b.OffSamples); !strings.Contains(sp.Header, want) ||
		!strings.Contains(sp.Header, "trace "+truth.slowTrace) || !strings.Contains(sp.Header, "span "+analysistest.UploadSpan) {
		t.Errorf("span header lacks %q, the name or the trace id:\n%s", want, sp.Header)
	}
	t.Logf("span bar of trace %s: %s", truth.slowTrace, strings.ReplaceAll(sp.Header, "\n", " | "))
	// What the CLI prints for the same trace, read as a user reads it.
	cli := htmlviewtest.ReportBreakdown(t, mustRun(t, "report", "--trace-id", truth.slowTrace, traces))
	if cli.Samples != fmt.Sprintf("%d (on-CPU %d, off-CPU %d)", sp.Samples, sp.OnSamples, sp.OffSamples) {
		t.Errorf("report --trace-id %s: Samples: %s; the page: %d (on-CPU %d, off-CPU %d)", truth.slowTrace, cli.Samples,
			sp.Samples, sp.OnSamples, sp.OffSamples)
	}
	for _, want := range cli.Shown {
		if !strings.Contains(sp.Header, want) {
			t.Errorf("report --trace-id %s prints %q; the page's header lacks it:\n%s", truth.slowTrace, want, sp.Header)
		}
	}
	var onCPU int64
	for i := range tr.Samples {
		if tr.Samples[i].Source != analysis.SourceOffCPU {
			onCPU++
		}
	}
	if e := S.AfterEscape; e.Scoped || !e.HeaderHidden || e.Total != onCPU {
		t.Errorf("after Esc: %+v, want the whole trace (%d on-CPU samples)", e, onCPU)
	}
	if e := S.AfterRootClick; e.Scoped || e.Total != onCPU {
		t.Errorf("after a click on the root frame: %+v, want the whole trace", e)
	}

	// A brushed range of lane 0: its samples in [start, end).
	d := htmlview.FromTrace(tr)
	br := S.Brush
	if br == nil || br.Kind != "range" || br.Row != 0 || !(br.EndNs > br.StartNs) {
		t.Fatalf("brush: %+v", br)
	}
	var want htmlviewtest.Breakdown
	for _, s := range d.Samples {
		if tm := float64(s.Time - d.Start); s.Row == 0 && tm >= br.StartNs && tm < br.EndNs {
			if s.OffCPU {
				want.OffSamples++
				switch s.State {
				case 1:
					want.Blocked += s.Weight
				case 2:
					want.Runnable += s.Weight
				default:
					want.OffUnknown += s.Weight
				}
			} else {
				want.OnSamples++
			}
		}
	}
	if got := br.Breakdown; got.OnSamples != want.OnSamples || got.OffSamples != want.OffSamples || got.Blocked != want.Blocked ||
		got.Runnable != want.Runnable || got.OnCPU != want.OnSamples*d.Period || want.OnSamples == 0 {
		t.Errorf("brushed %.0f..%.0f ns of lane 0: %+v, the data has %+v", br.StartNs, br.EndNs, got, want)
	}

	// The spans panel: SpanNames' counts and percentiles.
	ms := func(ns uint64) string { return fmt.Sprintf("%.3f ms", float64(ns)/1e6) }
	names := tr.SpanNames()
	if len(S.Panel) != len(names) {
		t.Fatalf("spans panel has %d rows, SpanNames %d", len(S.Panel), len(names))
	}
	for i, n := range names {
		row := S.Panel[i]
		c := row.Cells
		if row.Name != n.Name || c["count"] != htmlviewtest.Thousands(int64(n.Count)) || c["p50"] != ms(n.P50) || c["p95"] != ms(n.P95) ||
			c["p99"] != ms(n.P99) || c["max"] != ms(n.Max) || c["wall"] != ms(n.Wall) {
			t.Errorf("spans panel row %d: %s %v; SpanNames: %+v", i, row.Name, c, n)
		}
	}
	// The same rows in the Spans section of `perfprof report`.
	rows := htmlviewtest.ReportSpanNames(t, mustRun(t, "report", "--groups", "100", traces))
	for _, row := range S.Panel {
		c, ok := rows[row.Name]
		pct := func(k string) string { return strings.TrimSuffix(row.Cells[k], "%") + "%" }
		if want := []string{strings.ReplaceAll(row.Cells["count"], ",", ""), strings.TrimSuffix(row.Cells["p50"], " ms"),
			strings.TrimSuffix(row.Cells["p95"], " ms"), strings.TrimSuffix(row.Cells["p99"], " ms"), pct("oncpu"), pct("blocked"),
			pct("runnable"), pct("unobserved")}; !ok || !slices.Equal(c, want) {
			t.Errorf("span name %q: report's Spans section %v, the page's panel %v", row.Name, c, want)
		}
	}

	// A name: Select({Name}).
	nsel, err := tr.Select(analysis.SpanSelector{Name: analysistest.UploadSpan})
	if err != nil {
		t.Fatal(err)
	}
	if nm := S.Name; nm == nil || nm.Kind != "name" || nm.Samples != nsel.Breakdown.OnSamples+nsel.Breakdown.OffSamples {
		t.Errorf("name %q: %+v, Select has %d samples", analysistest.UploadSpan, nm, nsel.Breakdown.OnSamples+nsel.Breakdown.OffSamples)
	} else {
		checkBreakdown(t, "name", nm.Breakdown, nsel.Breakdown)
		checkHeader(t, "name", nm.Header, nsel.Breakdown)
	}
	slowest, err := tr.Select(analysis.SpanSelector{Name: analysistest.UploadSpan, Slowest: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(S.Slowest) != 10 || S.SlowSpan == nil || S.SlowSpan.Kind != "span" || S.SlowSpan.TraceID != tr.Spans[slowest.Spans[0]].TraceID {
		t.Errorf("slowest list %v, first opened %+v; want 10, the first of trace %s", S.Slowest, S.SlowSpan, tr.Spans[slowest.Spans[0]].TraceID)
	} else {
		checkBreakdown(t, "slowest span", S.SlowSpan.Breakdown, slowest.Breakdown)
	}

	// Slow versus typical: app.compress on top.
	df := S.Diff
	if df == nil || len(df.Top) == 0 || df.Top[0].Name != analysistest.CompressFunc || df.Top[0].Delta <= 0 {
		t.Errorf("differential view: %+v, want %s on top", df, analysistest.CompressFunc)
	} else {
		if df.Scope.Kind != "diff" || df.Scope.Breakdown.Spans != (truth.uploads+9)/10 {
			t.Errorf("differential view of %d uploads: %+v, want the slowest %d", truth.uploads, df.Scope, (truth.uploads+9)/10)
		}
		if tip := df.Tooltip.Text; !strings.Contains(tip, "slow spans:") || !strings.Contains(tip, "typical spans:") {
			t.Errorf("differential tooltip: %q", tip)
		}
		t.Logf("slow vs typical %s: top %s %+.1f points (slow %.1f%%, typical %.1f%%)", analysistest.UploadSpan, df.Top[0].Name,
			100*df.Top[0].Delta, 100*df.Top[0].SlowShare, 100*df.Top[0].TypicalShare)
	}
	t.Logf("detail inflated in %.1f ms; selections: clicks %v ms, brush %.1f, name %.1f, diff %.1f; screenshots %v",
		S.DetailMs, S.Perf.Clicks, S.Perf.Brush, S.Perf.Name, S.Perf.Diff, S.Shots)
}

// TestHTMLSpans1M is the performance target the README quotes: a page of
// about a million samples (20 000 requests) stays under 3 MB, is first
// drawn within 1 s, and redraws the flamegraph for a span bar clicked (the
// median of 10 clicks) or a brushed range within 25 ms, for a name or slow
// vs typical, which gather every span of the name, within 150 ms.
func TestHTMLSpans1M(t *testing.T) {
	if testing.Short() {
		t.Skip("a million samples: not with -short")
	}
	node, chromium, dir := htmlviewtest.Tools(t)
	q := analysistest.DefaultRequests()
	q.Requests, q.Typical = 20_000, 48
	out := spanShots(t)
	trace := filepath.Join(t.TempDir(), "requests-1m.bin")
	truth, err := q.WriteFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(out, "requests-1m.html")
	start := time.Now()
	mustRun(t, "html", trace, "-o", page)
	writeTime := time.Since(start)
	fi, err := os.Stat(page)
	if err != nil {
		t.Fatal(err)
	}
	shots := filepath.Join(out, "1m")
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := htmlviewtest.Run(t, node, chromium, dir, page, filepath.Join(shots, "page.png"), map[string]any{
		"clickFrame": analysistest.ParseFunc,
		"scope": map[string]any{"traceId": truth.Spans[len(truth.Spans)/2].TraceID, "spanName": analysistest.UploadSpan,
			"diffName": analysistest.UploadSpan, "brushRow": 1, "perfClicks": 10, "shots": shots},
	})
	if err != nil {
		t.Fatal(err)
	}
	S := r.Scope
	t.Logf("%d samples: page %.2f MB written in %.1fs; first draw %.0f ms after navigation start; detail inflated in %.0f ms",
		truth.Samples, float64(fi.Size())/1e6, writeTime.Seconds(), r.Load.DrawMs, S.DetailMs)
	t.Logf("selection to flamegraph drawn: span bar clicks %v ms; brush %.1f ms; name %.1f ms; slow vs typical %.1f ms",
		roundAll(S.Perf.Clicks), S.Perf.Brush, S.Perf.Name, S.Perf.Diff)
	if fi.Size() >= 3e6 {
		t.Errorf("page %d bytes, want under 3 MB", fi.Size())
	}
	if r.Load.DrawMs <= 0 || r.Load.DrawMs > 1000 {
		t.Errorf("first draw %.0f ms after navigation start, want under 1 s", r.Load.DrawMs)
	}
	if len(S.Perf.Clicks) > 0 {
		clicks := slices.Sorted(slices.Values(S.Perf.Clicks))
		if m := clicks[len(clicks)/2]; m > 25 {
			t.Errorf("span bar clicks: median %.1f ms to the flamegraph drawn, want at most 25 (all: %v)", m, roundAll(S.Perf.Clicks))
		}
	}
	if S.Perf.Brush > 25 {
		t.Errorf("brushed range: %.1f ms to the flamegraph drawn, want at most 25", S.Perf.Brush)
	}
	all := append(slices.Clone(S.Perf.Clicks), S.Perf.Brush, S.Perf.Name, S.Perf.Diff, S.Span.SelectMs)
	if len(S.Perf.Clicks) < 10 {
		t.Errorf("%d timed clicks, want 10", len(S.Perf.Clicks))
	}
	for _, v := range all {
		if v <= 0 || v > 150 {
			t.Errorf("a selection took %.1f ms from the click to the flamegraph drawn, want at most 150 (all: %v)", v, roundAll(all))
			break
		}
	}
	if S.Diff == nil || len(S.Diff.Top) == 0 || S.Diff.Top[0].Name != analysistest.CompressFunc {
		t.Errorf("differential view: %+v, want %s on top", S.Diff, analysistest.CompressFunc)
	}
}

func roundAll(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(int(x*10+0.5)) / 10
	}
	return out
}
