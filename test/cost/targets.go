package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/perfprof/perfprof/internal/testchild"
	"github.com/perfprof/perfprof/test/measure"
)

// The targets, by their -targets names, in the order of the table.
var targetNames = []string{"c-fp", "c-nofp", "c-short", "go", "node", "jvm"}

// target is a process for the collector to profile in a row: built once,
// started fresh for each run.
type target struct {
	name  string
	about string // what it is, for the header
	cmd   string // how it runs, for the header
	skip  string // why it cannot run on this machine; "" when it can
	// exe, when set, is the executable name the receiver selects its
	// processes by (targets: {executables: [exe]}) instead of a pid:
	// the target is a stream of processes.
	exe   string
	start func(ctx context.Context, t *tool, s *sink) (*running, error)
}

// running is a started target: its process, the pid the collector
// samples, and the helpers that give it work.
type running struct {
	pid     int
	procs   []*measure.Process // the target first
	stdin   io.WriteCloser     // kept open: the JVM stops when its stdin has data
	cleanup []func()
}

// exited is closed when any of the target's processes exits.
func (r *running) exited() <-chan struct{} {
	ch := make(chan struct{})
	for _, p := range r.procs {
		go func() {
			<-p.Exited()
			select {
			case <-ch:
			default:
				close(ch)
			}
		}()
	}
	return ch
}

// why says which of its processes exited and how, for an error.
func (r *running) why() string {
	var s []string
	for _, p := range r.procs {
		select {
		case <-p.Exited():
			s = append(s, fmt.Sprintf("%s exited (%v):\n%s", p.Name, p.Err(), p.Tail(10)))
		default:
		}
	}
	return strings.Join(s, "\n")
}

func (r *running) stop() {
	for _, p := range r.procs {
		p.Kill()
	}
	if r.stdin != nil {
		r.stdin.Close()
	}
	for _, f := range r.cleanup {
		f()
	}
}

// startReady starts a target's process and waits up to timeout for its
// "ready PID ..." line, returning the line's fields after "ready".
func startReady(ctx context.Context, name string, cmd *exec.Cmd, timeout time.Duration) (*measure.Process, []string, error) {
	p, err := measure.Start(name, cmd)
	if err != nil {
		return nil, nil, err
	}
	i, _, err := p.WaitLine(ctx, 0, timeout, "ready ")
	if err != nil {
		p.Kill()
		return nil, nil, fmt.Errorf("%w\n%s output:\n%s", err, name, p.Tail(20))
	}
	_, rest, _ := strings.Cut(p.Line(i), "ready ")
	return p, strings.Fields(rest), nil
}

// prepareTargets builds or finds what each target named in names needs,
// in t.tmp. A target that cannot run here gets its reason in skip.
func (t *tool) prepareTargets(ctx context.Context, names []string) ([]*target, error) {
	var out []*target
	for _, name := range names {
		var tg *target
		var err error
		switch name {
		case "c-fp", "c-nofp":
			tg, err = t.prepareC(ctx, name)
		case "c-short":
			tg, err = t.prepareShort(ctx)
		case "go":
			tg, err = t.prepareGo(ctx)
		case "node":
			tg = t.prepareNode()
		case "jvm":
			tg, err = t.prepareJVM(ctx)
		}
		if err != nil {
			return nil, fmt.Errorf("target %s: %w", name, err)
		}
		out = append(out, tg)
	}
	return out, nil
}

// prepareC builds internal/testchild/nofp/nofp.c as testchild.NoFP does
// (gcc -O2 -fomit-frame-pointer, with Debian's libz), or, for c-fp, the
// same with -fno-omit-frame-pointer: two threads that work until killed.
// Debian's libz and libc, where the threads spend much of their time, have
// no frame pointers in either build.
func (t *tool) prepareC(ctx context.Context, name string) (*target, error) {
	bin := filepath.Join(t.tmp, name)
	var extra []string
	about := "internal/testchild/nofp/nofp.c, 2 threads through 3 levels of its own functions into libz and libc, built without frame pointers (gcc -O2, as gcc builds by default)"
	if name == "c-fp" {
		extra = []string{"-fno-omit-frame-pointer"}
		about = "the same nofp.c built with -fno-omit-frame-pointer (libz and libc, Debian's, still without)"
	}
	tg := &target{name: name, about: about}
	cmd, err := testchild.NoFPCommand("c", bin, extra...)
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		tg.skip = err.Error()
		return tg, nil
	}
	if err != nil {
		return nil, err
	}
	tg.cmd = strings.Join(cmd.Args, " ")
	if err := t.runBuild(cmd); err != nil {
		return nil, err
	}
	tg.start = func(ctx context.Context, _ *tool, _ *sink) (*running, error) {
		p, ready, err := startReady(ctx, name, exec.CommandContext(ctx, bin), 10*time.Second)
		if err != nil {
			return nil, err
		}
		return &running{pid: atoiOr(ready, 0, p.Pid()), procs: []*measure.Process{p}}, nil
	}
	return tg, nil
}

// shortLife is how long each process of the c-short target lives.
const shortLife = time.Second

// prepareShort builds the program of c-nofp under the name c-short, and
// runs it as a stream of processes of shortLife each, one after the
// other, that the receiver finds by their executable name: the cost of
// profiling short-lived processes (discovery, attach, the maps of each
// new process; the binaries' symbols and unwind tables are read once, by
// build id), which a steady target does not show.
func (t *tool) prepareShort(ctx context.Context) (*target, error) {
	bin := filepath.Join(t.tmp, "c-short")
	tg := &target{name: "c-short", exe: "c-short",
		about: fmt.Sprintf("the program of c-nofp, a new process every %v living %v each (the receiver selects them by executable name)", shortLife, shortLife)}
	cmd, err := testchild.NoFPCommand("c", bin)
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		tg.skip = err.Error()
		return tg, nil
	}
	if err != nil {
		return nil, err
	}
	tg.cmd = strings.Join(cmd.Args, " ") + fmt.Sprintf("; while :; do timeout -s KILL %g %s; done", shortLife.Seconds(), bin)
	if err := t.runBuild(cmd); err != nil {
		return nil, err
	}
	tg.start = func(ctx context.Context, _ *tool, _ *sink) (*running, error) {
		loop := fmt.Sprintf("echo ready $$; while :; do timeout -s KILL %g %s >/dev/null; done", shortLife.Seconds(), bin)
		p, _, err := startReady(ctx, "c-short", exec.CommandContext(ctx, "sh", "-c", loop), 10*time.Second)
		if err != nil {
			return nil, err
		}
		return &running{procs: []*measure.Process{p}}, nil
	}
	return tg, nil
}

// goClients are the Go service's concurrent clients: with the service's
// background goroutine they keep about two CPUs busy, as the other
// targets' two threads do.
const goClients = 2

// prepareGo builds internal/testchild/otelhttpsvc: a net/http service with
// the contrib otelhttp handler and the OTel Go SDK exporting its spans over
// OTLP/gRPC (to a sink of this tool), GOMAXPROCS=2, driven by its own
// client mode with goClients clients without pause. Its ground-truth
// record interval is set to an hour, so that it records only at the start
// and end of each burn.
func (t *tool) prepareGo(ctx context.Context) (*target, error) {
	bin := filepath.Join(t.tmp, "otelhttpsvc")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./internal/testchild/otelhttpsvc")
	build.Dir = t.root
	if err := t.runBuild(build); err != nil {
		return nil, err
	}
	tg := &target{
		name:  "go",
		about: "internal/testchild/otelhttpsvc: a net/http service (otelhttp handler, OTel Go SDK exporting spans over OTLP/gRPC to a sink), GOMAXPROCS=2, driven by " + strconv.Itoa(goClients) + " keep-alive clients without pause",
		cmd:   "otelhttpsvc serve -endpoint SINK -interval 1h; otelhttpsvc drive -url http://127.0.0.1:PORT -clients " + strconv.Itoa(goClients) + " -duration D",
	}
	tg.start = func(ctx context.Context, t *tool, s *sink) (*running, error) {
		svc, ready, err := startReady(ctx, "otelhttpsvc serve", exec.CommandContext(ctx, bin, "serve", "-endpoint", s.addr, "-interval", "1h"), 10*time.Second)
		if err != nil {
			return nil, err
		}
		if len(ready) != 2 {
			svc.Kill()
			return nil, fmt.Errorf("otelhttpsvc: want \"ready PID PORT\", got %q", ready)
		}
		// It must drive through the warm-up and the window; it is killed
		// after them.
		d := t.warmup + t.window + time.Minute
		drive := exec.CommandContext(ctx, bin, "drive", "-url", "http://127.0.0.1:"+ready[1], "-clients", strconv.Itoa(goClients), "-duration", d.String())
		drv, err := measure.Start("otelhttpsvc drive", drive)
		if err != nil {
			svc.Kill()
			return nil, err
		}
		return &running{pid: svc.Pid(), procs: []*measure.Process{svc, drv}}, nil
	}
	return tg, nil
}

// nodeFlags run jitburn.js as internal/profiler's TestNodeJITFramesNamed
// does (the script says why each flag is there): --perf-basic-prof, as the
// README asks of a Node.js service, and the flags that keep its three
// threads burning in optimized, baseline and interpreted code.
var nodeFlags = []string{
	"--perf-basic-prof", "--interpreted-frames-native-stack", "--logfile=/dev/null",
	"--no-turbo-inlining", "--no-maglev-inlining", "--no-concurrent-recompilation",
	"--turbo-filter=-burnGamma", "--sparkplug-filter=-burnGamma", "--maglev-filter=-burnGamma",
}

// prepareNode finds node (PATH, else /usr/bin, as testchild.LookRuntime
// does) for internal/profiler/testdata/jitburn.js: three threads burning
// in JS functions while V8 keeps compiling, deoptimizing and reusing code
// memory, so that its perf map keeps growing, as a service's does.
func (t *tool) prepareNode() *target {
	tg := &target{name: "node", about: "internal/profiler/testdata/jitburn.js: a Node.js service in miniature, 3 threads (main and 2 workers) burning in JS functions that V8 keeps deoptimizing and recompiling, perf map on"}
	node, err := exec.LookPath("node")
	if err != nil {
		if _, serr := os.Stat("/usr/bin/node"); serr != nil {
			tg.skip = fmt.Sprintf("node not installed: %v", err)
			return tg
		}
		node = "/usr/bin/node"
	}
	version, _ := exec.Command(node, "--version").Output()
	script := filepath.Join(t.root, "internal", "profiler", "testdata", "jitburn.js")
	args := append(append([]string{}, nodeFlags...), script)
	tg.cmd = fmt.Sprintf("%s %s   (node %s)", node, strings.Join(args, " "), strings.TrimSpace(string(version)))
	tg.start = func(ctx context.Context, _ *tool, _ *sink) (*running, error) {
		cmd := exec.CommandContext(ctx, node, args...)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		p, _, err := startReady(ctx, "node", cmd, 30*time.Second)
		if err != nil {
			stdin.Close()
			return nil, err
		}
		r := &running{pid: p.Pid(), procs: []*measure.Process{p}, stdin: stdin,
			cleanup: []func(){func() { os.Remove(fmt.Sprintf("/tmp/perf-%d.map", p.Pid())) }}} // node never removes it
		// It waits for a line, so that a profiler can attach first; here
		// the collector starts after it, as on a host where the service
		// was already running.
		if _, err := io.WriteString(stdin, "go\n"); err != nil {
			r.stop()
			return nil, fmt.Errorf("node: send the go line: %w", err)
		}
		return r, nil
	}
	return tg
}

// jdkVersions are the JDKs looked for, in order: the one the tests
// require, then newer ones.
var jdkVersions = []string{testchild.RequiredJDK, "21", "25"}

// prepareJVM compiles test/e2e/testdata/JitBurn.java with the first JDK
// found: two threads burning in methods the JIT compiles, the main thread
// keeping the JIT busy with other code. The receiver's default leaves
// jvm.perf_map off, so its JIT frames stay unnamed (and it logs so once).
func (t *tool) prepareJVM(ctx context.Context) (*target, error) {
	tg := &target{name: "jvm", about: "test/e2e/testdata/JitBurn.java: 2 threads burning in JIT-compiled methods, the main thread compiling other code; no JVM flags"}
	var home string
	for _, v := range jdkVersions {
		if home = testchild.FindJDK(v); home != "" {
			break
		}
	}
	if home == "" {
		var globs []string
		for _, v := range jdkVersions {
			globs = append(globs, testchild.JDKGlobs(v)...)
		}
		tg.skip = "no JDK found (looked for a javac under " + strings.Join(globs, ", ") + ")"
		return tg, nil
	}
	classes := filepath.Join(t.tmp, "jvm")
	javac := exec.CommandContext(ctx, filepath.Join(home, "bin", "javac"), "-d", classes, filepath.Join(t.root, "test", "e2e", "testdata", "JitBurn.java"))
	if err := t.runBuild(javac); err != nil {
		return nil, err
	}
	java := filepath.Join(home, "bin", "java")
	version, _ := exec.Command(java, "-version").CombinedOutput()
	first, _, _ := strings.Cut(string(version), "\n")
	tg.cmd = fmt.Sprintf("%s -cp TMP/jvm JitBurn   (%s)", java, strings.TrimSpace(first))
	tg.start = func(ctx context.Context, _ *tool, _ *sink) (*running, error) {
		cmd := exec.CommandContext(ctx, java, "-cp", classes, "JitBurn")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		p, _, err := startReady(ctx, "jvm", cmd, 30*time.Second)
		if err != nil {
			stdin.Close()
			return nil, err
		}
		// Killed, the JVM leaves its performance data file behind.
		hsperf := func() {
			files, _ := filepath.Glob(filepath.Join(os.TempDir(), "hsperfdata_*", strconv.Itoa(p.Pid())))
			for _, f := range files {
				os.Remove(f)
			}
		}
		return &running{pid: p.Pid(), procs: []*measure.Process{p}, stdin: stdin, cleanup: []func(){hsperf}}, nil
	}
	return tg, nil
}

// runBuild runs a build command, failing with its output.
func (t *tool) runBuild(cmd *exec.Cmd) error {
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return nil
}

// atoiOr returns field i of f as an integer, or def.
func atoiOr(f []string, i, def int) int {
	if i < len(f) {
		if v, err := strconv.Atoi(f[i]); err == nil {
			return v
		}
	}
	return def
}
