// Package e2e tests the collector as users run it: built by ocb with the
// builder-config.yaml of this repository, started as a process with a YAML
// configuration, profiling a real workload and exporting over OTLP/gRPC to
// a server in the test. The main configuration is testdata/e2e.yaml (checked
// by test/configs); the start-error cases keep their small broken ones
// inline, next to the message each must produce.
package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // the OTLP exporter compresses by default

	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/testchild"
	"github.com/perfprof/perfprof/internal/wire"
)

var (
	root      string
	collector string
	demo      string
)

// TestMain builds the collector with ocb through the Makefile, as a user's
// `make build` does.
func TestMain(m *testing.M) {
	_, self, _, _ := runtime.Caller(0)
	root = filepath.Join(filepath.Dir(self), "..", "..")
	collector = filepath.Join(root, "_build", "otelcol-perfprof")
	demo = filepath.Join(root, "_build", "perfprof-demo")
	cmd := exec.Command("make", "build")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: make build failed: %v\n", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "e2e: make build took %v\n", time.Since(start).Round(time.Second))
	os.Exit(m.Run())
}

func requirePerf(t *testing.T) {
	s, err := perf.Open(perf.Options{Frequency: 99})
	testchild.RequirePerf(t, err)
	s.Close()
}

// profileServer is an OTLP/gRPC profiles endpoint that counts samples per
// function name.
type profileServer struct {
	pprofileotlp.UnimplementedGRPCServer
	mu        sync.Mutex
	requests  int
	samples   int
	functions map[string]int // samples whose stack holds the function
	pids      map[int64]int
	stacks    []stackCount
	roots     map[string]int  // samples by span.root.name
	offCPU    int             // off-CPU samples seen (not counted above)
	offLinked int             // of those, linked to a span
	offTypes  map[string]bool // type/unit of the profiles that are not "samples"
	// offStacks are the off-CPU samples, as stacks are the on-CPU ones
	// (without functions).
	offStacks []stackCount
}

type stackCount struct {
	functions map[string]bool
	count     int
	linked    bool
	thread    string // thread.name
	leaf      string // the innermost function of the leaf location
	// For judging samples one by one: the thread.id, the link's ids (zero
	// when not linked) and each sample's time.
	tid   int64
	trace pcommon.TraceID
	span  pcommon.SpanID
	times []uint64
	// The resource of the sample's process: process.pid, container.id
	// and k8s.pod.uid ("" when absent).
	pid            int64
	container, pod string
	// source is the link's span.link.source ("" when not linked), and
	// attrs the sample's other string attributes (thread context record
	// attributes among them).
	source string
	attrs  map[string]string
}

func containsAny(set map[string]bool, names []string) bool {
	for _, n := range names {
		if set[n] {
			return true
		}
	}
	return false
}

func (s *profileServer) Export(_ context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	pd := req.Profiles()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	dic := pd.Dictionary()
	strs := dic.StringTable()
	for i := 0; i < pd.ResourceProfiles().Len(); i++ {
		rp := pd.ResourceProfiles().At(i)
		pid, _ := rp.Resource().Attributes().Get("process.pid")
		var cid, pod string
		if v, ok := rp.Resource().Attributes().Get(convention.ContainerID); ok {
			cid = v.Str()
		}
		if v, ok := rp.Resource().Attributes().Get(convention.K8sPodUID); ok {
			pod = v.Str()
		}
		for j := 0; j < rp.ScopeProfiles().Len(); j++ {
			profs := rp.ScopeProfiles().At(j).Profiles()
			for k := 0; k < profs.Len(); k++ {
				if st := profs.At(k).SampleType(); strs.At(int(st.TypeStrindex())) != "samples" {
					if s.offTypes == nil {
						s.offTypes = map[string]bool{}
					}
					s.offTypes[strs.At(int(st.TypeStrindex()))+"/"+strs.At(int(st.UnitStrindex()))] = true
					samples := profs.At(k).Samples()
					for x := 0; x < samples.Len(); x++ {
						smp := samples.At(x)
						n := smp.TimestampsUnixNano().Len()
						s.offCPU += n
						sc := stackCount{count: n, linked: smp.LinkIndex() > 0, times: smp.TimestampsUnixNano().AsRaw(), pid: pid.Int(), container: cid, pod: pod}
						if sc.linked {
							s.offLinked += n
							l := dic.LinkTable().At(int(smp.LinkIndex()))
							sc.trace, sc.span = l.TraceID(), l.SpanID()
						}
						// Off-CPU samples keep their functions and
						// attributes for judging, and count in no
						// function total.
						sc.functions = map[string]bool{}
						st := dic.StackTable().At(int(smp.StackIndex()))
						for _, li := range st.LocationIndices().AsRaw() {
							lines := dic.LocationTable().At(int(li)).Lines()
							for y := 0; y < lines.Len(); y++ {
								fn := dic.FunctionTable().At(int(lines.At(y).FunctionIndex()))
								sc.functions[strs.At(int(fn.NameStrindex()))] = true
							}
						}
						for _, ai := range smp.AttributeIndices().AsRaw() {
							a := dic.AttributeTable().At(int(ai))
							switch key := strs.At(int(a.KeyStrindex())); {
							case key == convention.ThreadID:
								sc.tid = a.Value().Int()
							case key == convention.LinkSource:
								sc.source = a.Value().Str()
							case key == "thread.name" || key == convention.ThreadState || key == "span.root.name":
							case a.Value().Type() == pcommon.ValueTypeStr:
								if sc.attrs == nil {
									sc.attrs = map[string]string{}
								}
								sc.attrs[key] = a.Value().Str()
							}
						}
						s.offStacks = append(s.offStacks, sc)
					}
					continue
				}
				samples := profs.At(k).Samples()
				for x := 0; x < samples.Len(); x++ {
					smp := samples.At(x)
					n := smp.TimestampsUnixNano().Len()
					s.samples += n
					s.pids[pid.Int()] += n
					seen := map[string]bool{}
					leaf := ""
					st := dic.StackTable().At(int(smp.StackIndex()))
					if idx := st.LocationIndices(); idx.Len() > 0 {
						if lines := dic.LocationTable().At(int(idx.At(0))).Lines(); lines.Len() > 0 {
							leaf = strs.At(int(dic.FunctionTable().At(int(lines.At(0).FunctionIndex())).NameStrindex()))
						}
					}
					for _, li := range st.LocationIndices().AsRaw() {
						lines := dic.LocationTable().At(int(li)).Lines()
						for y := 0; y < lines.Len(); y++ {
							fn := dic.FunctionTable().At(int(lines.At(y).FunctionIndex()))
							seen[strs.At(int(fn.NameStrindex()))] = true
						}
					}
					for name := range seen {
						s.functions[name] += n
					}
					sc := stackCount{functions: seen, count: n, linked: smp.LinkIndex() > 0, leaf: leaf,
						times: smp.TimestampsUnixNano().AsRaw(), pid: pid.Int(), container: cid, pod: pod}
					if sc.linked {
						l := dic.LinkTable().At(int(smp.LinkIndex()))
						sc.trace, sc.span = l.TraceID(), l.SpanID()
					}
					for _, ai := range smp.AttributeIndices().AsRaw() {
						a := dic.AttributeTable().At(int(ai))
						switch strs.At(int(a.KeyStrindex())) {
						case "span.root.name":
							s.roots[a.Value().Str()] += n
						case "thread.name":
							sc.thread = a.Value().Str()
						case convention.ThreadID:
							sc.tid = a.Value().Int()
						case convention.LinkSource:
							sc.source = a.Value().Str()
						default:
							if a.Value().Type() == pcommon.ValueTypeStr {
								if sc.attrs == nil {
									sc.attrs = map[string]string{}
								}
								sc.attrs[strs.At(int(a.KeyStrindex()))] = a.Value().Str()
							}
						}
					}
					s.stacks = append(s.stacks, sc)
				}
			}
		}
	}
	return pprofileotlp.NewExportResponse(), nil
}

func (s *profileServer) snapshot() (samples int, fns map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fns = map[string]int{}
	for k, v := range s.functions {
		fns[k] = v
	}
	return s.samples, fns
}

func startServer(t *testing.T) (*profileServer, string) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &profileServer{functions: map[string]int{}, pids: map[int64]int{}, roots: map[string]int{}}
	g := grpc.NewServer()
	pprofileotlp.RegisterGRPCServer(g, srv)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return srv, lis.Addr().String()
}

// runCollector starts the built collector with config, as user cred if
// not nil and with the environment variables env ("KEY=value", for the
// ${env:KEY} references of config), and returns it with a buffer
// collecting its output.
func runCollector(t *testing.T, config string, cred *syscall.Credential, env ...string) (*exec.Cmd, *syncBuffer) {
	dir, err := os.MkdirTemp("", "perfprof-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "config.yaml")
	if err = os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := collector
	if cred != nil {
		// Another user needs a binary and config it may read.
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		bin = filepath.Join(dir, "otelcol-perfprof")
		b, err := os.ReadFile(collector)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "--config", path, "--feature-gates=service.profilesSupport")
	cmd.Env = append(os.Environ(), env...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("collector output:\n%s", out.String())
		}
	})
	return cmd, out
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

// waitFor waits until the collector's output holds want.
func waitFor(t *testing.T, out *syncBuffer, want string, d time.Duration) {
	deadline := time.Now().Add(d)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the collector did not log %q within %v", want, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var _ io.Writer = (*syncBuffer)(nil)

// TestCollectorProfilesDemo runs the demo and the collector as `make run`
// does, but exports over OTLP/gRPC, and checks that the demo's functions
// arrive in proportion to the CPU it gives them, and that the collector
// stops cleanly on SIGTERM.
func TestCollectorProfilesDemo(t *testing.T) {
	requirePerf(t)
	srv, addr := startServer(t)
	spansAddr := freeAddr(t)
	traceDir := t.TempDir()
	config, err := os.ReadFile(filepath.Join(root, "testdata", "e2e.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cmd, out := runCollector(t, string(config), nil, "PERFPROF_E2E_SPANS_ENDPOINT="+spansAddr,
		"PERFPROF_E2E_PROFILES_ENDPOINT="+addr, "PERFPROF_E2E_TRACE_DIR="+traceDir)
	waitFor(t, out, "Receiving spans over OTLP/gRPC", 10*time.Second)
	d := exec.Command(demo, "-endpoint", spansAddr)
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if d.ProcessState == nil {
			_ = d.Process.Kill()
			_ = d.Wait()
		}
	})

	// The demo gives each group of functions a share of its busy time. A
	// sample counts for a group when its stack holds any of the group's
	// functions: a frameless leaf (fnvBlock) hides its direct caller from
	// frame-pointer unwinding, so the group names the callees too.
	groups := map[string][]string{
		"parse":    {"main.parseRequests", "main.tokenize"},
		"checksum": {"main.checksumBlocks", "main.crcBlock", "main.fnvBlock"},
		"sort":     {"main.sortBatches"},
	}
	want := map[string]float64{"parse": 0.40, "checksum": 0.35, "sort": 0.25}
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, fns := srv.snapshot()
		srv.mu.Lock()
		roots := len(srv.roots)
		srv.mu.Unlock()
		if n >= 1000 && roots >= 3 && fns["main.parseRequests"] > 0 && fns["main.checksumBlocks"] > 0 && fns["main.sortBatches"] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s: %d samples, functions %v", n, fns)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Stop the demo first: it flushes its last spans on the way out, so
	// that the collector's final report can join its last samples.
	if err := d.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := d.Wait(); err != nil {
		t.Fatalf("demo did not exit cleanly: %v", err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("collector did not exit cleanly on SIGTERM: %v", err)
	}
	n, _ := srv.snapshot()
	srv.mu.Lock()
	pids := srv.pids
	counts := map[string]int{}
	for _, st := range srv.stacks {
		for g, fns := range groups {
			if containsAny(st.functions, fns) {
				counts[g] += st.count
				break
			}
		}
	}
	srv.mu.Unlock()
	if len(pids) != 1 || pids[int64(d.Process.Pid)] != n {
		t.Errorf("samples by pid %v, want all of pid %d", pids, d.Process.Pid)
	}
	sum := float64(counts["parse"] + counts["checksum"] + counts["sort"])
	t.Logf("%d samples; of those in the three groups: parse %.1f%%, checksum %.1f%%, sort %.1f%%",
		n, 100*float64(counts["parse"])/sum, 100*float64(counts["checksum"])/sum, 100*float64(counts["sort"])/sum)
	for g, w := range want {
		share := float64(counts[g]) / sum
		if share < w-0.10 || share > w+0.10 {
			t.Errorf("group %s has %.0f%% of the samples, want %.0f%% ± 10", g, share*100, w*100)
		}
	}
	// The rest is the Go runtime (scheduler, GC, timers).
	if sum < 0.8*float64(n) {
		t.Errorf("only %.0f of %d samples are in the demo's functions", sum, n)
	}
	// The demo's work runs in spans: its samples come joined, under the
	// root span of their request.
	srv.mu.Lock()
	var inGroups, linked int
	for _, st := range srv.stacks {
		for _, fns := range groups {
			if containsAny(st.functions, fns) {
				inGroups += st.count
				if st.linked {
					linked += st.count
				}
				break
			}
		}
	}
	roots := srv.roots
	offCPU, offLinked, offTypes := srv.offCPU, srv.offLinked, srv.offTypes
	srv.mu.Unlock()
	// Sched capture is on by default (the eBPF scheduler program): the
	// demo's threads block, and the backend gets an off-CPU profile next
	// to the on-CPU one.
	t.Logf("off-CPU: %d samples, %d linked to spans, profiles %v", offCPU, offLinked, offTypes)
	if offCPU == 0 || !offTypes["off_cpu/nanoseconds"] {
		if strings.Contains(out.String(), "Off-CPU profiling is off") {
			testchild.RequireKernel(t, "BPF", fmt.Errorf("the collector could not run the eBPF scheduler program: %w", errors.ErrUnsupported), errors.ErrUnsupported)
		}
		t.Errorf("no off_cpu/nanoseconds profile with the default configuration: %d off-CPU samples, types %v", offCPU, offTypes)
	}
	t.Logf("%d of %d samples in the demo's functions are linked to spans; by root span %v", linked, inGroups, roots)
	if float64(linked) < 0.9*float64(inGroups) {
		t.Errorf("only %d of %d samples of the demo's work are linked to spans", linked, inGroups)
	}
	for _, r := range []string{"GET /items", "POST /upload", "GET /report"} {
		if roots[r] == 0 {
			t.Errorf("no sample under root span %q", r)
		}
	}
	if !strings.Contains(out.String(), "Shutdown complete") {
		t.Errorf("no clean shutdown in the collector's log")
	}
	checkTraceFiles(t, traceDir, n, inGroups)
	t.Run("html", func(t *testing.T) { checkSpanPage(t, traceDir) })
}

// checkTraceFiles reads what the tracefile exporter wrote in the same run:
// every sample the OTLP backend got is in the files, with the demo's spans,
// and the samples' span ids name spans that are in the files too.
func checkTraceFiles(t *testing.T, dir string, otlpSamples, demoSamples int) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var samples, linked, linkedKnown int
	spans := map[string]string{} // span id → name
	var sampleSpans []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".active") {
			t.Errorf("%s left active after shutdown", e.Name())
		}
		evs, err := readTrace(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		for _, ev := range evs {
			switch ev.Name() {
			case "CpuSampleEvent":
				if src, _ := ev.Uint("source"); src == 0 {
					samples++
				}
				if id, ok := ev.Str("span_id"); ok {
					linked++
					sampleSpans = append(sampleSpans, id)
				}
			default:
				if id, name, ok := spanOf(ev); ok {
					spans[id] = name
				}
			}
		}
	}
	for _, id := range sampleSpans {
		if _, ok := spans[id]; ok {
			linkedKnown++
		}
	}
	t.Logf("trace files: %d segments, %d on-CPU samples (OTLP got %d), %d linked, %d spans; %d linked samples name a span in the files",
		len(ents), samples, otlpSamples, linked, len(spans), linkedKnown)
	if samples != otlpSamples {
		t.Errorf("the trace files hold %d on-CPU samples, the OTLP backend got %d", samples, otlpSamples)
	}
	if float64(linked) < 0.9*float64(demoSamples) {
		t.Errorf("only %d samples in the files are linked to spans (%d in the demo's functions)", linked, demoSamples)
	}
	if float64(linkedKnown) < 0.95*float64(linked) {
		t.Errorf("only %d of %d linked samples name a span written to the files", linkedKnown, linked)
	}
	names := map[string]bool{}
	for _, n := range spans {
		names[n] = true
	}
	for _, r := range []string{"GET /items", "POST /upload", "GET /report"} {
		if !names[r] {
			t.Errorf("no span named %q in the trace files", r)
		}
	}
}

func readTrace(path string) ([]*wire.Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return wire.ReadAll(f)
}

// TestCollectorStartErrors checks that bad targets and configs stop the
// collector at start with a message that says what is wrong.
func TestCollectorStartErrors(t *testing.T) {
	requirePerf(t)
	const pipeline = `
exporters:
  debug: {}
service:
  pipelines:
    profiles:
      receivers: [perfprof]
      exporters: [debug]
`
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	// A process of the unprivileged user, which that user may profile on
	// CPU (paranoid 2) but not in kernel mode, as context-switch capture does.
	var ownPid int
	if os.Getuid() == 0 {
		own := exec.Command("sleep", "120")
		own.SysProcAttr = &syscall.SysProcAttr{Credential: nobody}
		if err := own.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = own.Process.Kill(); _ = own.Wait() })
		ownPid = own.Process.Pid
	}
	cases := []struct {
		name, receiver, want string
		cred                 *syscall.Credential
		starts               bool
	}{
		{
			name:     "missing pid",
			receiver: "receivers:\n  perfprof:\n    targets: {pids: [4194303]}\n",
			want:     "target pid 4194303: process 4194303: no such process",
		},
		{
			name:     "no targets",
			receiver: "receivers:\n  perfprof:\n    frequency: 99\n",
			want:     "targets: name at least one process in targets.pids, targets.executables, targets.cgroups or targets.container_ids",
		},
		{
			name: "unwritable trace directory",
			receiver: "receivers:\n  perfprof:\n    targets: {executables: [x]}\nexporters:\n  tracefile:\n    directory: /proc/perfprof-traces\n" +
				"service:\n  pipelines:\n    profiles:\n      receivers: [perfprof]\n      exporters: [tracefile]\n",
			want: "directory /proc/perfprof-traces",
		},
		{
			name:     "frequency",
			receiver: "receivers:\n  perfprof:\n    targets: {executables: [x]}\n    frequency: 50000\n",
			want:     "frequency: 50000 Hz is outside 1..10000",
		},
		{
			// An unprivileged user may not sample system-wide: the
			// collector must say why and what to do.
			name:     "permission denied",
			receiver: "receivers:\n  perfprof:\n    targets: {executables: [x]}\n    scope: system\n",
			want:     "perf_event_open denied",
			cred:     nobody,
		},
		{
			name:     "sched denied",
			receiver: fmt.Sprintf("receivers:\n  perfprof:\n    targets: {pids: [%d]}\n    sched: {enabled: true}\n", ownPid),
			want:     "set sched.enabled: false to profile on-CPU only",
			cred:     nobody,
		},
		{
			// ... and without sched capture the same user may profile its
			// own process.
			name:     "on-CPU only allowed",
			receiver: fmt.Sprintf("receivers:\n  perfprof:\n    targets: {pids: [%d]}\n", ownPid),
			want:     "Everything is ready",
			cred:     nobody,
			starts:   true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cred != nil {
				testchild.NeedRoot(t, "running the collector as another user")
				if p, _ := os.ReadFile("/proc/sys/kernel/perf_event_paranoid"); strings.TrimSpace(string(p)) < "1" {
					testchild.Unavailable(t, "kernel.perf_event_paranoid is %s: unprivileged system-wide sampling is allowed here", p)
				}
			}
			config := tc.receiver + pipeline
			if strings.Contains(tc.receiver, "service:") {
				config = tc.receiver
			}
			cmd, out := runCollector(t, config, tc.cred)
			if tc.starts {
				waitFor(t, out, tc.want, 20*time.Second)
				_ = cmd.Process.Signal(syscall.SIGTERM)
				if err := cmd.Wait(); err != nil {
					t.Fatalf("collector did not stop cleanly: %v\n%s", err, out.String())
				}
				return
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err == nil {
					t.Fatalf("collector exited 0; output:\n%s", out.String())
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("collector still running after 20 s; output:\n%s", out.String())
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Fatalf("output lacks %q:\n%s", tc.want, out.String())
			}
			if tc.cred != nil && !tc.starts {
				for _, w := range []string{"kernel.perf_event_paranoid is", "CAP_PERFMON", "fix:"} {
					if !strings.Contains(out.String(), w) {
						t.Errorf("permission error lacks %q", w)
					}
				}
			}
		})
	}
}

// spanOf returns the OTel span id (hex) and name of a span event the
// tracefile exporter writes: a SpanClose__ of dial9's span contract, or a
// SpanEvent of files written before it.
func spanOf(ev *wire.Event) (id, name string, ok bool) {
	switch n := ev.Name(); {
	case strings.HasPrefix(n, wire.NameSpanClosePrefix):
		id, _ = ev.Str("otel_span_id")
		name, _ = ev.Str("span_name")
		return id, name, true
	case n == "SpanEvent":
		id, _ = ev.Str("span_id")
		name, _ = ev.Str("name")
		return id, name, true
	}
	return "", "", false
}
