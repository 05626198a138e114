package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/exporter/xexporter"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/perfprof/perfprof/exporter/tracefileexporter"
	"github.com/perfprof/perfprof/exporter/tracefileexporter/tracefiletest"
	"github.com/perfprof/perfprof/internal/convention"
)

// exported is what TestExporterFiles sends through the real exporter, and
// so what the CLI must find in the files.
type exported struct {
	onCPU, hot      int     // on-CPU samples, those whose leaf is app::hot
	hotShare        float64 // hot / onCPU
	blocked         int     // off-CPU blocked samples in a span
	blockedNs       int64
	runnableNs      []int64 // scheduling delays
	longPolls       int     // worker polls over 1 ms
	longPollSamples int     // on-CPU samples inside them
	checkoutSamples int     // on-CPU samples linked to a "poll checkout" span
}

// writeWithExporter builds profiles and spans as the perfprof receiver and
// an instrumented tokio service send them, and writes them into dir with
// the real tracefile exporter (format trc or tokiotrc).
func writeWithExporter(t *testing.T, dir, format string) exported {
	t.Helper()
	cfg := tracefileexporter.NewFactory().CreateDefaultConfig().(*tracefileexporter.Config)
	cfg.Directory, cfg.Format = dir, format
	cfg.MaxFileSize = 2 << 10 // spans and samples end up in different segments
	write := startExporter(t, cfg)

	var ex exported
	base := uint64(time.Now().UnixNano())
	traceID := pcommon.TraceID{7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7}
	spanID := func(i int) pcommon.SpanID {
		return pcommon.SpanID{0xaa, byte(i >> 16), byte(i >> 8), byte(i), 1, 2, 3, 4}
	}

	// 200 requests over 2 workers, 5 ms apart on each; a request is the
	// root span "GET /checkout" (thread span) with one poll inside it. Every
	// 4th poll lasts 3 ms (long), the others 0.5 ms.
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr(convention.ServiceName, "shop")
	rs.Resource().Attributes().PutInt(convention.ProcessPid, 777)
	spans := rs.ScopeSpans().AppendEmpty().Spans()
	type req struct {
		worker, tid   int
		start, pollNs uint64
		root, poll    pcommon.SpanID
	}
	var reqs []req
	for i := range 200 {
		r := req{worker: i % 2, tid: 100 + i%2, start: base + uint64(i/2)*5_000_000, pollNs: 500_000,
			root: spanID(2 * i), poll: spanID(2*i + 1)}
		if i%4 == 0 {
			r.pollNs = 3_000_000
			ex.longPolls++
		}
		reqs = append(reqs, r)
		root := spans.AppendEmpty()
		root.SetName("GET /checkout")
		root.SetTraceID(traceID)
		root.SetSpanID(r.root)
		root.SetStartTimestamp(pcommon.Timestamp(r.start))
		root.SetEndTimestamp(pcommon.Timestamp(r.start + 4_000_000))
		root.Attributes().PutInt(convention.ThreadID, int64(r.tid))
		poll := spans.AppendEmpty()
		poll.SetName("poll checkout")
		poll.SetTraceID(traceID)
		poll.SetSpanID(r.poll)
		poll.SetParentSpanID(r.root)
		poll.SetStartTimestamp(pcommon.Timestamp(r.start + 100_000))
		poll.SetEndTimestamp(pcommon.Timestamp(r.start + 100_000 + r.pollNs))
		poll.Attributes().PutInt(convention.ThreadID, int64(r.tid))
		poll.Attributes().PutInt(convention.WorkerID, int64(r.worker))
	}

	// Profiles: in every poll, one sample every 0.25 ms; the first sample of
	// each poll is in app::hot, the rest in app::parse. Between polls, the
	// worker runs tokio's park loop (not in a span). Off-CPU: each request
	// blocks once in futex_wait for 1 ms (inside its root span), and each
	// worker waits for a CPU with known delays.
	b := tracefiletest.NewProfBuilder()
	loc := func(addr uint64, name, file string, line int64) int32 {
		return b.Location(addr, tracefiletest.F(name, file, line))
	}
	mainL := loc(0x401000, "main", "src/main.rs", 5)
	runL := loc(0x402000, "tokio::runtime::worker::run", "tokio/src/worker.rs", 50)
	handleL := loc(0x403000, "app::handle", "src/app.rs", 10)
	hotL := loc(0x404000, "app::hot", "src/app.rs", 20)
	parseL := loc(0x405000, "app::parse", "src/parse.rs", 30)
	parkL := loc(0x406000, "tokio::park", "tokio/src/park.rs", 70)
	futexL := loc(0x407000, "futex_wait", "", 0)
	lockL := loc(0x408000, "app::lock", "src/app.rs", 40)
	hotS := b.Stack(hotL, handleL, runL, mainL)
	parseS := b.Stack(parseL, handleL, runL, mainL)
	parkS := b.Stack(parkL, runL, mainL)
	blockS := b.Stack(futexL, lockL, handleL, runL, mainL)
	preemptS := b.Stack(parseL, handleL, runL, mainL)
	on := b.Profile(777, "shop", false)
	on.SetPeriod(250_000)
	off := b.Profile(777, "shop", true)

	threadAttrs := func(r req) []int32 {
		return []int32{b.Attr(convention.ThreadID, r.tid), b.Attr(convention.ThreadName, fmt.Sprintf("tokio-rt-worker-%d", r.worker)),
			b.Attr(convention.WorkerID, r.worker), b.Attr(convention.RootName, "GET /checkout")}
	}
	add := func(p pprofile.Profile, st int32, r req, span pcommon.SpanID, extra []int32, ts uint64, v int64) {
		var link int32
		if !span.IsEmpty() {
			link = b.Link(traceID, span)
		}
		b.Sample(p, st, link, append(threadAttrs(r), extra...), []uint64{ts}, []int64{v})
	}
	for i, r := range reqs {
		pollStart := r.start + 100_000
		n := int(r.pollNs / 250_000)
		for k := range n {
			st := parseS
			if k == 0 {
				st = hotS
				ex.hot++
			}
			add(on, st, r, r.poll, nil, pollStart+uint64(k)*250_000+1000, 1)
			ex.onCPU++
			ex.checkoutSamples++
			if r.pollNs > 1_000_000 {
				ex.longPollSamples++
			}
		}
		// Park loop after the request, outside any span.
		for k := range 4 {
			add(on, parkS, r, pcommon.SpanID{}, nil, r.start+4_100_000+uint64(k)*200_000, 1)
			ex.onCPU++
		}
		// Blocked 1 ms in the lock, inside the root span.
		add(off, blockS, r, r.root, []int32{b.Attr(convention.ThreadState, convention.ThreadStateBlocked)}, r.start+3_000_000, 1_000_000)
		ex.blocked++
		ex.blockedNs += 1_000_000
		// Preempted while parsing: i × 10 µs waiting for a CPU.
		delay := int64(i+1) * 10_000
		add(off, preemptS, r, r.poll, []int32{b.Attr(convention.ThreadState, convention.ThreadStateRunnable)}, pollStart+50_000, delay)
		ex.runnableNs = append(ex.runnableNs, delay)
	}
	ex.hotShare = float64(ex.hot) / float64(ex.onCPU)
	write(td, b.Profiles)
	return ex
}

// startExporter starts a real tracefile exporter of cfg, for traces and
// profiles, as the collector does, before the caller takes its timestamps
// (the legacy format counts time from the exporter's start). write hands
// it spans, then profiles, and shuts it down.
func startExporter(t *testing.T, cfg *tracefileexporter.Config) (write func(ptrace.Traces, pprofile.Profiles)) {
	t.Helper()
	f := tracefileexporter.NewFactory()
	set := exportertest.NewNopSettings(f.Type())
	pe, err := f.(xexporter.Factory).CreateProfiles(t.Context(), set, cfg)
	if err != nil {
		t.Fatal(err)
	}
	te, err := f.CreateTraces(t.Context(), set, cfg)
	if err != nil {
		t.Fatal(err)
	}
	host := componenttest.NewNopHost()
	for _, c := range []component.Component{pe, te} {
		if err := c.Start(t.Context(), host); err != nil {
			t.Fatal(err)
		}
	}
	return func(td ptrace.Traces, pd pprofile.Profiles) {
		t.Helper()
		if err := te.ConsumeTraces(t.Context(), td); err != nil {
			t.Fatal(err)
		}
		if err := pe.ConsumeProfiles(t.Context(), pd); err != nil {
			t.Fatal(err)
		}
		for _, c := range []component.Component{te, pe} {
			if err := c.Shutdown(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestExporterFiles runs every command on segments written by the real
// tracefile exporter, in both formats, and checks the numbers against what
// was sent.
func TestExporterFiles(t *testing.T) {
	for _, format := range []string{tracefileexporter.FormatTRC, tracefileexporter.FormatTokioTRC} {
		t.Run(format, func(t *testing.T) {
			dir := t.TempDir()
			ex := writeWithExporter(t, dir, format)
			ents, _ := os.ReadDir(dir)
			if len(ents) < 2 {
				t.Fatalf("%d segments, want several", len(ents))
			}

			// folded: every on-CPU sample, identical stacks merged.
			sum, stacks := foldedSum(t, mustRun(t, "folded", dir))
			if sum != uint64(ex.onCPU) {
				t.Errorf("folded total %d, sent %d on-CPU samples", sum, ex.onCPU)
			}
			hotStack := "main;tokio::runtime::worker::run;app::handle;app::hot"
			if stacks[hotStack] != uint64(ex.hot) {
				t.Errorf("folded %q = %d, want %d (stacks %v)", hotStack, stacks[hotStack], ex.hot, stacks)
			}

			// report: SELF% of app::hot within ±2 points of the true share.
			rep := mustRun(t, "report", dir)
			self := selfPercent(t, rep, "app::hot")
			if math.Abs(self-100*ex.hotShare) > 2 {
				t.Errorf("app::hot SELF %.2f%%, true share %.2f%%", self, 100*ex.hotShare)
			}
			m := regexp.MustCompile(`Long polls \(> 1ms\): (\d+) of (\d+) polls`).FindStringSubmatch(rep)
			if m == nil || m[1] != strconv.Itoa(ex.longPolls) || m[2] != "200" {
				t.Errorf("long polls: %v, want %d of 200", m, ex.longPolls)
			}
			if format == tracefileexporter.FormatTRC {
				for _, want := range []string{"GET /checkout", "poll checkout", "service=shop"} {
					if !strings.Contains(rep, want) {
						t.Errorf("report lacks %q", want)
					}
				}
				m = regexp.MustCompile(`Blocking stacks .*: (\d+) samples`).FindStringSubmatch(rep)
				if m == nil || m[1] != strconv.Itoa(ex.blocked) {
					t.Errorf("blocking samples %v, want %d", m, ex.blocked)
				}
				// Delays are 10 µs … 2 ms in steps of 10 µs: p50 ≈ 1 ms.
				m = regexp.MustCompile(`n=(\d+) p50=(\S+) p99=(\S+)`).FindStringSubmatch(rep)
				if m == nil || m[1] != strconv.Itoa(len(ex.runnableNs)) {
					t.Fatalf("scheduling delay line %v, want n=%d:\n%s", m, len(ex.runnableNs), rep)
				}
				p50, err := time.ParseDuration(m[2])
				if err != nil || p50 < 990*time.Microsecond || p50 > 1020*time.Microsecond {
					t.Errorf("scheduling delay p50 %s, want 1ms ± 20µs", m[2])
				}
			}

			// Selections: every request with the time of its children; the
			// legacy format carries no spans, so a selector finds none.
			if format == tracefileexporter.FormatTRC {
				checkExporterSelection(t, dir, ex)
			} else if _, errs, code := perfprof(t, "report", "--span", "GET /checkout", dir); code != 1 ||
				!strings.Contains(errs, "the trace has no span event") {
				t.Errorf("--span on %s: exit %d, %q", format, code, errs)
			}

			// pprof: opens with go tool pprof and matches the folded totals.
			out := filepath.Join(t.TempDir(), "out.pb.gz")
			mustRun(t, "pprof", dir, "-o", out)
			if got := pprofTotal(t, pprofTop(t, out)); got != ex.onCPU {
				t.Errorf("pprof total %d, folded %d", got, ex.onCPU)
			}
			p := readProfile(t, out)
			spans := map[string]int64{}
			for _, s := range p.Sample {
				for _, n := range s.Label["span"] {
					spans[n] += s.Value[0]
				}
			}
			if format == tracefileexporter.FormatTRC && spans["poll checkout"] != int64(ex.checkoutSamples) {
				t.Errorf("pprof samples labelled span=poll checkout: %d, want %d (%v)", spans["poll checkout"], ex.checkoutSamples, spans)
			}

			// dump and html run on it too.
			lines := strings.Count(mustRun(t, "dump", "--kinds", "CpuSampleEvent", dir), "\n")
			if want := ex.onCPU + ex.blocked + len(ex.runnableNs); lines != want {
				t.Errorf("dump: %d CpuSampleEvent lines, want %d", lines, want)
			}
			html := filepath.Join(t.TempDir(), "out.html")
			mustRun(t, "html", dir, "-o", html)
			if fi, err := os.Stat(html); err != nil || fi.Size() < 10_000 {
				t.Errorf("html output: %v", err)
			}
		})
	}
}

// selfPercent reads the SELF% of fn in the report's first function table.
func selfPercent(t *testing.T, rep, fn string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^\s+([\d.]+)%\s+\d+\s+[\d.]+%\s+\d+\s+` + regexp.QuoteMeta(fn) + `$`)
	m := re.FindStringSubmatch(rep)
	if m == nil {
		t.Fatalf("no SELF%% line for %s in:\n%s", fn, rep)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// checkExporterSelection checks the breakdown of all requests ("GET
// /checkout", 4 ms each, with a "poll checkout" child) against what
// writeWithExporter sent: the children's on-CPU and runnable samples count
// for their requests, the park loop between requests (in no span) does not.
func checkExporterSelection(t *testing.T, dir string, ex exported) {
	t.Helper()
	const period = 250_000
	var runnable uint64
	for _, v := range ex.runnableNs {
		runnable += uint64(v)
	}
	wall := uint64(200 * 4_000_000)
	on := uint64(ex.checkoutSamples) * period
	notObs := wall - on - uint64(ex.blockedNs) - runnable
	rep := mustRun(t, "report", "--span", "GET /checkout", dir)
	got := parseBreakdown(t, rep)
	want := breakdownOut{wall: msStr(wall), spans: 200,
		on: msStr(on), onPct: pctStr(on, wall), onN: ex.checkoutSamples, period: msStr(period),
		blocked: msStr(uint64(ex.blockedNs)), blockedPct: pctStr(uint64(ex.blockedNs), wall), blockedN: ex.blocked,
		runnable: msStr(runnable), runnablePct: pctStr(runnable, wall), runnableN: len(ex.runnableNs),
		notObs: msStr(notObs), notObsPct: pctStr(notObs, wall),
		samples: ex.checkoutSamples + ex.blocked + len(ex.runnableNs), onSamples: ex.checkoutSamples,
		offSamples: ex.blocked + len(ex.runnableNs)}
	if got != want {
		t.Errorf("--span \"GET /checkout\":\n got %+v\nwant %+v", got, want)
	}
	if sum, _ := foldedSum(t, mustRun(t, "folded", "--span", "poll checkout", dir)); sum != uint64(ex.checkoutSamples) {
		t.Errorf("folded --span \"poll checkout\": %d samples, want %d", sum, ex.checkoutSamples)
	}
}
