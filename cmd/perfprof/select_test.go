package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/perfprof/perfprof/internal/analysis"
	"github.com/perfprof/perfprof/internal/analysis/analysistest"
)

// requestsFile writes a trace of request spans with a known slow tail,
// 400 requests of analysistest.DefaultRequests changed by opts.
func requestsFile(t *testing.T, opts ...func(*analysistest.Requests)) (string, analysistest.Requests, analysistest.RequestsTruth) {
	t.Helper()
	q := analysistest.DefaultRequests()
	q.Requests = 400
	for _, o := range opts {
		o(&q)
	}
	path := filepath.Join(t.TempDir(), "requests.bin")
	truth, err := q.WriteFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, q, truth
}

// msStr formats ns as the report does: milliseconds, 3 decimals.
func msStr(ns uint64) string { return fmt.Sprintf("%.3f", float64(ns)/1e6) }

// pctStr formats a share of wall as the report does: percent, 1 decimal.
func pctStr(v, wall uint64) string { return fmt.Sprintf("%.1f", 100*float64(v)/float64(wall)) }

// breakdownOut is the Breakdown block of a report, as printed.
type breakdownOut struct {
	wall                           string
	spans                          int
	on, onPct, period              string
	onN                            int
	blocked, blockedPct            string
	blockedN                       int
	runnable, runnablePct          string
	runnableN                      int
	notObs, notObsPct              string
	samples, onSamples, offSamples int
}

var (
	bdWallRe     = regexp.MustCompile(`(?m)^Breakdown: wall ([\d.]+) ms over (\d+) span\(s\)$`)
	bdOnRe       = regexp.MustCompile(`(?m)^  on-CPU +([\d.]+) ms +([\d.]+)%  \((\d+) samples × ([\d.]+) ms\)$`)
	bdBlockedRe  = regexp.MustCompile(`(?m)^  off-CPU blocked +([\d.]+) ms +([\d.]+)%  \((\d+) samples\)$`)
	bdRunnableRe = regexp.MustCompile(`(?m)^  off-CPU runnable +([\d.]+) ms +([\d.]+)%  \((\d+) samples\)$`)
	bdNotObsRe   = regexp.MustCompile(`(?m)^  not observed +([\d.]+) ms +([\d.]+)%$`)
)

// parseBreakdown reads the Breakdown block of a report with a selection.
func parseBreakdown(t *testing.T, rep string) breakdownOut {
	t.Helper()
	i := strings.Index(rep, "\nBreakdown: ")
	if i < 0 {
		t.Fatalf("no breakdown in:\n%s", rep)
	}
	block := rep[i+1:]
	if j := strings.Index(block, "\n\n"); j > 0 {
		block = block[:j+1]
	}
	var b breakdownOut
	find := func(re *regexp.Regexp) []string {
		m := re.FindStringSubmatch(block)
		if m == nil {
			t.Fatalf("breakdown: no match for %s in:\n%s", re, block)
		}
		return m
	}
	atoi := func(s string) int { n, _ := strconv.Atoi(s); return n }
	m := find(bdWallRe)
	b.wall, b.spans = m[1], atoi(m[2])
	m = find(bdOnRe)
	b.on, b.onPct, b.onN, b.period = m[1], m[2], atoi(m[3]), m[4]
	m = find(bdBlockedRe)
	b.blocked, b.blockedPct, b.blockedN = m[1], m[2], atoi(m[3])
	m = find(bdRunnableRe)
	b.runnable, b.runnablePct, b.runnableN = m[1], m[2], atoi(m[3])
	m = find(bdNotObsRe)
	b.notObs, b.notObsPct = m[1], m[2]
	m = samplesLine.FindStringSubmatch(block)
	if m == nil {
		t.Fatalf("breakdown: no Samples line in:\n%s", block)
	}
	b.samples, b.onSamples, b.offSamples = atoi(m[1]), atoi(m[2]), atoi(m[3])
	return b
}

// wantBreakdown is the breakdown the generator's truth says spans must have,
// computed from the truth alone.
func wantBreakdown(q analysistest.Requests, spans ...analysistest.SpanTruth) breakdownOut {
	var wall, on, blocked uint64
	var onN, offN int
	for _, s := range spans {
		wall += s.Duration
		on += uint64(s.OnCPU) * q.Period
		blocked += s.BlockedNs
		onN += s.OnCPU
		offN += s.OffCPU
	}
	var notObs uint64
	if on+blocked < wall {
		notObs = wall - on - blocked
	}
	return breakdownOut{wall: msStr(wall), spans: len(spans),
		on: msStr(on), onPct: pctStr(on, wall), onN: onN, period: msStr(q.Period),
		blocked: msStr(blocked), blockedPct: pctStr(blocked, wall), blockedN: offN,
		runnable: "0.000", runnablePct: "0.0",
		notObs: msStr(notObs), notObsPct: pctStr(notObs, wall),
		samples: onN + offN, onSamples: onN, offSamples: offN}
}

// selectedIDs returns the span ids of the selection table of a report.
func selectedIDs(t *testing.T, rep string) []string {
	t.Helper()
	i := strings.Index(rep, "== Selection: ")
	if i < 0 {
		t.Fatalf("no selection section in:\n%s", rep)
	}
	sec := rep[i:]
	sec = sec[:strings.Index(sec, "\nBreakdown: ")]
	var ids []string
	for _, m := range regexp.MustCompile(`(?m)^  .+  [0-9a-f]{32}  ([0-9a-f]{16})  `).FindAllStringSubmatch(sec, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

// TestSelectBreakdown checks the breakdown of --span-id and --trace-id
// against the generator's truth: a plain and a slow request, a request
// without a slow tail, and a child span.
func TestSelectBreakdown(t *testing.T) {
	path, q, truth := requestsFile(t)
	byID := map[string]analysistest.SpanTruth{}
	var picks []analysistest.SpanTruth
	seen := map[string]bool{}
	for _, s := range truth.Spans {
		byID[s.SpanID] = s
		kind := s.Name
		if s.Slow {
			kind += " slow"
		}
		if !seen[kind] {
			seen[kind] = true
			picks = append(picks, s)
		}
	}
	if len(picks) != 4 {
		t.Fatalf("picked %d kinds of span, want 4 (upload, slow upload, items, query)", len(picks))
	}
	for _, s := range picks {
		rep := mustRun(t, "report", "--span-id", s.SpanID, path)
		if got, want := parseBreakdown(t, rep), wantBreakdown(q, s); got != want {
			t.Errorf("--span-id %s (%s, slow %v):\n got %+v\nwant %+v", s.SpanID, s.Name, s.Slow, got, want)
		}
		if ids := selectedIDs(t, rep); !slices.Equal(ids, []string{s.SpanID}) {
			t.Errorf("--span-id %s: table lists %v", s.SpanID, ids)
		}
		if s.ParentID != "" {
			continue
		}
		// The whole request: the request and its child, counted once.
		// Upper case ids are accepted: they are copied from many tools.
		rep = mustRun(t, "report", "--trace-id", strings.ToUpper(s.TraceID), path)
		if got, want := parseBreakdown(t, rep), wantBreakdown(q, s); got != want {
			t.Errorf("--trace-id %s:\n got %+v\nwant %+v", s.TraceID, got, want)
		}
		ids := selectedIDs(t, rep)
		var child string
		for _, c := range truth.Spans {
			if c.ParentID == s.SpanID {
				child = c.SpanID
			}
		}
		if !slices.Equal(ids, []string{s.SpanID, child}) {
			t.Errorf("--trace-id %s: table lists %v, want the request %s and its child %s", s.TraceID, ids, s.SpanID, child)
		}
		if !strings.Contains(rep, fmt.Sprintf("== Selection: --trace-id %s: 2 span(s) ==", s.TraceID)) {
			t.Errorf("--trace-id %s: no selection title naming the selector", s.TraceID)
		}
	}
}

// TestSelectSlowUploads is the question the selectors exist for: which
// uploads are slow, and where does their time go?
func TestSelectSlowUploads(t *testing.T) {
	path, q, truth := requestsFile(t)
	var slow []analysistest.SpanTruth
	var slowIDs []string
	for _, s := range truth.Spans {
		if s.Slow {
			slow = append(slow, s)
			slowIDs = append(slowIDs, s.SpanID)
		}
	}
	k := len(slow)
	if k < 3 {
		t.Fatalf("%d slow uploads, want a few", k)
	}
	rep := mustRun(t, "report", "--span", analysistest.UploadSpan, "--slowest", strconv.Itoa(k), "--groups", strconv.Itoa(k), path)
	ids := selectedIDs(t, rep)
	slices.Sort(ids)
	slices.Sort(slowIDs)
	if !slices.Equal(ids, slowIDs) {
		t.Errorf("--slowest %d lists %v, want the slow uploads %v", k, ids, slowIDs)
	}
	if got, want := parseBreakdown(t, rep), wantBreakdown(q, slow...); got != want {
		t.Errorf("slow uploads:\n got %+v\nwant %+v", got, want)
	}
	// The top stack, and the hottest function, is the slow tail's.
	i := strings.Index(rep, "== Top on-CPU stacks (selected spans)")
	if i < 0 {
		t.Fatalf("no top on-CPU stacks in:\n%s", rep)
	}
	top := strings.SplitN(rep[i:], "\n", 4)
	wantHead := fmt.Sprintf("    %5.1f%% %d samples", 100*float64(q.SlowExtra)/float64(q.Typical+q.SlowExtra), k*q.SlowExtra)
	if len(top) < 3 || top[1] != wantHead || !strings.HasPrefix(strings.TrimSpace(top[2]), analysistest.CompressFunc+" ") {
		t.Errorf("top stack %q, want %q in %s", top[1:3], wantHead, analysistest.CompressFunc)
	}
	if !strings.Contains(rep, "== Top off-CPU stacks (off-CPU samples of the selected spans") {
		t.Error("no top off-CPU stacks")
	}
	if self := selfPercent(t, rep, analysistest.CompressFunc); fmt.Sprintf("%.2f", self) !=
		fmt.Sprintf("%.2f", 100*float64(q.SlowExtra)/float64(q.Typical+q.SlowExtra)) {
		t.Errorf("SELF%% of %s %.2f", analysistest.CompressFunc, self)
	}
	// Sections about workers, not spans, are left out of a selection.
	for _, s := range []string{"== Long polls", "== Blocking stacks", "== Scheduling delay"} {
		if strings.Contains(rep, s) {
			t.Errorf("selection report has %q", s)
		}
	}

	// --groups bounds the table; --slowest alone takes the longest spans
	// of the trace, which are the slow uploads again.
	rep = mustRun(t, "report", "--slowest", strconv.Itoa(k), "--groups", "2", path)
	if ids := selectedIDs(t, rep); len(ids) != 2 || !strings.Contains(rep, fmt.Sprintf("  … %d more spans", k-2)) {
		t.Errorf("--groups 2: table lists %v", ids)
	}
	if got, want := parseBreakdown(t, rep), wantBreakdown(q, slow...); got != want {
		t.Errorf("--slowest %d alone:\n got %+v\nwant %+v", k, got, want)
	}
}

// spansRowRe is a row of the Spans section.
var spansRowRe = regexp.MustCompile(`^  (.+?) +(\d+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+)% +([\d.]+)% +([\d.]+)% +([\d.]+)%$`)

// spansSection returns the rows of the Spans section by name, and the
// lines that are not rows.
func spansSection(t *testing.T, rep string) (map[string][]string, []string) {
	t.Helper()
	i := strings.Index(rep, "\n== Spans: ")
	if i < 0 {
		t.Fatalf("no Spans section in:\n%s", rep)
	}
	sec := rep[i+1:]
	sec = sec[:strings.Index(sec, "\n\n")]
	rows := map[string][]string{}
	var other []string
	for _, l := range strings.Split(sec, "\n")[2:] { // title and header
		if m := spansRowRe.FindStringSubmatch(l); m != nil {
			rows[m[1]] = m[2:]
		} else {
			other = append(other, l)
		}
	}
	return rows, other
}

// TestSpansSection checks the per-name table against the truth: counts,
// nearest-rank percentiles and where the time went. With 10% of the uploads
// slow, their p95 and p99 are slow; with 4%, only their p99 is: between the
// two, every percentile column is checked against a different neighbour.
func TestSpansSection(t *testing.T) {
	for _, slowEvery := range []int{10, 25} {
		t.Run(fmt.Sprintf("slow-every-%d", slowEvery), func(t *testing.T) {
			path, q, truth := requestsFile(t, func(q *analysistest.Requests) { q.SlowEvery = slowEvery })
			checkSpansSection(t, path, q, truth)
		})
	}

	// --groups bounds it; a selection's report has it for the whole trace.
	path, _, truth := requestsFile(t)
	rep := mustRun(t, "report", "--groups", "2", "--span", analysistest.QuerySpan, path)
	rows, other := spansSection(t, rep)
	if len(rows) != 2 || !slices.Equal(other, []string{"  … 1 more names (--groups)"}) {
		t.Errorf("--groups 2: rows %v, other lines %q", rows, other)
	}
	if !strings.Contains(rep, fmt.Sprintf("== Spans: 3 names, %d spans (whole trace) ==", len(truth.Spans))) {
		t.Error("selection report: no whole-trace Spans title")
	}
}

func checkSpansSection(t *testing.T, path string, q analysistest.Requests, truth analysistest.RequestsTruth) {
	t.Helper()
	type agg struct {
		durs              []uint64
		wall, on, blocked uint64
		count             int
	}
	want := map[string]*agg{}
	for _, s := range truth.Spans {
		a := want[s.Name]
		if a == nil {
			a = &agg{}
			want[s.Name] = a
		}
		a.count++
		a.durs = append(a.durs, s.Duration)
		a.wall += s.Duration
		a.on += uint64(s.OnCPU) * q.Period
		a.blocked += s.BlockedNs
	}
	rep := mustRun(t, "report", path)
	rows, other := spansSection(t, rep)
	if len(rows) != len(want) || len(other) != 0 {
		t.Fatalf("Spans rows %v, other lines %q; want %d names", rows, other, len(want))
	}
	for name, a := range want {
		slices.Sort(a.durs)
		notObs := a.wall - a.on - a.blocked
		exp := []string{strconv.Itoa(a.count), msStr(analysis.Percentile(a.durs, 50)), msStr(analysis.Percentile(a.durs, 95)),
			msStr(analysis.Percentile(a.durs, 99)), pctStr(a.on, a.wall), pctStr(a.blocked, a.wall), "0.0", pctStr(notObs, a.wall)}
		if !slices.Equal(rows[name], exp) {
			t.Errorf("Spans row %q: %v, want %v", name, rows[name], exp)
		}
	}
	// The slow tail shows in the uploads' percentiles only.
	if up := rows[analysistest.UploadSpan]; up[1] == up[3] {
		t.Errorf("uploads: p50 %s = p99 %s, want a slow tail", up[1], up[3])
	}
}

// TestSelectFoldedPprof checks that folded and pprof with selectors hold
// the selection's samples and nothing else.
func TestSelectFoldedPprof(t *testing.T) {
	path, q, truth := requestsFile(t)
	var req, slowReq analysistest.SpanTruth
	var slow, uploads int
	for _, s := range truth.Spans {
		if s.Name == analysistest.ItemsSpan && req.SpanID == "" {
			req = s
		}
		if s.Slow {
			slow++
			if slowReq.SpanID == "" {
				slowReq = s
			}
		}
		if s.Name == analysistest.UploadSpan {
			uploads += s.OnCPU
		}
	}

	sum, _ := foldedSum(t, mustRun(t, "folded", "--span-id", slowReq.SpanID, path))
	if sum != uint64(slowReq.OnCPU) {
		t.Errorf("folded --span-id %s: %d samples, want %d", slowReq.SpanID, sum, slowReq.OnCPU)
	}
	sum, stacks := foldedSum(t, mustRun(t, "folded", "--source", "offcpu", "--by", "span", "--trace-id", req.TraceID, path))
	wantStack := "span " + analysistest.QuerySpan + ";" + analysistest.MainFunc + ";" + analysistest.WorkerFunc + ";app.serve;" +
		analysistest.QueryFunc + ";" + analysistest.KernelFunc
	if sum != req.BlockedNs || stacks[wantStack] != req.BlockedNs {
		t.Errorf("folded offcpu --trace-id %s: %v, want %d ns in %q", req.TraceID, stacks, req.BlockedNs, wantStack)
	}
	sum, stacks = foldedSum(t, mustRun(t, "folded", "--span", analysistest.UploadSpan, "--slowest", strconv.Itoa(slow), path))
	var compress uint64
	for k, v := range stacks {
		if strings.HasSuffix(k, ";"+analysistest.CompressFunc) {
			compress += v
		}
	}
	if sum != uint64(slow*(q.Typical+q.SlowExtra)) || compress != uint64(slow*q.SlowExtra) {
		t.Errorf("folded slowest uploads: %d samples, %d in %s; want %d, %d", sum, compress, analysistest.CompressFunc,
			slow*(q.Typical+q.SlowExtra), slow*q.SlowExtra)
	}

	out := filepath.Join(t.TempDir(), "req.pb.gz")
	mustRun(t, "pprof", "--trace-id", req.TraceID, "-o", out, path)
	p := readProfile(t, out)
	var on, off, offNs int64
	for _, s := range p.Sample {
		on += s.Value[vSamples]
		off += s.Value[vOffSamples]
		offNs += s.Value[vOffNs]
		if tr := s.Label["trace_id"]; !slices.Equal(tr, []string{req.TraceID}) {
			t.Errorf("pprof --trace-id %s: a sample of trace %v", req.TraceID, tr)
		}
	}
	if on != int64(req.OnCPU) || off != int64(req.OffCPU) || offNs != int64(req.BlockedNs) {
		t.Errorf("pprof --trace-id: on %d off %d (%d ns), want %d %d (%d ns)", on, off, offNs, req.OnCPU, req.OffCPU, req.BlockedNs)
	}
	if !slices.ContainsFunc(p.Comments, func(c string) bool { return strings.Contains(c, "selection --trace-id "+req.TraceID) }) {
		t.Errorf("pprof comments %q do not name the selection", p.Comments)
	}
	out = filepath.Join(t.TempDir(), "uploads.pb.gz")
	mustRun(t, "pprof", "-o", out, "--span", analysistest.UploadSpan, path)
	if got := pprofTotal(t, pprofTop(t, out)); got != uploads {
		t.Errorf("pprof --span %q: go tool pprof counts %d samples, want %d", analysistest.UploadSpan, got, uploads)
	}
}

// TestSelectErrors checks that selectors that are malformed or match
// nothing fail clearly, in every command that takes them.
func TestSelectErrors(t *testing.T) {
	path, _, truth := requestsFile(t)
	items := truth.Spans[1]
	if items.Name != analysistest.ItemsSpan {
		t.Fatalf("second span %q, want %q", items.Name, analysistest.ItemsSpan)
	}
	legacy, _ := synthFile(t, "legacy.bin", true)
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--trace-id", "a000", path}, 2, `--trace-id "a000": want 32 hex digits`},
		{[]string{"--span-id", strings.Repeat("g", 16), path}, 2, `want 16 hex digits`},
		{[]string{"--slowest", "-1", path}, 2, `--slowest -1: want a positive number`},
		{[]string{"--span", "PUT /nothing", path}, 1,
			`no span matches --span "PUT /nothing" (the trace has 800 spans named "POST /upload", "GET /items", "db.query")`},
		{[]string{"--span-id", "ffffffffffffffff", path}, 1, `no span matches --span-id ffffffffffffffff`},
		// Every selector given must match: this items request is no upload.
		{[]string{"--span", analysistest.UploadSpan, "--trace-id", items.TraceID, path}, 1, `no span matches --span "POST /upload" --trace-id`},
		{[]string{"--span", analysistest.UploadSpan, legacy}, 1, `the trace has no span event`},
	}
	for _, cmd := range []string{"report", "folded", "pprof"} {
		for _, c := range cases {
			args := append([]string{cmd}, c.args...)
			var out string
			if cmd == "pprof" {
				out = filepath.Join(t.TempDir(), "out.pb.gz")
				args = append(args, "-o", out)
			}
			stdout, stderr, code := perfprof(t, args...)
			if code != c.code || !strings.Contains(stderr, c.msg) || !strings.HasPrefix(stderr, "perfprof "+cmd+": ") {
				t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", args, code, stderr, c.code, c.msg)
			}
			if c.code == 2 && !strings.Contains(stderr, "Usage: perfprof "+cmd) {
				t.Errorf("%v: usage error without the usage", args)
			}
			if stdout != "" {
				t.Errorf("%v: output on error: %q", args, stdout)
			}
			if out != "" {
				if _, err := os.Stat(out); err == nil {
					t.Errorf("%v: wrote %s on error", args, out)
				}
			}
		}
	}
}

// TestBreakdownLines checks the breakdown block where the files give no
// sample period (the on-CPU time is then unknown and says so) and where
// off-CPU samples have no thread state.
func TestBreakdownLines(t *testing.T) {
	var buf strings.Builder
	writeBreakdown(&buf, analysis.Breakdown{Spans: 2, Wall: 40_000_000, OffUnknown: 4_000_000, NotObserved: 36_000_000,
		OnSamples: 12, OffSamples: 3, OffStates: [3]int64{1, 2, 0}})
	want := `Breakdown: wall 40.000 ms over 2 span(s)
  on-CPU                sample period unknown (no perfprof.sample_period_ns in the files): 12 samples
  off-CPU blocked            0.000 ms   0.0%  (2 samples, no value_ns)
  off-CPU runnable           0.000 ms   0.0%  (0 samples)
  off-CPU unknown state      4.000 ms  10.0%  (1 samples)
  not observed              36.000 ms  90.0%  (includes the on-CPU time: the period is unknown)
Samples: 15 (on-CPU 12, off-CPU 3)
`
	if buf.String() != want {
		t.Errorf("breakdown:\n%s\nwant:\n%s", buf.String(), want)
	}
}
