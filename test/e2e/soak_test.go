package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/perfprof/perfprof/internal/testchild"
)

// The soak test: the collector under a steady load for a while, watched
// from outside as an SRE watches a sidecar, and its books balanced at the
// end. `make test` runs it for 3 minutes; `make soak` for 30
// (PERFPROF_SOAK_DURATION).
//
// Load: spangen, 8 threads ending 5 000 spans/s (OTel Go SDK, OTLP/gRPC)
// with thread.id, each span burning CPU; the collector samples them at
// 999 Hz with off-CPU capture, writes everything into rotating trace files
// with retention, and exports everything over OTLP/gRPC to a sink that
// stalls for 60 s in the middle of the run.
const (
	soakThreads = 8
	soakRate    = 5000
	soakStall   = 60 * time.Second
	// soakMaxRSS bounds the collector's RSS in any run: about twice what
	// the 30-minute runs settle at (188 MiB).
	soakMaxRSS = 384 << 20
)

// soakSink is an OTLP/gRPC traces and profiles endpoint that can stall: a
// request that arrives during a stall is held until the client gives up,
// so that it is never both counted here and retried by the client.
type soakSink struct {
	ptraceotlp.UnimplementedGRPCServer
	profiles soakProfiles
	stalled  atomic.Bool
	resume   chan struct{} // closed when a stall ends
	mu       sync.Mutex
	spans    int64
	samples  int64 // pprofile Sample records
	values   int64 // their timestamps: the receiver's samples
	held     int64 // requests held by a stall
}

type soakProfiles struct {
	pprofileotlp.UnimplementedGRPCServer
	s *soakSink
}

func (s *soakSink) setStall(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on && !s.stalled.Load() {
		s.resume = make(chan struct{})
		s.stalled.Store(true)
	} else if !on && s.stalled.Load() {
		close(s.resume)
		s.stalled.Store(false)
	}
}

// hold blocks a request for the rest of a stall: it reports whether the
// request must fail (it arrived during a stall).
func (s *soakSink) hold(ctx context.Context) bool {
	s.mu.Lock()
	stalled, resume := s.stalled.Load(), s.resume
	if stalled {
		s.held++
	}
	s.mu.Unlock()
	if !stalled {
		return false
	}
	select {
	case <-ctx.Done():
	case <-resume:
	}
	return true
}

func (s *soakSink) Export(ctx context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	if s.hold(ctx) {
		return ptraceotlp.NewExportResponse(), status.Error(codes.Unavailable, "soak sink: stalled")
	}
	s.mu.Lock()
	s.spans += int64(req.Traces().SpanCount())
	s.mu.Unlock()
	return ptraceotlp.NewExportResponse(), nil
}

func (p *soakProfiles) Export(ctx context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	if p.s.hold(ctx) {
		return pprofileotlp.NewExportResponse(), status.Error(codes.Unavailable, "soak sink: stalled")
	}
	p.s.mu.Lock()
	p.s.samples += int64(req.Profiles().SampleCount())
	rps := req.Profiles().ResourceProfiles()
	for i := 0; i < rps.Len(); i++ {
		sps := rps.At(i).ScopeProfiles()
		for j := 0; j < sps.Len(); j++ {
			ps := sps.At(j).Profiles()
			for k := 0; k < ps.Len(); k++ {
				ss := ps.At(k).Samples()
				for l := 0; l < ss.Len(); l++ {
					p.s.values += int64(max(ss.At(l).TimestampsUnixNano().Len(), 1))
				}
			}
		}
	}
	p.s.mu.Unlock()
	return pprofileotlp.NewExportResponse(), nil
}

func (s *soakSink) counts() (spans, samples, values, held int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.spans, s.samples, s.values, s.held
}

func startSoakSink(t *testing.T) (*soakSink, string) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &soakSink{}
	s.profiles.s = s
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(64 << 20))
	ptraceotlp.RegisterGRPCServer(srv, s)
	pprofileotlp.RegisterGRPCServer(srv, &s.profiles)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { s.setStall(false); srv.Stop() })
	return s, lis.Addr().String()
}

// soakConfig: the receiver on spangen, everything into trace files and
// the sink; the collector's own metrics and pprof on loopback ports.
const soakConfig = `receivers:
  perfprof:
    targets: {executables: [%[6]s]}
    frequency: 999
    report_interval: 1s
    protocols:
      grpc: {endpoint: %[1]s}
    correlation: {window: 3s}
exporters:
  tracefile:
    directory: %[2]s
    rotation_interval: 5s
    max_file_size: 16MiB
    max_total_size: 64MiB
  otlp_grpc/sink:
    endpoint: %[3]s
    tls: {insecure: true}
    timeout: 2s
    # 4 MiB: the stall overflows it, and the drops must be counted
    sending_queue: {sizer: bytes, queue_size: 4194304, num_consumers: 2}
extensions:
  pprof: {endpoint: %[4]s}
service:
  extensions: [pprof]
  telemetry:
    logs: {level: info}
    metrics:
      level: detailed
      readers:
        - pull:
            exporter:
              prometheus: {host: 127.0.0.1, port: %[5]s, without_scope_info: true, without_units: true, without_type_suffix: true}
  pipelines:
    traces: {receivers: [perfprof], exporters: [tracefile, otlp_grpc/sink]}
    profiles: {receivers: [perfprof], exporters: [tracefile, otlp_grpc/sink]}
`

// series is one scraped Prometheus sample.
type series struct {
	name   string
	labels map[string]string
	value  float64
}

// metrics is one scrape of the collector's telemetry.
type metrics []series

// sum adds the series named name whose labels include every pair of kv.
func (m metrics) sum(name string, kv ...string) int64 {
	var s float64
next:
	for _, x := range m {
		if x.name != name {
			continue
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if x.labels[kv[i]] != kv[i+1] {
				continue next
			}
		}
		s += x.value
	}
	return int64(math.Round(s))
}

// by returns the values of the series named name by the value of label.
func (m metrics) by(name, label string) map[string]int64 {
	out := map[string]int64{}
	for _, x := range m {
		if x.name == name {
			out[x.labels[label]] += int64(math.Round(x.value))
		}
	}
	return out
}

// mustScrape is scrapeProm for a test that cannot go on without it.
func mustScrape(t *testing.T, url string) metrics {
	t.Helper()
	m, err := scrapeProm(url)
	if err != nil {
		t.Fatalf("scrape the collector's metrics: %v", err)
	}
	return m
}

func scrapeProm(url string) (metrics, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	var out metrics
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		x := series{labels: map[string]string{}}
		rest := line
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			x.name = line[:i]
			for _, kv := range splitLabels(line[i+1 : j]) {
				if k, v, ok := strings.Cut(kv, "="); ok {
					x.labels[k], _ = strconv.Unquote(v)
				}
			}
			rest = strings.TrimSpace(line[j+1:])
		} else {
			x.name, rest, _ = strings.Cut(line, " ")
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		if x.value, err = strconv.ParseFloat(f[0], 64); err != nil {
			return nil, fmt.Errorf("scrape %s: %q: %w", url, line, err)
		}
		out = append(out, x)
	}
	return out, sc.Err()
}

// splitLabels splits `a="x",b="y,z"` at the commas outside quotes.
func splitLabels(s string) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// procSample is what the test reads of the collector process at one time.
type procSample struct {
	at         time.Duration // since the load started
	rss        int64         // bytes
	fds        int
	goroutines int
	cpu        time.Duration // user + system, cumulative
	heap       int64         // Go heap in use
	samples    int64         // receiver_perfprof_samples, cumulative
	spans      int64         // otelcol_receiver_accepted_spans, cumulative
}

func readProc(pid int, pprofURL string) (procSample, error) {
	var p procSample
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return p, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			p.rss = kb << 10
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return p, err
	}
	p.fds = len(fds)
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return p, err
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	p.cpu = time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ is 100 on Linux
	resp, err := http.Get(pprofURL + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return p, err
	}
	defer resp.Body.Close()
	first, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil && err != io.EOF {
		return p, err
	}
	if _, err := fmt.Sscanf(first, "goroutine profile: total %d", &p.goroutines); err != nil {
		return p, fmt.Errorf("goroutine profile %q: %w", first, err)
	}
	return p, nil
}

// saveHeap writes the collector's heap profile (and, beside it, the
// runtime's memory statistics) to dir and returns the live heap it
// reports: what the last garbage collection kept. make soak keeps them in
// PERFPROF_SOAK_PROFILES, when set, so a change in RSS can be read as live
// heap, heap the runtime keeps, or neither:
// `go tool pprof -diff_base 1-before-stall.pb.gz 3-end.pb.gz`.
func saveHeap(t *testing.T, dir, pprofURL, name string) int64 {
	var live int64
	for _, f := range []struct{ query, ext string }{{"", ".pb.gz"}, {"?debug=1", ".txt"}} {
		resp, err := http.Get(pprofURL + "/debug/pprof/heap" + f.query)
		if err != nil {
			t.Fatalf("heap profile %s: %v", name, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name+f.ext), b, 0o644)
		}
		if err != nil {
			t.Fatalf("heap profile %s: %v", name, err)
		}
		if f.ext != ".pb.gz" {
			continue
		}
		p, err := profile.ParseData(b)
		if err != nil {
			t.Fatalf("heap profile %s: %v", name, err)
		}
		k := slices.IndexFunc(p.SampleType, func(st *profile.ValueType) bool { return st.Type == "inuse_space" })
		if k < 0 {
			t.Fatalf("heap profile %s has no inuse_space", name)
		}
		for _, smp := range p.Sample {
			live += smp.Value[k]
		}
	}
	t.Logf("soak: heap profile %s: %.1f MiB live, written to %s", name, float64(live)/(1<<20), dir)
	return live
}

// checkLiveHeap holds the live heap at the end to what it was before the
// stall: memory the stall left held (the queue's batches, a retry's
// buffers) would show here, where RSS cannot tell it from pages the
// runtime keeps. The short run's "before" is still inside the warm-up,
// so it gets more room.
func checkLiveHeap(t *testing.T, dur time.Duration, before, end int64) {
	bound := 1.15
	if dur < 20*time.Minute {
		bound = 1.5
	}
	t.Logf("soak: live heap %.1f MiB before the stall, %.1f MiB at the end (%+.1f%%)",
		float64(before)/(1<<20), float64(end)/(1<<20), 100*(float64(end)/float64(before)-1))
	if float64(end) > bound*float64(before) {
		t.Errorf("live heap grew from %.1f MiB before the stall to %.1f MiB at the end, over %+.0f%%",
			float64(before)/(1<<20), float64(end)/(1<<20), 100*(bound-1))
	}
}

func soakDuration(t *testing.T) time.Duration {
	d := 3 * time.Minute
	if s := os.Getenv("PERFPROF_SOAK_DURATION"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil || d < 3*time.Minute {
			t.Fatalf("PERFPROF_SOAK_DURATION=%q: want a duration of at least 3m", s)
		}
	}
	return d
}

// TestSoak runs the collector under the soak load for PERFPROF_SOAK_DURATION
// (3 minutes by default) and checks that it stays flat and loses nothing it
// does not count:
//   - after a warm-up and outside the stall, RSS stays within ±10% of its
//     median (+25% in the stall, which fills the exporter's queue) with no upward
//     trend, goroutines and open fds stay flat, and the collector's CPU per
//     1 000 samples stays steady;
//   - the sink's 60 s stall is survived: the exporter's queue overflows,
//     every item it could not keep is counted, and the sink receives again
//     after it;
//   - the books balance exactly: every span the generator's SDK had
//     acknowledged was accepted, every span and sample the receiver handed
//     on is, for each exporter, sent, failed or refused by its queue, and
//     every sample read from the kernel was emitted or counted as dropped.
func TestSoak(t *testing.T) {
	requirePerf(t)
	dur := soakDuration(t)
	stallAt := dur/2 - soakStall/2
	interval := 5 * time.Second
	if dur > 10*time.Minute {
		interval = 10 * time.Second
	}
	warmup := 30 * time.Second
	if dur/6 > warmup {
		warmup = dur / 6
	}

	gen := testchild.Build(t, "spangen")
	sink, sinkAddr := startSoakSink(t)
	spansAddr, pprofAddr := freeAddr(t), freeAddr(t)
	_, promPort, _ := net.SplitHostPort(freeAddr(t))
	traceDir := t.TempDir()
	cfg := fmt.Sprintf(soakConfig, spansAddr, traceDir, sinkAddr, pprofAddr, promPort, filepath.Base(gen))
	col, out := runCollector(t, cfg, nil)
	waitFor(t, out, "Receiving spans over OTLP/gRPC", 20*time.Second)
	pid := col.Process.Pid
	promURL := "http://127.0.0.1:" + promPort + "/metrics"
	pprofURL := "http://" + pprofAddr

	cmd, stdout, genErr := startSpangen(t, gen, "-threads", strconv.Itoa(soakThreads), "-rate", strconv.Itoa(soakRate),
		"-duration", dur.String(), "-endpoint", spansAddr)
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "ready ") {
		t.Fatalf("spangen did not start: %q %s", lines.Text(), genErr.String())
	}
	start := time.Now()
	t.Logf("soak: %v of %d spans/s on %d threads at 999 Hz; sink stalls from %v to %v", dur, soakRate, soakThreads, stallAt, stallAt+soakStall)

	// Watch the collector every interval while the load runs.
	var watch []procSample
	tick := time.NewTicker(interval)
	defer tick.Stop()
	stallOn, stallOff := time.After(stallAt), time.After(stallAt+soakStall)
	var stallSeen metrics // a scrape at the end of the stall
	var liveBefore int64
	heapDir := os.Getenv("PERFPROF_SOAK_PROFILES")
	if heapDir == "" {
		heapDir = t.TempDir()
	}
	for time.Since(start) < dur {
		select {
		case <-stallOn:
			liveBefore = saveHeap(t, heapDir, pprofURL, "1-before-stall")
			sink.setStall(true)
			t.Logf("soak: %v: the sink stalls", time.Since(start).Round(time.Second))
			continue
		case <-stallOff:
			stallSeen, _ = scrapeProm(promURL)
			saveHeap(t, heapDir, pprofURL, "2-end-of-stall")
			sink.setStall(false)
			t.Logf("soak: %v: the sink is back", time.Since(start).Round(time.Second))
			continue
		case <-tick.C:
		}
		p, err := readProc(pid, pprofURL)
		if err != nil {
			t.Fatalf("read the collector at %v: %v\n%s", time.Since(start), err, out.String())
		}
		m, err := scrapeProm(promURL)
		if err != nil {
			t.Fatal(err)
		}
		p.at = time.Since(start)
		p.samples = m.sum("otelcol_receiver_perfprof_samples")
		p.spans = m.sum("otelcol_receiver_accepted_spans", "receiver", "perfprof")
		p.heap = m.sum("otelcol_process_runtime_heap_alloc_bytes")
		watch = append(watch, p)
		t.Logf("soak: %6v rss %5.1f MiB  heap %5.1f MiB  goroutines %4d  fds %3d  cpu %6.1fs  samples %8d  spans %9d  sink queue %3d",
			p.at.Round(time.Second), float64(p.rss)/(1<<20), float64(p.heap)/(1<<20), p.goroutines, p.fds, p.cpu.Seconds(), p.samples, p.spans,
			m.sum("otelcol_exporter_queue_size", "exporter", "otlp_grpc/sink"))
	}

	liveEnd := saveHeap(t, heapDir, pprofURL, "3-end")

	// The generator flushes and exits; then the collector's books settle:
	// the correlation window passes, the queues drain.
	var done string
	for lines.Scan() {
		if strings.HasPrefix(lines.Text(), "done ") {
			done = lines.Text()
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("spangen: %v\n%s", err, genErr.String())
	}
	var ended, exported, failed int64
	if _, err := fmt.Sscanf(done, "done %d %d %d", &ended, &exported, &failed); err != nil {
		t.Fatalf("spangen's last line %q: %v\n%s", done, err, genErr.String())
	}
	final := settle(t, promURL)
	sinkSpans, sinkSamples, sinkValues, held := sink.counts()

	checkFlat(t, watch, dur, warmup, stallAt, stallAt+soakStall+30*time.Second)
	checkLiveHeap(t, dur, liveBefore, liveEnd)
	reconcile(t, final, stallSeen, ended, exported, failed, sinkSpans, sinkSamples, sinkValues, held)
	// A clean shutdown seals the active segment.
	_ = col.Process.Signal(syscall.SIGTERM)
	exited := make(chan error, 1)
	go func() { exited <- col.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("collector shutdown: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("the collector did not stop within 30 s of SIGTERM")
	}
	checkSegments(t, traceDir)
}

// settle scrapes until the counters stop moving and nothing waits in an
// exporter's queue (at most 2 minutes: the sink exporter's retries back
// off for up to 30 s after the stall).
func settle(t *testing.T, url string) metrics {
	deadline := time.Now().Add(2 * time.Minute)
	var last metrics
	key := func(m metrics) string {
		return fmt.Sprint(m.sum("otelcol_receiver_perfprof_samples"), m.sum("otelcol_receiver_perfprof_emitted_samples"),
			m.sum("otelcol_exporter_sent_profile_samples"), m.sum("otelcol_exporter_sent_spans"),
			m.sum("otelcol_exporter_send_failed_spans"), m.sum("otelcol_exporter_send_failed_profile_samples"))
	}
	for time.Now().Before(deadline) {
		time.Sleep(5 * time.Second)
		m, err := scrapeProm(url)
		if err != nil {
			t.Fatal(err)
		}
		if last != nil && key(m) == key(last) && m.sum("otelcol_exporter_queue_size") == 0 &&
			m.sum("otelcol_exporter_in_flight_requests") == 0 {
			return m
		}
		last = m
	}
	t.Fatalf("the collector's counters did not settle within 2 minutes of the load's end")
	return nil
}

// checkFlat judges the watch after the warm-up. Goroutines and fds are
// judged on every observation; RSS, its trend and the CPU per sample on
// those outside the stall and the 30 s after it, when the exporter's
// backed-off retries drain its queue (during the stall the generator,
// whose spans are refused, slows down, so there are fewer samples for
// the same span work). During the stall RSS holds the exporter's queue as
// well: 4 MiB of protobuf is about 16 MiB of pdata, and the Go heap's goal
// doubles that; it is held to +25% of the median there.
//
// RSS climbs for the first five minutes or so (symbol tables, the span
// index filling its window, the Go heap finding its size), so only runs
// of 20 minutes or more (make soak) are held to ±10% of the median after
// the warm-up and a trend under 5% before and after the stall; the
// 3-minute run of make test, still inside that climb, is held to an
// absolute bound, soakMaxRSS.
func checkFlat(t *testing.T, watch []procSample, dur, warmup, stallFrom, stallTo time.Duration) {
	long := dur >= 20*time.Minute
	var after, steady []procSample
	for _, p := range watch {
		if p.at >= warmup {
			after = append(after, p)
			if p.at < stallFrom || p.at > stallTo {
				steady = append(steady, p)
			}
		}
	}
	if len(after) < 4 || len(steady) < 4 {
		t.Fatalf("only %d observations after the warm-up, %d outside the stall", len(after), len(steady))
	}
	rssOf := func(ps []procSample) []float64 {
		out := make([]float64, len(ps))
		for i, p := range ps {
			out[i] = float64(p.rss)
		}
		return out
	}
	rss := rssOf(steady)
	med := median(rss)
	lo, hi := minMax(rss)
	_, peak := minMax(rssOf(after))
	t.Logf("soak: RSS after warm-up, outside the stall: median %.1f MiB, %+.1f%% .. %+.1f%%; peak in the stall %+.1f%%",
		med/(1<<20), 100*(lo/med-1), 100*(hi/med-1), 100*(peak/med-1))
	if long && (lo < 0.9*med || hi > 1.1*med) {
		t.Errorf("RSS left ±10%% of its median %.1f MiB after the warm-up: %.1f .. %.1f MiB", med/(1<<20), lo/(1<<20), hi/(1<<20))
	}
	if long && peak > 1.25*med {
		t.Errorf("RSS reached %.1f MiB in the stall, over +25%% of its median %.1f MiB", peak/(1<<20), med/(1<<20))
	}
	hi = max(hi, peak)
	if hi > soakMaxRSS {
		t.Errorf("RSS reached %.1f MiB, over %d MiB", hi/(1<<20), soakMaxRSS>>20)
	}
	// The trend is fitted before the stall and after it apart: the stall
	// raises the Go heap's goal while the exporter's queue is full, and
	// the runtime keeps up to a tenth over its goal, so RSS may step up
	// once and stay there (bounded by the band above). Memory the stall
	// left held would show in the live heap, checked by checkLiveHeap.
	for _, part := range []struct {
		name string
		in   func(time.Duration) bool
	}{
		{"before the stall", func(at time.Duration) bool { return at < stallFrom }},
		{"after the stall", func(at time.Duration) bool { return at > stallTo }},
	} {
		var xs, ys []float64
		var first, last time.Duration
		for _, p := range steady {
			if part.in(p.at) {
				if len(xs) == 0 {
					first = p.at
				}
				last = p.at
				xs, ys = append(xs, p.at.Seconds()), append(ys, float64(p.rss))
			}
		}
		if len(xs) < 4 {
			continue
		}
		span := last - first
		trend := fitSlope(xs, ys) * span.Seconds() / median(ys)
		t.Logf("soak: RSS trend %s: %+.1f%% over %v by a linear fit", part.name, 100*trend, span.Round(time.Second))
		if long && trend > 0.05 {
			t.Errorf("RSS trends upward %s: %+.1f%% over %v by a linear fit", part.name, 100*trend, span.Round(time.Second))
		}
	}

	g := make([]float64, len(after))
	fd := make([]float64, len(after))
	for i, p := range after {
		g[i], fd[i] = float64(p.goroutines), float64(p.fds)
	}
	glo, ghi := minMax(g)
	flo, fhi := minMax(fd)
	t.Logf("soak: goroutines %v .. %v, fds %v .. %v after warm-up", glo, ghi, flo, fhi)
	// A few goroutines and fds come and go with the exporters' retries,
	// rotation and gRPC streams; growth with time would show as a range
	// that widens with the run, so the range is bounded absolutely.
	if ghi-glo > 25 || g[len(g)-1] > g[0]+10 {
		t.Errorf("goroutines not flat after the warm-up: %v .. %v, first %v, last %v", glo, ghi, g[0], g[len(g)-1])
	}
	if fhi-flo > 6 || fd[len(fd)-1] > fd[0]+3 {
		t.Errorf("open fds not flat after the warm-up: %v .. %v, first %v, last %v", flo, fhi, fd[0], fd[len(fd)-1])
	}

	// CPU per 1 000 samples over consecutive steady observations, in
	// windows of a twelfth of the run (at least 20 s).
	win := max(20*time.Second, dur/12)
	var per []float64
	for i := 0; i < len(steady); {
		j := i + 1
		for j < len(steady) && steady[j].at-steady[i].at < win {
			j++
		}
		if j >= len(steady) || steady[j].at-steady[i].at > 2*win {
			i = j // the window crosses the stall
			continue
		}
		a, b := steady[i], steady[j]
		if ds := b.samples - a.samples; ds > 0 {
			per = append(per, (b.cpu-a.cpu).Seconds()*1e6/float64(ds)) // ms per 1000 samples
		}
		i = j
	}
	plo, phi := minMax(per)
	t.Logf("soak: collector CPU per 1 000 samples by %v window outside the stall: %s ms (all of its work: spans, trace files, off-CPU)", win, fmtFloats(per))
	if len(per) < 2 {
		t.Errorf("only %d windows to judge the CPU per sample by", len(per))
	} else if phi > 1.5*plo {
		t.Errorf("collector CPU per 1 000 samples not steady: %.1f .. %.1f ms", plo, phi)
	}
}

// reconcile balances the books at the end.
func reconcile(t *testing.T, m, stall metrics, ended, exported, failed, sinkSpans, sinkSamples, sinkValues, held int64) {
	// Spans: what the SDK acknowledged was accepted; every span that
	// reached the receiver (acknowledged or refused and retried) went to
	// the join and to each exporter.
	acc := m.sum("otelcol_receiver_accepted_spans", "receiver", "perfprof")
	ref := m.sum("otelcol_receiver_refused_spans", "receiver", "perfprof")
	fail := m.sum("otelcol_receiver_failed_spans", "receiver", "perfprof")
	got := acc + ref + fail
	joined := m.by("otelcol_receiver_perfprof_spans", "outcome")
	t.Logf("soak: spans: generator ended %d, acknowledged %d, failed %d; receiver accepted %d, refused %d, failed %d; join %v",
		ended, exported, failed, acc, ref, fail, joined)
	if ended != exported+failed {
		t.Errorf("generator: %d spans ended but %d acknowledged + %d failed", ended, exported, failed)
	}
	if acc != exported {
		t.Errorf("receiver accepted %d spans, the generator's SDK had %d acknowledged", acc, exported)
	}
	var sumJoin int64
	for _, v := range joined {
		sumJoin += v
	}
	if sumJoin != got {
		t.Errorf("join outcomes add up to %d spans, the receiver got %d", sumJoin, got)
	}

	// Samples: read from the kernel (on-CPU) or made of the scheduler
	// program's records (off-CPU) = emitted + dropped.
	read := m.sum("otelcol_receiver_perfprof_samples")
	emitted := m.by("otelcol_receiver_perfprof_emitted_samples", "join")
	dropped := m.by("otelcol_receiver_perfprof_dropped_samples", "reason")
	offCPU := m.sum("otelcol_receiver_perfprof_off_cpu_samples")
	lost := m.sum("otelcol_receiver_perfprof_lost_records")
	var sumEmitted int64
	for _, v := range emitted {
		sumEmitted += v
	}
	// Handed on as pprofile Sample records (a stack with its timestamps).
	handed := m.sum("otelcol_receiver_accepted_profile_samples", "receiver", "perfprof") +
		m.sum("otelcol_receiver_refused_profile_samples", "receiver", "perfprof") +
		m.sum("otelcol_receiver_failed_profile_samples", "receiver", "perfprof")
	t.Logf("soak: samples: read %d on-CPU + %d off-CPU; emitted %v (%d), dropped %v; kernel lost %d records; handed on in %d pprofile samples",
		read, offCPU, emitted, sumEmitted, dropped, lost, handed)
	if read+offCPU != sumEmitted+dropped["buffer_full"]+dropped["corrupt"] {
		t.Errorf("%d + %d samples taken, %d emitted + %d dropped (buffer_full, corrupt)", read, offCPU, sumEmitted, dropped["buffer_full"]+dropped["corrupt"])
	}
	if read == 0 || offCPU == 0 {
		t.Errorf("no samples (%d on-CPU, %d off-CPU)", read, offCPU)
	}

	// Each exporter: what it was handed is sent, failed, or refused by
	// its full queue.
	for _, exp := range []string{"tracefile", "otlp_grpc/sink"} {
		for _, sig := range []struct {
			what string
			in   int64
		}{{"spans", got}, {"profile_samples", handed}} {
			sent := m.sum("otelcol_exporter_sent_"+sig.what, "exporter", exp)
			sf := m.sum("otelcol_exporter_send_failed_"+sig.what, "exporter", exp)
			ef := m.sum("otelcol_exporter_enqueue_failed_"+sig.what, "exporter", exp)
			t.Logf("soak: %s %s: handed %d, sent %d, send failed %d, queue full %d", exp, sig.what, sig.in, sent, sf, ef)
			if sent+sf+ef != sig.in {
				t.Errorf("%s %s: handed %d, but sent %d + send failed %d + queue full %d = %d", exp, sig.what, sig.in, sent, sf, ef, sent+sf+ef)
			}
			if exp == "tracefile" && sent != sig.in {
				t.Errorf("tracefile lost %d %s (send failed %d, queue full %d)", sig.in-sent, sig.what, sf, ef)
			}
		}
	}
	if m.sum("otelcol_exporter_send_failed_profile_samples", "exporter", "otlp_grpc/sink")+
		m.sum("otelcol_exporter_enqueue_failed_profile_samples", "exporter", "otlp_grpc/sink") == 0 && sinkValues != sumEmitted {
		t.Errorf("the sink exporter lost no profiles, yet the sink got %d samples of the %d emitted", sinkValues, sumEmitted)
	}
	sentSpans := m.sum("otelcol_exporter_sent_spans", "exporter", "otlp_grpc/sink")
	sentSamples := m.sum("otelcol_exporter_sent_profile_samples", "exporter", "otlp_grpc/sink")
	if sinkSpans != sentSpans || sinkSamples != sentSamples {
		t.Errorf("the sink got %d spans and %d samples, its exporter sent %d and %d", sinkSpans, sinkSamples, sentSpans, sentSamples)
	}

	// The stall: requests were held, the queue overflowed (counted), and
	// the sink received again after it.
	lostToStall := m.sum("otelcol_exporter_enqueue_failed_spans", "exporter", "otlp_grpc/sink") +
		m.sum("otelcol_exporter_enqueue_failed_profile_samples", "exporter", "otlp_grpc/sink") +
		m.sum("otelcol_exporter_send_failed_spans", "exporter", "otlp_grpc/sink") +
		m.sum("otelcol_exporter_send_failed_profile_samples", "exporter", "otlp_grpc/sink")
	t.Logf("soak: stall: %d requests held, %d items counted as not delivered to the sink", held, lostToStall)
	if held == 0 || lostToStall == 0 {
		t.Errorf("the stall left no trace: %d requests held, %d items counted as not delivered", held, lostToStall)
	}
	if stall == nil {
		t.Fatal("no scrape at the end of the stall")
	}
	if after := sentSpans - stall.sum("otelcol_exporter_sent_spans", "exporter", "otlp_grpc/sink"); after <= 0 {
		t.Errorf("the sink exporter sent no spans after the stall")
	}
}

// checkSegments: rotation and retention ran, and every sealed segment
// left reads whole.
func checkSegments(t *testing.T, dir string) {
	names, err := filepath.Glob(filepath.Join(dir, "*.bin*"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	var events int
	for _, n := range names {
		if strings.HasSuffix(n, ".active") {
			t.Errorf("an active segment is left after shutdown: %s", n)
			continue
		}
		ev, err := readTrace(n)
		if err != nil {
			t.Errorf("segment %s: %v", filepath.Base(n), err)
		}
		events += len(ev)
	}
	t.Logf("soak: %d segments left in the trace directory, %d events", len(names), events)
	if len(names) < 2 {
		t.Errorf("only %d segments: no rotation", len(names))
	}
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func minMax(v []float64) (lo, hi float64) {
	if len(v) == 0 {
		return 0, 0
	}
	lo, hi = v[0], v[0]
	for _, x := range v {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	return lo, hi
}

// fitSlope is the least-squares slope of ys over xs.
func fitSlope(xs, ys []float64) float64 {
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx /= float64(len(xs))
	my /= float64(len(ys))
	var num, den float64
	for i := range xs {
		num += (xs[i] - mx) * (ys[i] - my)
		den += (xs[i] - mx) * (xs[i] - mx)
	}
	if den == 0 {
		return 0
	}
	return num / den
}

func fmtFloats(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strings.Join(s, " ")
}

// startSpangen starts spangen with args; its stdout is to be read, its
// stderr is kept for messages, and it is killed at the end of the test if
// still running.
func startSpangen(t *testing.T, gen string, args ...string) (*exec.Cmd, io.Reader, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(gen, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	genErr := &syncBuffer{}
	cmd.Stderr = genErr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, stdout, genErr
}
