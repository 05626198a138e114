package e2e

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"

	"github.com/perfprof/perfprof/internal/testchild"
)

// The privileges the collector needs, each a row of the README's table:
// TestLeastPrivilege grants them to an unprivileged user, then leaves each
// out in turn, and checks that README.md shows this table.
var privileges = []privilege{
	{
		capability: "CAP_PERFMON", needed: always,
		enables: "perf events on other users' processes whatever `kernel.perf_event_paranoid` says, " +
			"with kernel frames (`kernel_stacks: true`); with CAP_BPF, the eBPF programs",
		without: "at `kernel.perf_event_paranoid` 2 it starts, samples the user space of the processes it may ptrace " +
			"(CAP_SYS_PTRACE) and runs no eBPF program, warning \"this process lacks CAP_PERFMON\"; with `kernel_stacks: true`, " +
			"or at a paranoid level above 2, it fails to start: \"perf_event_open denied … CAP_PERFMON\"",
	},
	{
		capability: "CAP_BPF", needed: always,
		enables: "with CAP_PERFMON, the eBPF programs: the span reader (the span running at each sample, " +
			"from Go labels or OTEP 4947 thread contexts) and the scheduler program (off-CPU profiles)",
		without: "it starts, warns \"this process lacks CAP_BPF\", joins samples to spans by thread and time " +
			"and makes no off-CPU profile",
	},
	{
		capability: "CAP_SYS_PTRACE", needed: always,
		enables: "reading other users' processes in `/proc` (`exe`, `root`, memory): their binaries in another " +
			"container, for symbols and for the span reader",
		without: "it starts and samples, warning \"… needs CAP_SYS_PTRACE\": binaries outside its mount " +
			"namespace stay unsymbolized, and spans are joined by thread and time",
	},
	{
		capability: "CAP_SYSLOG", needed: kernelStacks,
		enables: "the addresses of `/proc/kallsyms`: names of kernel frames",
		without: "kernel frames stay unnamed, unless `kernel.kptr_restrict` is 0 and `kernel.perf_event_paranoid` " +
			"at most 1: \"… Grant the collector CAP_SYSLOG\"",
	},
}

// When a capability is needed: always, or for an option.
const (
	always       = "always"
	kernelStacks = "`kernel_stacks: true`"
)

// privilege is a row of the README's privilege table.
type privilege struct {
	capability string // as the kernel names it
	needed     string // always, or the configuration that needs it
	enables    string // what the collector does with it
	without    string // what it does without it, the others granted
}

// privRun is one run of the collector as an unprivileged user, with the
// capabilities its configuration needs but drop, and what it must show.
type privRun struct {
	name         string
	drop         string // a capability of privileges; "" for none
	kernelStacks bool   // the receiver's kernel_stacks
	want         func(sysctls) privOutcome
}

// sysctls are the settings that change what a run shows.
type sysctls struct {
	paranoid     int // kernel.perf_event_paranoid
	kptrRestrict int // kernel.kptr_restrict
}

// kallsymsShown says whether /proc/kallsyms shows addresses to a process
// with CAP_SYSLOG or not (kallsyms_show_value in kernel/kallsyms.c).
func (s sysctls) kallsymsShown(syslog bool) bool {
	return s.kptrRestrict == 0 && (syslog || s.paranoid <= 1) || s.kptrRestrict == 1 && syslog
}

// privOutcome is what a run must show.
type privOutcome struct {
	fails bool     // the collector exits at start
	says  []string // its output holds each
	// Of otelcol_receiver_perfprof_ebpf_programs: the span reader and the
	// scheduler program run.
	spanReader, scheduler bool
	symbols               bool // the target's functions are named
	offCPU                bool // an off-CPU profile of the target arrives
	kernelFrames          bool // stacks have named kernel frames
}

var privRuns = []privRun{
	{
		name: "full_set", kernelStacks: true,
		want: func(s sysctls) privOutcome {
			return privOutcome{spanReader: true, scheduler: true, symbols: true, offCPU: true, kernelFrames: s.kallsymsShown(true)}
		},
	},
	{
		name: "without_CAP_PERFMON", drop: "CAP_PERFMON",
		want: func(s sysctls) privOutcome {
			if s.paranoid >= 3 {
				return privOutcome{fails: true, says: []string{"perf_event_open denied", "CAP_PERFMON=false"}}
			}
			return privOutcome{symbols: true, says: []string{"this process lacks CAP_PERFMON"}}
		},
	},
	{
		name: "without_CAP_PERFMON_kernel_stacks", drop: "CAP_PERFMON", kernelStacks: true,
		want: func(s sysctls) privOutcome {
			if s.paranoid <= 1 {
				return privOutcome{symbols: true, kernelFrames: s.kallsymsShown(true), says: []string{"this process lacks CAP_PERFMON"}}
			}
			return privOutcome{fails: true, says: []string{"perf_event_open denied", "CAP_PERFMON=false"}}
		},
	},
	{
		name: "without_CAP_BPF", drop: "CAP_BPF",
		want: func(sysctls) privOutcome {
			return privOutcome{symbols: true, says: []string{"this process lacks CAP_BPF", "joining samples to spans by thread and time", "Off-CPU profiling is off"}}
		},
	},
	{
		name: "without_CAP_SYS_PTRACE", drop: "CAP_SYS_PTRACE",
		want: func(sysctls) privOutcome {
			return privOutcome{spanReader: true, scheduler: true, offCPU: true,
				says: []string{"needs CAP_SYS_PTRACE", "Its binaries outside this collector's mount namespace stay unsymbolized",
					"The span a thread runs cannot be read in this process; its samples are joined by thread and time"}}
		},
	},
	{
		name: "without_CAP_SYSLOG", drop: "CAP_SYSLOG", kernelStacks: true,
		want: func(s sysctls) privOutcome {
			o := privOutcome{spanReader: true, scheduler: true, symbols: true, offCPU: true, kernelFrames: s.kallsymsShown(false)}
			if !o.kernelFrames {
				o.says = []string{"Grant the collector CAP_SYSLOG"}
			}
			return o
		},
	},
}

// The user the collector runs as; the target runs as root, and its
// executable has this name.
const (
	privUser   = 65534
	privTarget = "perfprof-app"
)

// spannerFunctions are the functions the spanner burns in.
var spannerFunctions = []string{"main.spanAlpha", "main.spanBeta", "main.spanGamma", "main.burnOutside"}

var updateReadme = flag.Bool("update-readme", false, "rewrite README.md's privilege table from TestLeastPrivilege's")

// TestLeastPrivilege runs the built collector as the user nobody with
// exactly the capabilities of the README's privilege table, given by
// setpriv as ambient ones (and no others, bounding set included), against
// the spanner of root (another user) in a mount namespace of its own, as
// an application in another container is: its binary is at a path the
// collector does not see. With the full set, the target's samples arrive
// symbolized and joined to its spans, both eBPF programs run (the
// receiver's otelcol_receiver_perfprof_ebpf_programs) and off-CPU and
// kernel frames arrive. Then each capability is left out in turn, and the
// run must fail or degrade as privRuns says, naming what is missing. The
// README's table must be the one privileges renders.
func TestLeastPrivilege(t *testing.T) {
	t.Run("readme", testPrivilegeTable)

	testchild.NeedRoot(t, "running the collector as another user")
	requirePerf(t)
	for _, tool := range []string{"setpriv", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s (util-linux) is needed to run the collector with given capabilities and the target in its own mount namespace: %v", tool, err)
		}
	}
	sys := sysctls{paranoid: readSysctl(t, "kernel/perf_event_paranoid"), kptrRestrict: readSysctl(t, "kernel/kptr_restrict")}
	t.Logf("kernel.perf_event_paranoid %d, kernel.kptr_restrict %d", sys.paranoid, sys.kptrRestrict)
	kernelNames := kernelFunctions(t)

	// The collector's copy and its configs go in a directory that the
	// user nobody can read; the target's binary is copied into its mount
	// namespace, over app.
	dir, err := os.MkdirTemp("", "perfprof-privilege-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	app := filepath.Join(dir, "app")
	bin := filepath.Join(dir, "otelcol-perfprof")
	b, err := os.ReadFile(collector)
	for _, err := range []error{err, os.Chmod(dir, 0o755), os.Mkdir(app, 0o755), os.WriteFile(bin, b, 0o755)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	spanner := testchild.Build(t, "spanner")

	for _, run := range privRuns {
		t.Run(run.name, func(t *testing.T) {
			caps := capsFor(run)
			want := run.want(sys)
			srv, sinkAddr := startPrivSink(t, kernelNames)
			spansAddr := freeAddr(t)
			metricsAddr := freeAddr(t)
			// The target: root's spanner, as perfprof-app, which exists
			// only in its mount namespace. It starts after the collector
			// listens for its spans (a first export refused would hold
			// them back for seconds), unless the collector must fail at
			// start: then it must be there to be attached.
			var target *testchild.Child
			startTarget := func() {
				target = testchild.Start(t, "unshare", "--mount", "--propagation", "private", "sh", "-c",
					`mount -t tmpfs -o mode=0755 perfprof-app "$1" && cp "$2" "$1/`+privTarget+`" && shift 2 && exec "$@"`, "sh",
					app, spanner, filepath.Join(app, privTarget), "-workers", "2", "-duration", "0", "-wait", "3ms",
					"-late", "500ms", "-endpoint", spansAddr)
			}
			if want.fails {
				startTarget()
			}
			config := privilegeConfig(spansAddr, sinkAddr, metricsAddr, run.kernelStacks)
			cmd, out := startCollectorWith(t, dir, bin, config, caps)
			t.Logf("collector: uid %d, capabilities %v", privUser, caps)

			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			if want.fails {
				select {
				case err := <-exited:
					if err == nil {
						t.Fatalf("the collector exited 0, want a failure at start")
					}
				case <-time.After(20 * time.Second):
					t.Fatalf("the collector still runs after 20 s, want a failure at start")
				}
				checkSays(t, out.String(), want.says)
				return
			}
			waitOrExit := func(what string) {
				t.Helper()
				deadline := time.Now().Add(20 * time.Second)
				for !strings.Contains(out.String(), what) {
					select {
					case err := <-exited:
						t.Fatalf("the collector exited (%v) before it logged %q", err, what)
					case <-time.After(50 * time.Millisecond):
					}
					if time.Now().After(deadline) {
						t.Fatalf("the collector did not log %q within 20 s", what)
					}
				}
			}
			waitOrExit("Everything is ready")
			startTarget()
			waitOrExit(fmt.Sprintf(`"pid": %d, "executable"`, target.Pid)) // Sampling process
			t.Logf("target: pid %d, uid 0", target.Pid)
			checkCredentials(t, cmd.Process.Pid, caps)

			time.Sleep(4 * time.Second)
			metrics := mustScrape(t, "http://"+metricsAddr+"/metrics")
			// The target flushes its last spans as it stops; then the
			// collector's last report joins what it holds.
			if err := target.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			target.Line(t, 10*time.Second)
			_ = target.Cmd.Wait()
			time.Sleep(500 * time.Millisecond)
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("the collector did not stop cleanly: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("the collector did not stop in 20 s")
			}
			checkSays(t, out.String(), want.says)
			checkPrivRun(t, srv, metrics, target.Pid, want)
		})
	}
}

// checkPrivRun checks what arrived at the sink and what the collector's
// metrics say against want.
func checkPrivRun(t *testing.T, srv *privSink, metrics metrics, pid int, want privOutcome) {
	t.Helper()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	var samples, linked, named int
	for _, st := range srv.stacks {
		samples += st.count
		if st.linked {
			linked += st.count
		}
		if containsAny(st.functions, spannerFunctions) {
			named += st.count
		}
	}
	kernel := srv.kernel.Load()
	spanReader := metrics.sum("otelcol_receiver_perfprof_ebpf_programs", "program", "span_reader")
	scheduler := metrics.sum("otelcol_receiver_perfprof_ebpf_programs", "program", "scheduler")
	t.Logf("%d on-CPU samples of the target (pids %v): %d linked to spans, %d in its functions by name; %d off-CPU samples; %d samples with named kernel frames; eBPF programs: span reader %v, scheduler %v",
		samples, srv.pids, linked, named, srv.offCPU, kernel, spanReader, scheduler)

	// 4 s of two threads at 199 Hz burning most of the time, on a
	// machine that may give them a fraction of a CPU.
	if samples < 100 || srv.pids[int64(pid)] != samples {
		t.Errorf("%d on-CPU samples, by pid %v: want 100 at least, all of pid %d", samples, srv.pids, pid)
	}
	// Its spans carry thread.id: whichever way, samples are joined.
	if float64(linked) < 0.6*float64(samples) {
		t.Errorf("%d of %d samples linked to spans, want 60%%", linked, samples)
	}
	if want.symbols && float64(named) < 0.5*float64(samples) {
		t.Errorf("%d of %d samples in the target's functions by name, want 50%%: its binary was not read", named, samples)
	}
	if !want.symbols && named > 0 {
		t.Errorf("%d samples in the target's functions by name, want none: its binary should be out of reach", named)
	}
	if got := spanReader == 1; got != want.spanReader {
		t.Errorf("span reader running: %v, want %v", got, want.spanReader)
	}
	if got := scheduler == 1; got != want.scheduler {
		t.Errorf("scheduler program running: %v, want %v", got, want.scheduler)
	}
	if got := srv.offCPU > 0; got != want.offCPU {
		t.Errorf("%d off-CPU samples, want some: %v", srv.offCPU, want.offCPU)
	}
	if got := kernel > 0; got != want.kernelFrames {
		t.Errorf("%d samples with named kernel frames, want some: %v", kernel, want.kernelFrames)
	}
}

// privSink is the profiles endpoint of a run: a profileServer that also
// counts the samples, on- or off-CPU, whose stack names a kernel function
// (the off-CPU ones, stopped in the scheduler, all have kernel frames).
type privSink struct {
	*profileServer
	kernelNames map[string]bool
	kernel      atomic.Int64
}

func startPrivSink(t *testing.T, kernelNames map[string]bool) (*privSink, string) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &privSink{
		profileServer: &profileServer{functions: map[string]int{}, pids: map[int64]int{}, roots: map[string]int{}},
		kernelNames:   kernelNames,
	}
	g := grpc.NewServer()
	pprofileotlp.RegisterGRPCServer(g, srv)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return srv, lis.Addr().String()
}

func (s *privSink) Export(ctx context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	pd := req.Profiles()
	dic := pd.Dictionary()
	for i := 0; i < pd.ResourceProfiles().Len(); i++ {
		sps := pd.ResourceProfiles().At(i).ScopeProfiles()
		for j := 0; j < sps.Len(); j++ {
			profs := sps.At(j).Profiles()
			for k := 0; k < profs.Len(); k++ {
				samples := profs.At(k).Samples()
				for x := 0; x < samples.Len(); x++ {
					smp := samples.At(x)
					if s.kernelFrame(dic, smp.StackIndex()) {
						s.kernel.Add(int64(smp.TimestampsUnixNano().Len()))
					}
				}
			}
		}
	}
	return s.profileServer.Export(ctx, req)
}

// kernelFrame says whether the stack names a kernel function.
func (s *privSink) kernelFrame(dic pprofile.ProfilesDictionary, stack int32) bool {
	for _, li := range dic.StackTable().At(int(stack)).LocationIndices().AsRaw() {
		lines := dic.LocationTable().At(int(li)).Lines()
		for y := 0; y < lines.Len(); y++ {
			fn := dic.FunctionTable().At(int(lines.At(y).FunctionIndex()))
			if s.kernelNames[dic.StringTable().At(int(fn.NameStrindex()))] {
				return true
			}
		}
	}
	return false
}

func checkSays(t *testing.T, out string, says []string) {
	t.Helper()
	for _, s := range says {
		if !strings.Contains(out, s) {
			t.Errorf("the collector's output lacks %q", s)
		}
	}
}

// capsFor returns the capabilities that the configuration of run needs,
// but the one it drops.
func capsFor(run privRun) []string {
	var caps []string
	for _, p := range privileges {
		if p.capability != run.drop && (p.needed == always || p.needed == kernelStacks && run.kernelStacks) {
			caps = append(caps, p.capability)
		}
	}
	return caps
}

// startCollectorWith runs the collector bin with config as user privUser
// with exactly the capabilities caps: setpriv sets them as inheritable and
// ambient ones, which the collector's exec keeps, and clears the bounding
// set of all others.
func startCollectorWith(t *testing.T, dir, bin, config string, caps []string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	f, err := os.CreateTemp(dir, "config-*.yaml")
	if err == nil {
		_, err = f.WriteString(config)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	set := "-all"
	for _, c := range caps {
		set += ",+" + strings.ToLower(strings.TrimPrefix(c, "CAP_"))
	}
	id := strconv.Itoa(privUser)
	cmd := exec.Command("setpriv", "--reuid="+id, "--regid="+id, "--clear-groups",
		"--inh-caps="+set, "--ambient-caps="+set, "--bounding-set="+set,
		bin, "--config", f.Name(), "--feature-gates=service.profilesSupport")
	cmd.Dir = dir
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("collector output:\n%s", out.String())
		}
	})
	return cmd, out
}

// checkCredentials checks that the collector runs as privUser with the
// capabilities caps and no other, in every set (setpriv exec'ed it: the
// pid is the collector's).
func checkCredentials(t *testing.T, pid int, caps []string) {
	t.Helper()
	var want uint64
	for _, c := range caps {
		n, ok := capNumbers[c]
		if !ok {
			t.Fatalf("no number for %s", c)
		}
		want |= 1 << n
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	id := strconv.Itoa(privUser)
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "Uid", "Gid":
			if strings.Join(strings.Fields(v), " ") != strings.Repeat(id+" ", 3)+id {
				t.Errorf("collector %s %q, want %s throughout", k, v, id)
			}
		case "Groups":
			if v != "" {
				t.Errorf("collector supplementary groups %q, want none", v)
			}
		case "CapEff", "CapPrm", "CapBnd", "CapAmb":
			got, err := strconv.ParseUint(v, 16, 64)
			if err != nil || got != want {
				t.Errorf("collector %s %s, want %#x (%v)", k, v, want, caps)
			}
		}
	}
}

// capNumbers are the numbers of the capabilities of privileges
// (<linux/capability.h>).
var capNumbers = map[string]uint{"CAP_SYS_PTRACE": 19, "CAP_SYSLOG": 34, "CAP_PERFMON": 38, "CAP_BPF": 39}

// privilegeConfig profiles privTarget, takes its spans at spans, exports
// profiles to sink and serves the collector's metrics at metrics.
func privilegeConfig(spans, sink, metrics string, kernelStacks bool) string {
	host, port, _ := net.SplitHostPort(metrics)
	return fmt.Sprintf(`receivers:
  perfprof:
    targets: {executables: [%s]}
    discovery_interval: 200ms
    frequency: 199
    report_interval: 1s
    protocols:
      grpc: {endpoint: %s}
    correlation: {window: 2s}
    kernel_stacks: %t
exporters:
  otlp_grpc:
    endpoint: %s
    tls: {insecure: true}
service:
  telemetry:
    metrics:
      level: basic
      readers:
        - pull:
            exporter:
              prometheus: {host: %s, port: %s, without_scope_info: true, without_units: true, without_type_suffix: true}
  pipelines:
    profiles: {receivers: [perfprof], exporters: [otlp_grpc]}
`, privTarget, spans, kernelStacks, sink, host, port)
}

// kernelFunctions returns the names of the kernel's functions, from
// /proc/kallsyms (names show whatever kptr_restrict hides).
func kernelFunctions(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 3 && (fs[1] == "t" || fs[1] == "T") {
			names[fs[2]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

func readSysctl(t *testing.T, name string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return v
}

// The README's privilege table is between these lines.
const (
	tableBegin = "<!-- privilege table: TestLeastPrivilege's (test/e2e/privilege_test.go), which checks every row; edit it there and run the test with -update-readme -->\n"
	tableEnd   = "<!-- end of the privilege table -->\n"
)

// privilegeTable renders privileges as the README shows them.
func privilegeTable() string {
	var b strings.Builder
	b.WriteString("| Capability | Needed | What perfprof does with it | Without it (the others granted) |\n|---|---|---|---|\n")
	for _, p := range privileges {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", p.capability, p.needed, p.enables, p.without)
	}
	return b.String()
}

// testPrivilegeTable checks that README.md shows privilegeTable, or with
// -update-readme writes it there.
func testPrivilegeTable(t *testing.T) {
	path := filepath.Join(root, "README.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	before, rest, ok := strings.Cut(readme, tableBegin)
	got, after, ok2 := strings.Cut(rest, tableEnd)
	if !ok || !ok2 {
		t.Fatalf("README.md has no privilege table between the lines\n%s and\n%s", tableBegin, tableEnd)
	}
	want := privilegeTable()
	if got == want {
		return
	}
	if *updateReadme {
		if err := os.WriteFile(path, []byte(before+tableBegin+want+tableEnd+after), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote README.md's privilege table")
		return
	}
	t.Errorf("README.md's privilege table differs from TestLeastPrivilege's (run it with -update-readme to write it):\nREADME:\n%s\ntest:\n%s", got, want)
}
