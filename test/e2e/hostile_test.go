package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/testchild"
)

// Bounds of TestHostileTargets.
const (
	hostileReport = 2 * time.Second  // report_interval
	hostileWindow = 10 * time.Second // correlation.window, the default
	// hostileMaxGap bounds the time between two profiles of the normal
	// target: a report that waits behind a hostile target's file or
	// reply shows here.
	hostileMaxGap = 3 * hostileReport
	// hostileMaxRSS bounds the collector's RSS through the run: 100 000
	// far-future spans, a 1.8 MB forged DWARF unit, attach replies that
	// never end. It runs at about 50 MiB without them.
	hostileMaxRSS = 256 << 20
	// hostileShutdown bounds the collector's exit after SIGTERM.
	hostileShutdown = 10 * time.Second
	// hostileSpans far-future spans are sent, half with the normal
	// target's pid and half with none, all on its threads.
	hostileSpans = 100_000
	// The normal target's samples in its span functions linked, and
	// linked to the span that wraps the function.
	hostileLinked    = 0.90
	hostileRightSpan = 0.95
)

// TestHostileTargets profiles a normal target (the spanner: worker
// threads in spans sent over OTLP) beside targets and a client that try
// every trick of issue 27 at once:
//
//   - hostile (internal/testchild/hostile): runs JIT code whose perf map
//     is a FIFO; looks like a JVM (maps a libjvm.so) and answers the
//     attach protocol with an endless stream; its DWARF nests 100 000
//     lexical blocks in the function it burns CPU in, its symbol table is
//     stripped and its debug link leads to /dev/zero and to a FIFO;
//   - a Go program whose runtime.g, runtime.m and label map are of a
//     typedef that is its own type (debug/dwarf recurses on it until the
//     stack overflows, which no recover catches);
//   - an OTLP client sending 100 000 spans that end an hour from now on the
//     normal target's threads, half of them naming its pid and half no
//     process.
//
// The normal target's profiles must keep coming every report, its
// samples linked to its own spans; every trick must be counted; the
// collector's RSS must stay under hostileMaxRSS, and it must exit within
// hostileShutdown of SIGTERM.
//
// The hostile C target runs on the host, then in a container of its own
// (pid and mount namespaces, cgroups), as a per-node collector meets it:
// there its perf map, debug files and attach socket are found through its
// root and by the pid it has in its namespace.
func TestHostileTargets(t *testing.T) {
	requirePerf(t)
	t.Run("host", func(t *testing.T) { testHostile(t, false) })
	t.Run("container", func(t *testing.T) { testHostile(t, true) })
}

func testHostile(t *testing.T, contained bool) {
	hostileBin, libjvm := testchild.Hostile(t)
	dir := t.TempDir()
	spanner := copyBinary(t, testchild.Build(t, "spanner"), dir, "spanner")
	forgedGo := testchild.ForgedGo(t, fmt.Sprintf("forged-go-%d", os.Getpid()))

	profiles, spans, sinkAddr := startDeploySink(t)
	spansAddr, metricsAddr := freeAddr(t), freeAddr(t)
	config := fmt.Sprintf(`receivers:
  perfprof:
    targets: {executables: [%s, %s, %s]}
    report_interval: %s
    jvm: {perf_map: true, refresh_interval: 100ms}
    protocols:
      grpc: {endpoint: %s}
`, spanner, hostileBin, forgedGo, hostileReport, spansAddr) + sinkPipelines(sinkAddr, metricsAddr)
	cmd, out := runCollector(t, config, nil)
	waitFor(t, out, "Everything is ready", 20*time.Second)

	// The RSS through the run, every 200 ms.
	var rssMu sync.Mutex
	var maxRSS int64
	stopRSS := make(chan struct{})
	rssDone := make(chan struct{})
	go func() {
		defer close(rssDone)
		for {
			if rss := vmRSS(cmd.Process.Pid); rss > 0 {
				rssMu.Lock()
				maxRSS = max(maxRSS, rss)
				rssMu.Unlock()
			}
			select {
			case <-stopRSS:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()

	normal := testchild.Start(t, spanner, "-workers", "2", "-duration", "0", "-wait", "5ms", "-late", "500ms", "-endpoint", spansAddr)
	var hostile *testchild.Child
	if contained {
		c := testchild.StartContainer(t, testchild.ContainerSpec{}, hostileBin, libjvm)
		c.AwaitReady(t)
		hostile = c.Child
	} else {
		hostile = testchild.Start(t, hostileBin, libjvm)
	}
	t.Cleanup(func() {
		// Named by its pid in its own namespace, in the /tmp it shares.
		os.Remove(fmt.Sprintf("/tmp/perf-%d.map", hostile.Ready[0]))
		os.Remove(fmt.Sprintf("/tmp/.java_pid%d", hostile.Ready[0]))
	})
	goForger := testchild.Start(t, forgedGo, "-alpha", "0.3", "-beta", "0", "-duration", "2m")
	for deadline := time.Now().Add(20 * time.Second); strings.Count(out.String(), "Sampling process") < 3; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the collector did not attach its three targets within 20 s")
		}
	}
	attached := time.Now()

	// When each profile of the normal target arrived.
	var arrivals []time.Time
	stopWatch := make(chan struct{})
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		last := 0
		for {
			profiles.mu.Lock()
			n := profiles.pids[int64(normal.Pid)]
			profiles.mu.Unlock()
			if n > last {
				arrivals = append(arrivals, time.Now())
				last = n
			}
			select {
			case <-stopWatch:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()

	forgedTrace := sendFarFutureSpans(t, spansAddr, normal)
	time.Sleep(hostileWindow + 20*time.Second)
	end := time.Now()
	m := mustScrape(t, "http://"+metricsAddr+"/metrics")

	// Shutdown, timed.
	close(stopWatch)
	<-watchDone
	if err := syscall.Kill(normal.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	normal.Line(t, 15*time.Second) // "done ..."
	stopAt := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("the collector did not exit cleanly: %v", err)
		}
	case <-time.After(hostileShutdown):
		t.Errorf("the collector did not exit within %v of SIGTERM", hostileShutdown)
	}
	took := time.Since(stopAt)
	close(stopRSS)
	<-rssDone

	// Reports on time: the first once its samples have waited the
	// correlation window (10 s), then one every report_interval.
	if len(arrivals) == 0 || arrivals[0].Sub(attached) > hostileWindow+hostileMaxGap {
		t.Fatalf("no profile of the normal target within %v of its attach", hostileWindow+hostileMaxGap)
	}
	var gaps []time.Duration
	for i := 1; i < len(arrivals); i++ {
		gaps = append(gaps, arrivals[i].Sub(arrivals[i-1]))
	}
	gaps = append(gaps, end.Sub(arrivals[len(arrivals)-1]))
	maxGap := slices.Max(gaps)
	t.Logf("the normal target's profiles: the first %v after its attach, then %d in %v, the longest gap %v",
		arrivals[0].Sub(attached).Round(time.Millisecond), len(gaps)-1, end.Sub(arrivals[0]).Round(time.Second), maxGap.Round(time.Millisecond))
	if maxGap > hostileMaxGap || len(gaps) < int(end.Sub(arrivals[0])/hostileReport)-1 {
		t.Errorf("the normal target's profiles came %d times in %v, the longest gap %v (report_interval %v, bound %v)",
			len(gaps)-1, end.Sub(arrivals[0]).Round(time.Second), maxGap.Round(time.Millisecond), hostileReport, hostileMaxGap)
	}
	// The fake JVM was asked once: a reply that reached a bound is not
	// asked for again, and the exec that made the image discovery found,
	// read after the attach (in a container, the launcher's exec into the
	// target), is not a new image to ask.
	asks := 0
	for len(hostile.Lines()) > 0 {
		if strings.HasPrefix(<-hostile.Lines(), "attach ") {
			asks++
		}
	}
	if asks != 1 {
		t.Errorf("the fake JVM was asked %d times, want once", asks)
	}

	// Links intact.
	profiles.mu.Lock()
	spans.mu.Lock()
	var inSpans, linked, right, forged, hostileSamples, goSamples int
	for _, st := range profiles.stacks {
		if st.linked && st.trace == pcommon.TraceID(forgedTrace) {
			forged += len(st.times)
		}
		switch st.pid {
		case int64(hostile.Pid):
			hostileSamples += len(st.times)
		case int64(goForger.Pid):
			goSamples += len(st.times)
		case int64(normal.Pid):
			for fn, name := range spanFunctions {
				if !st.functions[fn] {
					continue
				}
				inSpans += len(st.times)
				if st.linked {
					linked += len(st.times)
					if spans.spans[st.span].name == name {
						right += len(st.times)
					}
				}
			}
		}
	}
	spans.mu.Unlock()
	profiles.mu.Unlock()
	t.Logf("normal target: %d samples in its span functions, %d linked, %d to the right span; %d samples linked to a forged span; hostile %d samples, forged Go %d",
		inSpans, linked, right, forged, hostileSamples, goSamples)
	if inSpans == 0 || float64(linked) < hostileLinked*float64(inSpans) || float64(right) < hostileRightSpan*float64(linked) {
		t.Errorf("the normal target's samples in spans: %d, linked %d (want ≥ %.0f%%), to the right span %d (want ≥ %.0f%% of the linked)",
			inSpans, linked, 100*hostileLinked, right, 100*hostileRightSpan)
	}
	if forged > 0 {
		t.Errorf("%d samples linked to a far-future span", forged)
	}
	if hostileSamples == 0 || goSamples == 0 {
		t.Errorf("the hostile targets were not profiled (%d and %d samples): their data must lose its symbols, not the process its profile", hostileSamples, goSamples)
	}

	// Every trick counted.
	limits := m.by("otelcol_receiver_perfprof_target_limits", "bound")
	t.Logf("bounds reached: %v; spans: %v", limits, spanOutcomes(m))
	// Once each, but the files refused: the perf map FIFO, and the debug
	// link's /dev/zero and FIFO, looked for in the target's root and ours.
	if limits["file_refused"] < 3 {
		t.Errorf("target_limits{bound=\"file_refused\"} = %d, want at least 3", limits["file_refused"])
	}
	for bound, want := range map[string]int64{
		"dwarf_depth":  1,
		"type_cycle":   1,
		"attach_reply": int64(asks),
		"span_future":  hostileSpans,
	} {
		if limits[bound] != want {
			t.Errorf("target_limits{bound=%q} = %d, want %d", bound, limits[bound], want)
		}
	}
	if n := m.sum("otelcol_receiver_perfprof_spans", "outcome", "future"); n != hostileSpans {
		t.Errorf("spans{outcome=future} = %d, want %d", n, hostileSpans)
	}

	rssMu.Lock()
	defer rssMu.Unlock()
	t.Logf("collector: peak RSS %.1f MiB, exit %v after SIGTERM", float64(maxRSS)/(1<<20), took.Round(time.Millisecond))
	if maxRSS > hostileMaxRSS {
		t.Errorf("the collector's RSS reached %.1f MiB, bound %d MiB", float64(maxRSS)/(1<<20), hostileMaxRSS>>20)
	}
}

// sendFarFutureSpans sends hostileSpans spans over OTLP that end an hour
// from now, on the threads of the spanner normal: half name its pid, half
// no process. It returns their trace id.
func sendFarFutureSpans(t *testing.T, addr string, normal *testchild.Child) trace.TraceID {
	t.Helper()
	ctx := context.Background()
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(addr), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Shutdown(ctx)
	withPid := resource.NewSchemaless(attribute.String(convention.ServiceName, "forger"), attribute.Int(convention.ProcessPid, normal.Pid))
	noPid := resource.NewSchemaless(attribute.String(convention.ServiceName, "forger"))
	tids := normal.Ready[1:]
	var traceID trace.TraceID
	copy(traceID[:], "forged-trace-id!")
	now := time.Now()
	const batch = 1000
	for sent := 0; sent < hostileSpans; sent += batch {
		stubs := make(tracetest.SpanStubs, batch)
		for i := range stubs {
			n := sent + i
			var sid trace.SpanID
			binary.BigEndian.PutUint64(sid[:], uint64(n+1))
			res := withPid
			if n%2 == 1 {
				res = noPid
			}
			stubs[i] = tracetest.SpanStub{
				Name:        "forged",
				SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: sid, TraceFlags: trace.FlagsSampled}),
				StartTime:   now.Add(-time.Second),
				EndTime:     now.Add(time.Hour),
				Attributes:  []attribute.KeyValue{attribute.Int(convention.ThreadID, tids[n%len(tids)])},
				Resource:    res,
			}
		}
		if err := exp.ExportSpans(ctx, stubs.Snapshots()); err != nil {
			t.Fatalf("send far-future spans: %v", err)
		}
	}
	return traceID
}

// vmRSS returns the resident set of pid in bytes, 0 if it cannot be read.
func vmRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return kb << 10
		}
	}
	return 0
}
