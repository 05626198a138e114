package e2e

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/perfprof/perfprof/internal/otelctx"
	"github.com/perfprof/perfprof/internal/testchild"
)

// The Node.js tests run testdata/nodeddtrace/app.js, an HTTP service traced
// by dd-trace 6.21.0 (installed by make node-deps) on Node.js 24 (make
// node24), configured by dd-trace's own environment variables only: the
// app knows nothing of perfprof (issue 29).

// nodeAppFlags: --perf-basic-prof names the JIT code (the README asks it of
// Node.js services); the rest keep each burn function in its own code, as
// internal/profiler's jitburn.js explains.
var nodeAppFlags = []string{
	"--perf-basic-prof", "--interpreted-frames-native-stack", "--logfile=/dev/null",
	"--no-turbo-inlining", "--no-maglev-inlining",
}

// ddTraceEnv is the environment that turns dd-trace's thread context on and
// sends its spans over OTLP to spansURL (OTLP/HTTP with JSON, the one
// protocol dd-trace 6.21.0 exports spans in; it posts each trace as it
// ends). The agent's URL is the discard port, where nothing listens: with
// OTLP export dd-trace needs no agent, and its telemetry and remote
// configuration calls to it fail quietly. Profiling (DD_PROFILING_ENABLED)
// stays off: the thread context does not need it.
func ddTraceEnv(spansURL string) []string {
	return []string{
		"DD_SERVICE=nodeddtrace",
		"DD_TRACE_OTEL_CTX_ENABLED=true",
		"OTEL_TRACES_EXPORTER=otlp",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=" + spansURL,
		"DD_TRACE_AGENT_URL=http://127.0.0.1:9",
		"DD_TRACE_STARTUP_LOGS=false",
	}
}

// ddTraceKeyMap is the attribute key map dd-trace 6.21.0 publishes:
// libdatadog puts datadog.local_root_span_id first, then dd-trace's keys.
var ddTraceKeyMap = []string{"datadog.local_root_span_id", "datadog.trace_endpoint", "datadog.thread_name", "datadog.thread_id"}

// nodeApp is a running app.js.
type nodeApp struct {
	cmd   *exec.Cmd
	pid   int
	port  int
	dir   string // the app's DIR argument (its release file)
	lines chan string
}

// startNodeApp runs app.js on Node.js 24 with env (on top of the test's
// environment less its DD_* and OTEL_* variables) and waits for its ready
// line. It skips (or fails with PERFPROF_REQUIRE_RUNTIMES=1) when Node.js
// 24 or dd-trace is not installed.
func startNodeApp(t *testing.T, env []string) *nodeApp {
	t.Helper()
	appDir := filepath.Join(root, "test", "e2e", "testdata", "nodeddtrace")
	if _, err := os.Stat(filepath.Join(appDir, "node_modules", "dd-trace", "package.json")); err != nil {
		testchild.NeedRuntime(t, "dd-trace is not installed in %s: run make node-deps (make test does): %v", appDir, err)
	}
	return startNode(t, appDir, []string{"--require", "dd-trace/init", "app.js"}, env)
}

// startNode runs a Node.js 24 script (args: the flags after nodeAppFlags
// and the script) in dir, with its DIR argument, env as startNodeApp, and
// waits for its "ready PID PORT" line.
func startNode(t *testing.T, appDir string, args, env []string) *nodeApp {
	t.Helper()
	node := testchild.Node24(t)
	a := &nodeApp{dir: t.TempDir(), lines: make(chan string, 64)}
	args = append(append(slices.Clone(nodeAppFlags), args...), a.dir)
	a.cmd = exec.Command(node, args...)
	a.cmd.Dir = appDir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DD_") && !strings.HasPrefix(kv, "OTEL_") {
			a.cmd.Env = append(a.cmd.Env, kv)
		}
	}
	a.cmd.Env = append(a.cmd.Env, env...)
	a.cmd.Stderr = os.Stderr
	out, err := a.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a.pid = a.cmd.Process.Pid
	t.Cleanup(func() {
		if a.cmd.ProcessState == nil {
			_ = a.cmd.Process.Kill()
			_ = a.cmd.Wait()
		}
		os.Remove(fmt.Sprintf("/tmp/perf-%d.map", a.pid)) // node never removes it
	})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			a.lines <- sc.Text()
		}
		close(a.lines)
	}()
	// A tracer loads its instrumentations first: 1-2 s here.
	line := a.line(t, 30*time.Second)
	var pid int
	if _, err := fmt.Sscanf(line, "ready %d %d", &pid, &a.port); err != nil || pid != a.pid {
		t.Fatalf("app: ready line %q (pid %d)", line, a.pid)
	}
	return a
}

func (a *nodeApp) line(t *testing.T, d time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-a.lines:
		if !ok {
			t.Fatal("app closed its stdout")
		}
		return l
	case <-time.After(d):
		t.Fatalf("no line from the app in %v", d)
	}
	return ""
}

func (a *nodeApp) get(path string) (string, error) {
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d%s", a.port, path))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
	}
	return strings.TrimSpace(string(b)), nil
}

// checkDDTraceProcessContext waits (up to 10 s) for the app's OTEP 4719
// process context and checks that it names the Node.js schema and
// dd-trace's key map.
func checkDDTraceProcessContext(t *testing.T, pid int) otelctx.Resource {
	t.Helper()
	var r otelctx.Resource
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if r, err = otelctx.ProcessContext(pid); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("dd-trace's process context: %v", err)
	}
	t.Logf("process context (%s): service %q, schema %q, key map %q; extra %v",
		r.Mapping, r.ServiceName(), r.SchemaVersion(), r.KeyMap(), r.Extra)
	if r.SchemaVersion() != otelctx.SchemaNodeDev {
		t.Errorf("schema %q, want %q", r.SchemaVersion(), otelctx.SchemaNodeDev)
	}
	if !slices.Equal(r.KeyMap(), ddTraceKeyMap) {
		t.Errorf("key map %q, want %q", r.KeyMap(), ddTraceKeyMap)
	}
	if r.ServiceName() != "nodeddtrace" {
		t.Errorf("service.name %q, want nodeddtrace", r.ServiceName())
	}
	return r
}

// TestNodeDDTraceThreadContext checks, without the collector, what perfprof's
// reader of Node.js thread contexts relies on in a real dd-trace service:
// dd-trace publishes the process context (schema nodejs_v1_dev and its key
// map), and on its JS thread stopped in the middle of a request,
// otelctx.NodeRecord walks from the discovery struct
// otel_thread_ctx_nodejs_v1 to the record of the request's span, with the
// attributes dd-trace puts in it; once the request is over its record is
// no longer presented.
func TestNodeDDTraceThreadContext(t *testing.T) {
	app := startNodeApp(t, ddTraceEnv("http://"+freeAddr(t)+"/v1/traces"))
	res := checkDDTraceProcessContext(t, app.pid)

	// /hold blocks the JS thread in its request until the release file
	// exists.
	type reply struct {
		body string
		err  error
	}
	held := make(chan reply, 1)
	go func() {
		b, err := app.get("/hold")
		held <- reply{b, err}
	}()
	var trace, span string
	if line := app.line(t, 10*time.Second); !strings.HasPrefix(line, "held ") {
		t.Fatalf("app: %q, want held TRACE SPAN", line)
	} else {
		f := strings.Fields(line)
		trace, span = f[1], f[2]
	}

	v, err := otelctx.LocateTLSSymbol(app.pid, otelctx.NodeTLSSymbol)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := otelctx.ThreadPointer(app.pid, app.pid)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", app.pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	addr, err := v.Address(mem, tp)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %+v, at %#x (thread pointer %#x)", otelctx.NodeTLSSymbol, v, addr, tp)
	read := func() (otelctx.ThreadCtx, error) {
		rec, err := otelctx.NodeRecord(mem, addr)
		if err != nil {
			return otelctx.ThreadCtx{}, err
		}
		b := make([]byte, otelctx.RecordHeaderSize, 640)
		if _, err := mem.ReadAt(b, int64(rec)); err != nil {
			return otelctx.ThreadCtx{}, err
		}
		size, err := otelctx.RecordSize(b)
		if err != nil {
			return otelctx.ThreadCtx{}, err
		}
		if size > cap(b) {
			return otelctx.ThreadCtx{}, fmt.Errorf("record of %d bytes", size)
		}
		b = b[:size]
		if _, err := mem.ReadAt(b[otelctx.RecordHeaderSize:], int64(rec)+otelctx.RecordHeaderSize); err != nil {
			return otelctx.ThreadCtx{}, err
		}
		c, err := otelctx.ParseRecord(b, res.KeyMap())
		c.Record = rec
		return c, err
	}
	c, err := read()
	if err != nil {
		t.Fatalf("mid-request: %v", err)
	}
	attrs := map[string]string{}
	for _, a := range c.Attrs {
		attrs[a.Name] = a.Value
	}
	t.Logf("mid-request record at %#x: trace %s span %s flags %d, attributes %q", c.Record, c.TraceIDString(), c.SpanIDString(), c.TraceFlags, attrs)
	if c.TraceIDString() != trace || c.SpanIDString() != span {
		t.Errorf("record names trace %s span %s, the request runs trace %s span %s", c.TraceIDString(), c.SpanIDString(), trace, span)
	}
	want := map[string]string{
		"datadog.local_root_span_id": span, // the request's span is its trace's local root
		"datadog.trace_endpoint":     "GET /hold",
		"datadog.thread_name":        "Main Event Loop",
		"datadog.thread_id":          "0",
	}
	for k, w := range want {
		if attrs[k] != w {
			t.Errorf("attribute %s = %q, want %q", k, attrs[k], w)
		}
	}
	// The flags are not checked: dd-trace 6.21.0 writes the sampled bit
	// only when the sampling decision was taken before the span first
	// became active, which for a request's span it is not (it reads 0).

	if err := os.WriteFile(filepath.Join(app.dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := <-held
	if r.err != nil || r.body != "hold "+trace+" "+span {
		t.Fatalf("/hold: %q, %v", r.body, r.err)
	}
	// Between requests the thread shows no valid record of the finished
	// one: dd-trace invalidates a span's record when the span ends. The
	// thread is stopped for the read (SIGSTOP), wherever it is: waiting for
	// events or in the unspanned background work.
	for i := 0; i < 5; i++ {
		time.Sleep(30 * time.Millisecond)
		if err := syscall.Kill(app.pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		waitStopped(t, app.pid)
		c, err := read()
		if err := syscall.Kill(app.pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		switch {
		case errors.Is(err, otelctx.ErrNoContext), errors.Is(err, otelctx.ErrNotValid):
		case err != nil:
			t.Errorf("between requests: %v", err)
		case c.SpanIDString() == span:
			t.Errorf("between requests: the finished request's record at %#x is still valid", c.Record)
		default:
			t.Logf("between requests: a record of trace %s span %s", c.TraceIDString(), c.SpanIDString())
		}
		if i == 0 {
			t.Logf("between requests: %v", err)
		}
	}
}

// waitStopped waits until every thread of pid is stopped (state T).
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			t.Fatal(err)
		}
		stopped := 0
		for _, e := range ents {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, e.Name()))
			if err != nil {
				continue
			}
			s := string(b)
			if i := strings.LastIndexByte(s, ')'); i > 0 && len(s) > i+2 && s[i+2] == 'T' {
				stopped++
			}
		}
		if stopped == len(ents) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d: %d of %d threads stopped after 5 s", pid, stopped, len(ents))
		}
	}
}

// nodeSpan is a span dd-trace exported, as the collector passed it on.
type nodeSpan struct {
	trace, name, route string
	start, end         uint64 // Unix ns
}

// nodeSpanSink is an OTLP/gRPC traces endpoint that keeps dd-trace's spans
// by id.
type nodeSpanSink struct {
	ptraceotlp.UnimplementedGRPCServer
	mu    sync.Mutex
	spans map[string]nodeSpan // by span id (hex)
}

func (s *nodeSpanSink) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range req.Traces().ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			for _, sp := range ss.Spans().All() {
				tid, sid := sp.TraceID(), sp.SpanID()
				d := nodeSpan{trace: hex.EncodeToString(tid[:]), name: sp.Name(), start: uint64(sp.StartTimestamp()), end: uint64(sp.EndTimestamp())}
				if v, ok := sp.Attributes().Get("http.route"); ok {
					d.route = strings.TrimPrefix(v.Str(), "/")
				}
				s.spans[hex.EncodeToString(sid[:])] = d
			}
		}
	}
	return ptraceotlp.NewExportResponse(), nil
}

// nodeRoutes are app.js's routes and the functions that burn their CPU.
var nodeRoutes = map[string]string{"burnAlpha": "alpha", "burnBeta": "beta", "burnGamma": "gamma"}

// jsName returns the JS function of a perf map name like
// "JS:*burnAlpha /path/app.js:48:19": "burnAlpha" (tier markers "*^+~"
// and Node.js 24's "'" dropped), or "" for a name that is not JS.
func jsName(name string) string {
	rest, ok := strings.CutPrefix(name, "JS:")
	if !ok {
		return ""
	}
	fn, _, _ := strings.Cut(strings.TrimLeft(rest, "*^+~'"), " ")
	return fn
}

// TestNodeDDTraceSpanAttribution profiles app.js, traced by an unmodified
// dd-trace with its thread context on, through the built collector: the
// app sends its spans over OTLP/HTTP to the perfprof receiver, 8 clients
// send requests of three routes for 10 s, and every sample is judged by the
// ground truth the app answers with (judgeNode): a burn sample inside a
// request's slice must be linked to that request's span, off-CPU time
// where a request blocked to that request's, backgroundWork and the idle
// loop to none; and the samples carry the records' endpoint attribute.
//
// The "thread_join" run turns dd-trace's thread context off
// (DD_TRACE_OTEL_CTX_ENABLED=false) and gives the receiver dd-trace's
// process_id as the spans' thread id (on Node.js's main thread, where the
// JS runs, it is the thread's id): the figures of the (thread, time) join,
// for comparison; its bar is only that it links nothing wrongly.
func TestNodeDDTraceSpanAttribution(t *testing.T) {
	requirePerf(t)
	t.Run("thread_context", func(t *testing.T) { testNodeDDTrace(t, true) })
	t.Run("thread_join", func(t *testing.T) { testNodeDDTrace(t, false) })
}

// testNodeDDTrace runs TestNodeDDTraceSpanAttribution with dd-trace's
// thread context on (ctx) or off.
func testNodeDDTrace(t *testing.T, ctx bool) {
	srv, sink, sinkAddr := nodeSinks(t)
	spansAddr := freeAddr(t)
	env := ddTraceEnv("http://" + spansAddr + "/v1/traces")
	threadAttr := ""
	if !ctx {
		env = append(env, "DD_TRACE_OTEL_CTX_ENABLED=false")
		threadAttr = ", thread_id_attribute: process_id"
	}
	app := startNodeApp(t, env)
	config := nodeConfig([]int{app.pid}, spansAddr, sinkAddr, threadAttr, "", "")
	cmd, out := runCollector(t, config, nil)
	waitFor(t, out, "Everything is ready", 20*time.Second)
	if strings.Contains(out.String(), "Spans are read at sample time only with eBPF") {
		testchild.Unavailable(t, "the collector could not load its eBPF program, which reads thread contexts:\n%s", out.String())
	}
	if ctx {
		checkDDTraceProcessContext(t, app.pid)
		// The reader attaches once it has read the process context.
		waitFor(t, out, "Node.js thread context", 15*time.Second)
	}

	requests := runNodeClients(t, app, 8, 10*time.Second)
	// dd-trace posts each trace as it ends; then the app stops, and the
	// collector's final report joins and sends what it holds.
	time.Sleep(time.Second)
	if err := app.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = app.cmd.Wait()
	time.Sleep(500 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("collector did not exit cleanly on SIGTERM: %v", err)
	}

	// The spans: each request's, with its route.
	sink.mu.Lock()
	spans := sink.spans
	sink.mu.Unlock()
	var spanned, wrongSpan int
	for _, r := range requests {
		s, ok := spans[r.span]
		switch {
		case !ok:
		case s.trace != r.trace || s.route != r.route || s.name != "GET /"+r.route:
			wrongSpan++
		default:
			spanned++
		}
	}
	t.Logf("%d requests (%.0f/s); %d spans received, %d of the requests' with their route and name, %d wrong",
		len(requests), float64(len(requests))/10, len(spans), spanned, wrongSpan)
	if wrongSpan > 0 || float64(spanned) < 0.95*float64(len(requests)) {
		t.Errorf("spans: %d of %d requests arrived with their route (%d wrong)", spanned, len(requests), wrongSpan)
	}

	// The samples, judged by the requests' slices. dd-trace's records
	// carry the request's endpoint and its local root (the request's
	// span: it has no parent in the process).
	rootOf := map[string]bool{}
	for _, r := range requests {
		rootOf[r.span] = true
	}
	offset := monoOffset(t)
	f := judgeNode(srv, int64(app.pid), requests, spanLives(spans, offset), offset, func(route string, attrs map[string]string) bool {
		return attrs["datadog.trace_endpoint"] == "GET /"+route && rootOf[attrs["datadog.local_root_span_id"]]
	})
	t.Logf("dd-trace thread context %v: %v", ctx, f)
	if f.burn < 500 {
		t.Fatalf("only %d samples in the burn functions: are JS frames named? functions %v", f.burn, topFunctions(srv, 10))
	}
	if ctx {
		checkNodeBar(t, f, true)
		return
	}
	// The thread join links a sample only where one request was open on
	// the thread, and then to that request.
	if f.other > f.judged/100 {
		t.Errorf("thread join: %d of %d judged burn samples linked to another request's span", f.other, f.judged)
	}
}

// runNodeClients runs n clients against app for d, each cycling through
// the routes from its own start, and returns the requests' ground truth.
func runNodeClients(t *testing.T, app *nodeApp, n int, d time.Duration) []nodeRequest {
	t.Helper()
	routes := []string{"alpha", "beta", "gamma"}
	var mu sync.Mutex
	var requests []nodeRequest
	var errs []error
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	for c := 0; c < n; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; time.Now().Before(stop); i++ {
				r := routes[i%len(routes)]
				b, err := app.get("/" + r)
				var req nodeRequest
				if err == nil {
					req, err = parseNodeResponse(r, b)
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					requests = append(requests, req)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 || len(requests) == 0 {
		t.Fatalf("%d requests, %d errors: %v", len(requests), len(errs), errs[:min(len(errs), 3)])
	}
	return requests
}

// topFunctions returns the n functions with the most samples, for a
// failure message.
func topFunctions(srv *profileServer, n int) []string {
	_, fns := srv.snapshot()
	names := make([]string, 0, len(fns))
	for k := range fns {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return fns[names[i]] > fns[names[j]] })
	var out []string
	for _, k := range names[:min(n, len(names))] {
		out = append(out, fmt.Sprintf("%s=%d", k, fns[k]))
	}
	return out
}
