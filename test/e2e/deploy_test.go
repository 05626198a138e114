package e2e

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"

	"github.com/perfprof/perfprof/internal/container"
	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/testchild"
)

// A deployment layout of TestDeployments: where the collector and the
// apps run.
type deployLayout struct {
	name string
	// pod: the collector is a container of the apps' pod, all in one pid
	// namespace of the pod's (a sidecar with shareProcessNamespace);
	// else the collector runs in the test's (the host's) namespace.
	pod bool
	// containers: each app runs in a container of its own, pid 1 of a
	// pid namespace of its own (a per-node collector, hostPID).
	containers bool
	// spanners is how many instances of the thread-per-request app run:
	// two in containers of their own have the same pids and thread ids.
	spanners int
	// byID selects the targets by container id, not by cgroup path
	// (containers only).
	byID bool
	// cgroupNS: every container has a cgroup namespace of its own, as
	// containerd and CRI-O make them on cgroup v2 (the per-node
	// collector's too: it runs in a container of the host's pid
	// namespace). An app there finds no container id in its cgroup, and
	// is told its pod's uid (OTEL_RESOURCE_ATTRIBUTES, as the downward
	// API gives it); the collector sees the apps' cgroups relative to its
	// own.
	cgroupNS bool
}

var deployLayouts = []deployLayout{
	{name: "host", spanners: 2},
	{name: "pod", pod: true, spanners: 2, cgroupNS: true},
	{name: "container", containers: true, spanners: 1, cgroupNS: true},
	{name: "twin_containers", containers: true, spanners: 2, byID: true},
}

// Bounds of TestDeployments.
const (
	// deployCountTolerance bounds how far an app's sample counts in a
	// layout may be from the host's.
	deployCountTolerance = 0.10
	// The thread join of the spanner's samples (thread-per-request).
	deployJoinPrecision = 0.98
	deployJoinRecall    = 0.95
)

// spanFunctions maps each of the spanner's span functions to the name of
// the span that wraps it (internal/testchild/spanner).
var spanFunctions = map[string]string{"main.spanAlpha": "alpha", "main.spanBeta": "beta", "main.spanGamma": "gamma"}

// TestDeployments runs the built collector, with the default receiver
// configuration (ebpf auto, sched capture on), in the layouts users deploy
// it in, against one workload: the thread-per-request spanner (its spans
// joined by thread and time) and the otelhttp service with pkg/spanlabels
// (its spans read from goroutine labels by eBPF), both exporting spans to
// the collector over OTLP with the OTel Go SDK's process and container
// detectors on their resource:
//
//   - host: collector and apps in the test's namespaces (the baseline);
//   - pod: collector and apps containers of one pod, sharing its pid
//     namespace: the collector's pids are not the host's;
//   - container: the collector in a container of the host's pid namespace
//     (a per-node collector, hostPID), the spanner and the service each in
//     a container of its own, both pid 1 there, selected by their cgroups;
//     their spans name their processes and threads by the ids of their
//     own namespaces, and their pods by k8s.pod.uid: every container has
//     a cgroup namespace of its own, as on cgroup v2 (pod too);
//   - twin_containers: the collector on the host, with two spanners whose
//     processes and threads have the same ids in their namespaces, in
//     containers of the host's cgroup namespace (cgroup v1), selected by
//     container id; their spans name their containers by container.id.
//
// In each it checks that the apps' on-CPU and off-CPU sample counts in a
// fixed window are the host run's within 10%, that the spanner's samples
// in its spans are linked to the span that wraps their function, that the
// service's are linked to their own requests by their labels, that no
// sample is linked to a span of another app, and that the profiles of an
// app in a container carry its container.id and k8s.pod.uid.
func TestDeployments(t *testing.T) {
	requirePerf(t)
	testchild.RequireContainers(t)
	spanner := testchild.Build(t, "spanner")
	service := testchild.Build(t, "otelhttpsvc")
	var host map[string]deployCounts
	hostSet := map[string]float64{"spanner": 2, "service": 1} // instances in the host run
	for _, l := range deployLayouts {
		ok := t.Run(l.name, func(t *testing.T) {
			got := runDeployment(t, l, spanner, service)
			if l.name == "host" {
				host = got
				return
			}
			if host == nil {
				t.Fatal("no host run to compare with")
			}
			// Per kind, for the log; the bound is on the apps together,
			// as many of each as the host run had, for the statistics:
			// at 99 Hz a spanner has some 300 samples in the window, a
			// few percent of sampling noise each.
			var g, h deployCounts
			for kind, n := range hostSet {
				gk, hk := got[kind], host[kind]
				t.Logf("%s per instance: on-CPU %.0f samples in %v of CPU, %.1f per CPU-second (host %.0f in %v, %.1f: %+.1f%%); off-CPU %.0f (host %.0f, %+.1f%%)",
					kind, gk.onCPU, gk.cpu.Round(time.Millisecond), gk.perCPUSecond(), hk.onCPU, hk.cpu.Round(time.Millisecond), hk.perCPUSecond(),
					100*(gk.perCPUSecond()/hk.perCPUSecond()-1), gk.offCPU, hk.offCPU, 100*(gk.offCPU/hk.offCPU-1))
				g = deployCounts{onCPU: g.onCPU + n*gk.onCPU, offCPU: g.offCPU + n*gk.offCPU, cpu: g.cpu + time.Duration(n*float64(gk.cpu))}
				h = deployCounts{onCPU: h.onCPU + n*hk.onCPU, offCPU: h.offCPU + n*hk.offCPU, cpu: h.cpu + time.Duration(n*float64(hk.cpu))}
			}
			on, off := g.perCPUSecond()/h.perCPUSecond()-1, g.offCPU/h.offCPU-1
			t.Logf("the apps: %.1f on-CPU samples per CPU-second (host %.1f: %+.1f%%), %.0f off-CPU samples (host %.0f: %+.1f%%)",
				g.perCPUSecond(), h.perCPUSecond(), 100*on, g.offCPU, h.offCPU, 100*off)
			if math.Abs(on) > deployCountTolerance || math.Abs(off) > deployCountTolerance {
				t.Errorf("the apps had %.1f on-CPU samples per CPU-second and %.0f off-CPU samples; the host run %.1f and %.0f: want within %.0f%%",
					g.perCPUSecond(), g.offCPU, h.perCPUSecond(), h.offCPU, 100*deployCountTolerance)
			}
		})
		if !ok && l.name == "host" {
			return
		}
	}
}

// deployCounts are an app's samples per instance in the window of a run,
// and the CPU time it had there.
type deployCounts struct {
	onCPU, offCPU float64
	cpu           time.Duration
}

// perCPUSecond is the on-CPU samples per second of the app's CPU time:
// the sampling frequency when every sample arrives.
func (c deployCounts) perCPUSecond() float64 { return c.onCPU / c.cpu.Seconds() }

// deployApp is one app process of a run.
type deployApp struct {
	kind  string // "spanner" or "service"
	child *testchild.Child
	// pid is the process's pid in the test's namespace; local its pid in
	// its own (what it reports on its resource).
	pid, local int
	c          *testchild.Container // nil on the host
	// key names the app in samples and spans: its container id, or its
	// pid where the apps share the collector's namespace. Its spans name
	// it by pod instead where it finds no container id.
	key, pod string
	// cpu is the CPU time the app's threads had in the window.
	cpu time.Duration
}

// appCPU reads the CPU time of each app's threads so far.
func appCPU(t *testing.T, apps []*deployApp) map[*deployApp]uint64 {
	m := map[*deployApp]uint64{}
	for _, a := range apps {
		m[a] = testchild.Sum(testchild.ThreadCPU(t, a.pid))
	}
	return m
}

// runDeployment runs the collector and the apps in layout l for a fixed
// window, checks what arrived, and returns the apps' counts per kind.
func runDeployment(t *testing.T, l deployLayout, spannerBin, serviceBin string) map[string]deployCounts {
	profiles, spans, sinkAddr := startDeploySink(t)
	spansAddr, metricsAddr := freeAddr(t), freeAddr(t)
	dir := t.TempDir()
	truth := filepath.Join(dir, "truth.txt")
	// Copies under names of this run's own, which discovery by name
	// finds nowhere else on the machine; the driver's is the service's
	// under a name no selector names.
	spannerBin, serviceBin = copyBinary(t, spannerBin, dir, "spanner"), copyBinary(t, serviceBin, dir, "service")
	driver := copyBinary(t, serviceBin, dir, "driver")

	var pod *testchild.Pod
	if l.pod {
		pod = testchild.StartPod(t, testchild.ContainerSpec{})
	}
	// The apps' containers are made now (their ids go in the
	// configuration); they start once the collector listens.
	n := l.spanners + 1
	specs := make([]testchild.ContainerSpec, n)
	for i := range specs {
		specs[i] = testchild.ContainerSpec{ID: fmt.Sprintf("%02x%s", i+1, strings.Repeat("c0ffee", 10)+"ab"), CgroupNS: l.cgroupNS}
		if l.containers {
			specs[i].PodUID = fmt.Sprintf("%08x-0000-4000-8000-%012x", i+1, os.Getpid())
		}
	}
	targets := fmt.Sprintf("{executables: [%s, %s]}", filepath.Base(spannerBin), filepath.Base(serviceBin))
	switch {
	case l.containers && l.byID:
		ids := make([]string, n)
		for i, s := range specs {
			ids[i] = s.ID[:12]
		}
		targets = fmt.Sprintf("{container_ids: [%s]}", strings.Join(ids, ", "))
	case l.containers:
		// Unanchored: it matches the pods' cgroups seen from the
		// collector's cgroup namespace ("/../../kubepods-besteffort.slice/
		// kubepods-besteffort-pod….slice/…") as from the host's.
		targets = `{cgroups: ["kubepods-besteffort-pod*.slice"]}`
	}
	config := fmt.Sprintf(`receivers:
  perfprof:
    targets: %s
    protocols:
      grpc: {endpoint: %s}
`, targets, spansAddr) + sinkPipelines(sinkAddr, metricsAddr)
	coll := startDeployCollector(t, l, pod, dir, config)
	coll.wait(t, "Everything is ready")
	if strings.Contains(coll.log(), "Spans are read at sample time only with eBPF") || !strings.Contains(coll.log(), "Capturing context switches in the kernel") {
		t.Fatalf("the eBPF programs do not run in layout %s:\n%s", l.name, coll.log())
	}
	if l.pod && !strings.Contains(coll.log(), "The collector is in a pid namespace of its own") {
		t.Errorf("the collector in the pod did not say its programs use its pid namespace")
	}

	// A busy process on the host that no selector of a per-node
	// collector names: it must not be sampled.
	decoy := testchild.Start(t, testchild.Build(t, "burner"), "-alpha", "0.05", "-beta", "0", "-duration", "2m")

	// The workload: the spanners (one worker thread each, sleeping 10 ms
	// in a span per request, so that the apps stay below the machine's
	// two CPUs) and the service, with its driver.
	var apps []*deployApp
	start := func(i int, kind, bin string, args ...string) *deployApp {
		a := &deployApp{kind: kind}
		if l.cgroupNS {
			// Its pod's uid, as the downward API would give it.
			args = append([]string{"OTEL_RESOURCE_ATTRIBUTES=k8s.pod.uid=" + specs[i].PodUID, bin}, args...)
			bin = "env"
		}
		switch {
		case l.pod:
			a.c = pod.Exec(t, specs[i], bin, args...)
		case l.containers:
			a.c = testchild.StartContainer(t, specs[i], bin, args...)
		default:
			a.child = testchild.Start(t, bin, args...)
		}
		if a.c != nil {
			a.child = a.c.Child
			a.child.AwaitReady(t)
			if l.cgroupNS {
				a.pod = a.c.PodUID
			}
		}
		a.pid, a.local = a.child.Pid, a.child.Ready[0]
		a.key = fmt.Sprint(a.local)
		if l.containers {
			a.key = a.c.ID
		}
		apps = append(apps, a)
		return a
	}
	for i := range l.spanners {
		start(i, "spanner", spannerBin, "-workers", "1", "-duration", "0", "-wait", "10ms", "-late", "500ms", "-endpoint", spansAddr)
	}
	svc := start(l.spanners, "service", serviceBin, "serve", "-labels", "-endpoint", spansAddr, "-truth", truth, "-late", "500ms")
	coll.waitN(t, "Sampling process", len(apps))

	// The window: every app attached and running, the service driven.
	time.Sleep(time.Second)
	cpu0 := appCPU(t, apps)
	from := uint64(time.Now().UnixNano())
	drive := exec.Command(driver, "drive", "-url", fmt.Sprintf("http://127.0.0.1:%d", svc.child.Ready[1]), "-clients", "2", "-pause", "10ms", "-duration", "10s")
	drive.Stderr = os.Stderr
	out, err := drive.Output()
	to := uint64(time.Now().UnixNano())
	for a, c := range appCPU(t, apps) {
		a.cpu = time.Duration(c - cpu0[a])
	}
	if err != nil {
		t.Fatalf("driver: %v", err)
	}
	var requests, errs int
	if _, err := fmt.Sscanf(string(out), "done %d %d", &requests, &errs); err != nil || requests == 0 || errs > 0 {
		t.Fatalf("driver: %q", out)
	}
	// The service's threads as it knows them, for its ground truth.
	localTid := map[int64]int64{}
	if tids, err := container.ThreadIDs(svc.pid, 1<<12); err == nil {
		for local, tid := range tids {
			localTid[int64(tid)] = int64(local)
		}
	}
	metrics := mustScrape(t, "http://"+metricsAddr+"/metrics")

	// The apps flush their spans as they stop (the service writes its
	// truth); then the collector's final report joins what it holds.
	for _, a := range apps {
		if err := syscall.Kill(a.pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range apps {
		a.child.Line(t, 15*time.Second) // "done ..."
	}
	_ = decoy.Cmd.Process.Kill()
	time.Sleep(500 * time.Millisecond)
	coll.stop(t)

	gt := readGoTruth(t, truth)
	t.Logf("%s: %d requests; truth: %d spans; collector spans: %v", l.name, requests, len(gt.spans), spanOutcomes(metrics))
	if u := metrics.sum("otelcol_receiver_perfprof_spans", "outcome", "unmapped"); u > 0 {
		t.Errorf("%d spans could not be mapped to the collector's ids", u)
	}
	return judgeDeployment(t, l, apps, profiles, spans, gt, localTid, decoy.Pid, from, to)
}

// copyBinary copies the executable bin into dir as name-<run>, a name of
// this run's own, and returns its path.
func copyBinary(t *testing.T, bin, dir, name string) string {
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	// Short, so that it is the process's whole comm (15 bytes).
	p := filepath.Join(dir, fmt.Sprintf("%s-%d", name, os.Getpid()%100000+1000*rand.IntN(10)))
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// spanOutcomes are the collector's span counts by outcome.
func spanOutcomes(m metrics) map[string]int64 {
	out := map[string]int64{}
	for _, o := range []string{"indexed", "no_thread_id", "late", "over_limit", "invalid", "unmapped"} {
		if v := m.sum("otelcol_receiver_perfprof_spans", "outcome", o); v > 0 {
			out[o] = v
		}
	}
	return out
}

// judgeDeployment checks what the sinks got from a run.
func judgeDeployment(t *testing.T, l deployLayout, apps []*deployApp, profiles *profileServer, spans *spanSink,
	gt *goTruth, localTid map[int64]int64, decoy int, from, to uint64) map[string]deployCounts {
	profiles.mu.Lock()
	defer profiles.mu.Unlock()
	spans.mu.Lock()
	defer spans.mu.Unlock()

	// Which app a sample is of: by its resource's container.id in
	// containers, else by its pid (the collector's pids are the apps' own
	// here: the host's, or the pod's).
	sampleKey := func(st stackCount) string {
		if l.containers {
			return st.container
		}
		return fmt.Sprint(st.pid)
	}
	byKey := map[string]*deployApp{}
	for _, a := range apps {
		byKey[a.key] = a
	}
	type tally struct {
		on, off, onWindow, offWindow int
		inSpans, linked, rightSpan   int // spanner: samples in span functions
		wrongApp                     int // linked to a span of another app
		resources                    map[string]bool
	}
	tallies := map[*deployApp]*tally{}
	for _, a := range apps {
		tallies[a] = &tally{resources: map[string]bool{}}
	}
	inWindow := func(times []uint64) (n int) {
		for _, ts := range times {
			if ts >= from && ts < to {
				n++
			}
		}
		return n
	}
	var stray, decoySamples int
	strays := map[int64]int{}
	var serviceStacks []stackCount
	check := func(st stackCount, off bool) {
		if st.pid == int64(decoy) {
			decoySamples += len(st.times)
		}
		a := byKey[sampleKey(st)]
		if a == nil {
			stray += len(st.times)
			strays[st.pid] += len(st.times)
			return
		}
		x := tallies[a]
		x.resources[fmt.Sprintf("container.id=%s k8s.pod.uid=%s", st.container, st.pod)] = true
		if off {
			x.off += len(st.times)
			x.offWindow += inWindow(st.times)
		} else {
			x.on += len(st.times)
			x.onWindow += inWindow(st.times)
		}
		if st.linked {
			if sp, ok := spans.spans[st.span]; ok && !sp.of(a, l.containers) {
				x.wrongApp += len(st.times)
			}
		}
		if off {
			return
		}
		if a.kind == "service" {
			serviceStacks = append(serviceStacks, st)
			return
		}
		for fn, name := range spanFunctions {
			if !st.functions[fn] {
				continue
			}
			x.inSpans += len(st.times)
			if st.linked {
				x.linked += len(st.times)
				if sp := spans.spans[st.span]; sp.name == name {
					x.rightSpan += len(st.times)
				}
			}
		}
	}
	for _, st := range profiles.stacks {
		check(st, false)
	}
	for _, st := range profiles.offStacks {
		check(st, true)
	}
	if decoySamples > 0 || stray > 0 {
		t.Errorf("%d samples of the unselected process, %d of no app: by pid %v", decoySamples, stray, strays)
	}

	counts := map[string]deployCounts{}
	instances := map[string]int{}
	for _, a := range apps {
		x := tallies[a]
		t.Logf("%s %s (pid %d here, %d in its namespace): %d on-CPU and %d off-CPU samples (%d and %d in the %.1f s window); resources %v",
			a.kind, a.key, a.pid, a.local, x.on, x.off, x.onWindow, x.offWindow, float64(to-from)/1e9, slices.Sorted(maps.Keys(x.resources)))
		c := counts[a.kind]
		c.onCPU += float64(x.onWindow)
		c.offCPU += float64(x.offWindow)
		c.cpu += a.cpu
		counts[a.kind] = c
		t.Logf("  %v of CPU in the window: %.1f on-CPU samples per CPU-second", a.cpu.Round(time.Millisecond), float64(x.onWindow)/a.cpu.Seconds())
		instances[a.kind]++
		if x.onWindow == 0 || x.offWindow == 0 {
			t.Errorf("%s %s: %d on-CPU and %d off-CPU samples in the window", a.kind, a.key, x.onWindow, x.offWindow)
		}
		if x.wrongApp > 0 {
			t.Errorf("%s %s: %d samples linked to spans of another app", a.kind, a.key, x.wrongApp)
		}
		if a.c != nil {
			// A collector in the pod, in a cgroup namespace of its own,
			// sees the other containers' cgroups relative to its own
			// ("/../cri-containerd-….scope"): their pod's slice, its
			// own, is not in them. Their container ids are.
			pod := a.c.PodUID
			if l.pod && l.cgroupNS {
				pod = ""
			}
			want := fmt.Sprintf("container.id=%s k8s.pod.uid=%s", a.c.ID, pod)
			if len(x.resources) != 1 || !x.resources[want] {
				t.Errorf("%s %s: resources %v, want %s", a.kind, a.key, x.resources, want)
			}
		}
		if a.kind == "spanner" {
			precision, recall := float64(x.rightSpan)/float64(max(x.linked, 1)), float64(x.linked)/float64(max(x.inSpans, 1))
			t.Logf("  thread join: %d samples in span functions, %d linked (%.1f%%), %d of them to the span of their function (%.1f%%)",
				x.inSpans, x.linked, 100*recall, x.rightSpan, 100*precision)
			if x.inSpans < 100 || precision < deployJoinPrecision || recall < deployJoinRecall {
				t.Errorf("%s %s: thread join %.1f%% right, %.1f%% linked of %d samples in spans; want ≥ %.0f%%, ≥ %.0f%% of ≥ 100",
					a.kind, a.key, 100*precision, 100*recall, x.inSpans, 100*deployJoinPrecision, 100*deployJoinRecall)
			}
		}
	}
	for k, c := range counts {
		n := float64(instances[k])
		counts[k] = deployCounts{onCPU: c.onCPU / n, offCPU: c.offCPU / n, cpu: time.Duration(float64(c.cpu) / n)}
	}

	// The service: every linked sample in its own request, by its labels.
	var toLocal func(int64) int64
	if l.containers {
		toLocal = func(tid int64) int64 { return localTid[tid] }
	}
	j := judgeGoService(serviceStacks, gt, toLocal)
	t.Logf("  labels: %d samples of the service, %d in route functions, %d placed by its truth (%d in another route's burn), %d linked; %d in backgroundWork, %d linked",
		j.total, j.all.samples, j.all.placed, j.disagree, j.all.linked, j.bgSamples, j.bgLinked)
	for _, f := range []string{figOwnRequest, figOwnRoute, figExactSpan, figRecall, figBackground} {
		t.Logf("  %-50s %5.1f%%", f, 100*j.figures[f])
	}
	if j.all.placed < 100 || j.disagree > j.all.placed/50 {
		t.Errorf("service: %d route samples placed, %d in another route's burn: too few to judge, or tids not the truth's", j.all.placed, j.disagree)
	}
	for _, b := range goBounds {
		if v := j.figures[b.figure]; v < b.min || v > b.max {
			t.Errorf("service: %s %.1f%%, want within [%.0f%%, %.0f%%]", b.figure, 100*v, 100*b.min, 100*b.max)
		}
	}
	return counts
}

// deploySpan is a span the collector passed on, with its resource.
type deploySpan struct {
	name           string
	pid            int64
	container, pod string
}

// of reports whether s is a span of app a: of its container (or pod,
// when its resource names no container), or of its pid where the apps
// share the collector's namespace.
func (s deploySpan) of(a *deployApp, containers bool) bool {
	switch {
	case !containers:
		return fmt.Sprint(s.pid) == a.key
	case s.container != "":
		return s.container == a.key
	}
	return s.pod != "" && s.pod == a.pod
}

// spanSink is an OTLP/gRPC traces endpoint that keeps every span by id.
type spanSink struct {
	ptraceotlp.UnimplementedGRPCServer
	mu    sync.Mutex
	spans map[pcommon.SpanID]deploySpan
}

func (s *spanSink) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range req.Traces().ResourceSpans().All() {
		var res deploySpan
		if v, ok := rs.Resource().Attributes().Get(convention.ProcessPid); ok {
			res.pid = v.Int()
		}
		if v, ok := rs.Resource().Attributes().Get(convention.ContainerID); ok {
			res.container = v.Str()
		}
		if v, ok := rs.Resource().Attributes().Get(convention.K8sPodUID); ok {
			res.pod = v.Str()
		}
		for _, ss := range rs.ScopeSpans().All() {
			for _, sp := range ss.Spans().All() {
				d := res
				d.name = sp.Name()
				s.spans[sp.SpanID()] = d
			}
		}
	}
	return ptraceotlp.NewExportResponse(), nil
}

// sinkPipelines is the rest of a configuration whose perfprof receiver
// sends its profiles and spans to the sink at sinkAddr (startDeploySink),
// with the collector's metrics served at metricsAddr.
func sinkPipelines(sinkAddr, metricsAddr string) string {
	return fmt.Sprintf(`exporters:
  otlp_grpc:
    endpoint: %s
    tls: {insecure: true}
service:
  telemetry:
    metrics:
      readers:
        - pull:
            exporter:
              prometheus: {host: 127.0.0.1, port: %s, without_scope_info: true, without_units: true, without_type_suffix: true}
  pipelines:
    profiles: {receivers: [perfprof], exporters: [otlp_grpc]}
    traces: {receivers: [perfprof], exporters: [otlp_grpc]}
`, sinkAddr, strings.Split(metricsAddr, ":")[1])
}

// startDeploySink serves profiles and traces on one OTLP/gRPC port.
func startDeploySink(t *testing.T) (*profileServer, *spanSink, string) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	profiles := &profileServer{functions: map[string]int{}, pids: map[int64]int{}, roots: map[string]int{}}
	spans := &spanSink{spans: map[pcommon.SpanID]deploySpan{}}
	g := grpc.NewServer()
	pprofileotlp.RegisterGRPCServer(g, profiles)
	ptraceotlp.RegisterGRPCServer(g, spans)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return profiles, spans, lis.Addr().String()
}

// deployCollector is the collector of a run: a process of the test, or a
// container of the pod that logs to a file.
type deployCollector struct {
	cmd     *exec.Cmd   // on the host
	out     *syncBuffer // its output
	c       *testchild.Container
	logPath string
}

// startDeployCollector starts the collector of layout l: a container of
// pod, a container of the host's pid namespace (per node, with cgroup
// namespaces), or a process of the test.
func startDeployCollector(t *testing.T, l deployLayout, pod *testchild.Pod, dir, config string) *deployCollector {
	if pod == nil && !(l.containers && l.cgroupNS) {
		cmd, out := runCollector(t, config, nil)
		return &deployCollector{cmd: cmd, out: out}
	}
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	dc := &deployCollector{logPath: filepath.Join(dir, "collector.log")}
	// Guaranteed, as the DaemonSet's pod is (examples/kubernetes): no
	// pattern for the apps' besteffort pods selects it.
	spec := testchild.ContainerSpec{QoS: "guaranteed", CgroupNS: l.cgroupNS}
	args := []string{"-c", `exec "$@" >"$0" 2>&1`, dc.logPath, collector, "--config", path, "--feature-gates=service.profilesSupport"}
	if pod != nil {
		spec.QoS = ""
		dc.c = pod.Exec(t, spec, "sh", args...)
	} else {
		dc.c = testchild.StartHostContainer(t, spec, "sh", args...)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("collector output:\n%s", dc.log())
		}
	})
	return dc
}

func (dc *deployCollector) log() string {
	if dc.out != nil {
		return dc.out.String()
	}
	b, _ := os.ReadFile(dc.logPath)
	return string(b)
}

// wait waits up to 20 s for the collector to log want.
func (dc *deployCollector) wait(t *testing.T, want string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(dc.log(), want); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the collector did not log %q within 20 s:\n%s", want, dc.log())
		}
	}
}

// waitN waits up to 20 s for the collector to log want n times.
func (dc *deployCollector) waitN(t *testing.T, want string, n int) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); strings.Count(dc.log(), want) < n; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the collector did not log %q %d times within 20 s:\n%s", want, n, dc.log())
		}
	}
}

// stop stops the collector with SIGTERM and waits for its clean exit.
func (dc *deployCollector) stop(t *testing.T) {
	t.Helper()
	if dc.c == nil {
		if err := dc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := dc.cmd.Wait(); err != nil {
			t.Fatalf("collector did not exit cleanly on SIGTERM: %v", err)
		}
		return
	}
	if err := syscall.Kill(dc.c.HostPid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	dc.wait(t, "Shutdown complete")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", dc.c.HostPid)); err != nil || strings.Contains(string(b), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the collector's container did not exit 10 s after it logged its shutdown")
		}
	}
}
