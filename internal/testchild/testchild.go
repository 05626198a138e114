// Package testchild builds and runs the real workloads that perfprof's tests
// sample, makes the containers and pods they run in (StartContainer,
// StartPod), and decides what a test does when perf events are denied.
package testchild

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/perf"
)

// RequirePerfEnv makes a test fail, instead of skip, when this machine
// lacks what it needs to run: perf events, eBPF, root, a namespace, a tool
// that `make test` expects. CI sets it, so that no such test stops running
// unnoticed.
const RequirePerfEnv = "PERFPROF_REQUIRE_PERF"

// Unavailable ends a test that this machine cannot run, with the reason
// (format and args): it skips, or fails with PERFPROF_REQUIRE_PERF=1. It
// is the one gate of the tests' skips about the machine; a language
// runtime has its own (NeedRuntime), as have the browser and the design
// repository's files.
func Unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	gate(tb, RequirePerfEnv, format, args...)
}

// gate skips the test with the reason, or fails it when env is 1.
func gate(tb testing.TB, env, format string, args ...any) {
	tb.Helper()
	if os.Getenv(env) == "1" {
		tb.Fatalf(format+" (required: "+env+"=1)", args...)
	}
	tb.Skipf(format, args...)
}

// RequirePerf handles an error from opening perf events: a test that needs
// them skips, with the reason, when they are denied, unless
// PERFPROF_REQUIRE_PERF=1 (set by CI), in which case it fails. Any other
// error fails the test.
func RequirePerf(tb testing.TB, err error) {
	tb.Helper()
	RequireKernel(tb, "perf events", err, perf.ErrPermission, perf.ErrNotSupported)
}

// RequireKernel is RequirePerf for any kernel facility a test needs (what:
// "perf events", "BPF"): err wrapping one of unavailable (the facility is
// denied or missing here) skips the test with the reason, or fails it with
// PERFPROF_REQUIRE_PERF=1; any other error fails it.
func RequireKernel(tb testing.TB, what string, err error, unavailable ...error) {
	tb.Helper()
	if err == nil {
		return
	}
	for _, u := range unavailable {
		if errors.Is(err, u) {
			Unavailable(tb, "%s unavailable: %v", what, err)
		}
	}
	tb.Fatalf("%s: %v", what, err)
}

// LookTool returns the path of the executable name (a tool such as gcc,
// objcopy, unshare), or ends the test through Unavailable when it is not
// installed.
func LookTool(tb testing.TB, name string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		Unavailable(tb, "%s not installed: %v", name, err)
	}
	return path
}

// NeedRoot ends the test through Unavailable unless it runs as root; why
// says what needs it.
func NeedRoot(tb testing.TB, why string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		Unavailable(tb, "%s needs root", why)
	}
}

// RequireRuntimesEnv makes a test that needs a language runtime (node,
// java, python3) fail, instead of skip, when the runtime is not installed.
// It is not PERFPROF_REQUIRE_PERF: a machine may allow perf events and lack
// the runtime.
const RequireRuntimesEnv = "PERFPROF_REQUIRE_RUNTIMES"

// LookRuntime returns the path of the runtime executable name, from PATH or
// else /usr/bin. When it is not installed the test skips, with the reason,
// unless PERFPROF_REQUIRE_RUNTIMES=1, in which case it fails.
func LookRuntime(tb testing.TB, name string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if _, serr := os.Stat(filepath.Join("/usr/bin", name)); serr == nil {
			return filepath.Join("/usr/bin", name)
		}
		NeedRuntime(tb, "runtime %s not installed: %v", name, err)
	}
	return path
}

var (
	buildMu  sync.Mutex
	built    = map[string]string{}
	buildDir string
)

// Build compiles the Go program in internal/testchild/NAME (or, when name
// is a path with a slash, that package directory relative to the module
// root) once per test binary and returns the executable's path.
func Build(tb testing.TB, name string, extraArgs ...string) string {
	tb.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	key := name + "\x00" + strings.Join(extraArgs, " ")
	if p, ok := built[key]; ok {
		return p
	}
	ensureBuildDir(tb)
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..", "..")
	src := filepath.Join(filepath.Dir(self), name)
	if strings.Contains(name, "/") {
		src = filepath.Join(root, name)
	}
	out := filepath.Join(buildDir, fmt.Sprintf("%s-%d", filepath.Base(name), len(built)))
	args := append([]string{"build", "-o", out}, extraArgs...)
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Dir = src
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("build %s: %v\n%s", name, err, b)
	}
	built[key] = out
	return out
}

// ensureBuildDir makes the directory the test binary builds its children
// in. Called with buildMu held.
func ensureBuildDir(tb testing.TB) {
	if buildDir == "" {
		d, err := os.MkdirTemp("", "perfprof-testchild-")
		if err != nil {
			tb.Fatal(err)
		}
		buildDir = d
	}
}

// Child is a running workload.
type Child struct {
	Cmd *exec.Cmd
	Pid int
	// Ready holds the fields of the child's first stdout line after "ready".
	Ready []int
	lines chan string
	stdin io.WriteCloser
	// name is the program's, for messages.
	name string
}

// Send writes a line to the child's standard input.
func (c *Child) Send(tb testing.TB, line string) {
	tb.Helper()
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		tb.Fatalf("write to child: %v", err)
	}
}

// Line waits up to timeout for the child's next stdout line.
func (c *Child) Line(tb testing.TB, timeout time.Duration) string {
	tb.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			tb.Fatal("child closed its stdout")
		}
		return l
	case <-time.After(timeout):
		tb.Fatalf("no line from the child in %v", timeout)
	}
	return ""
}

// Lines returns the channel of the child's stdout lines after the ready
// line, for a test that waits for one while it does something else. It is
// closed when the child closes its stdout; lines arriving while the channel
// is full are dropped.
func (c *Child) Lines() <-chan string { return c.lines }

// Start runs bin and waits (up to 10 s) for its "ready ..." line. The child
// is killed when the test ends.
func Start(tb testing.TB, bin string, args ...string) *Child {
	tb.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", bin, err)
	}
	c := &Child{Cmd: cmd, Pid: cmd.Process.Pid, lines: make(chan string, 64), stdin: in, name: filepath.Base(bin)}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	go readLines(out, c.lines)
	c.AwaitReady(tb)
	return c
}

// readLines sends each line read from r to lines, dropping lines while
// lines is full, and closes lines at the end of r.
func readLines(r io.Reader, lines chan<- string) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		select {
		case lines <- sc.Text():
		default:
		}
	}
	close(lines)
}

// AwaitReady waits up to 10 s for the child's next stdout line, which must
// be "ready" followed by integers, and sets Ready to them. Start calls it;
// a child started otherwise (StartContainer) calls it when its program
// prints such a line.
func (c *Child) AwaitReady(tb testing.TB) {
	tb.Helper()
	name := c.name
	select {
	case line, ok := <-c.lines:
		if !ok || !strings.HasPrefix(line, "ready") {
			tb.Fatalf("%s: expected a ready line, got %q", name, line)
		}
		for _, f := range strings.Fields(line)[1:] {
			v, err := strconv.Atoi(f)
			if err != nil {
				tb.Fatalf("%s: bad ready line %q", name, line)
			}
			c.Ready = append(c.Ready, v)
		}
	case <-time.After(10 * time.Second):
		tb.Fatalf("%s did not get ready in 10 s", name)
	}
}

// ThreadCPU returns the CPU time in ns of each live thread of pid, from
// /proc/PID/task/TID/schedstat (nanosecond resolution, unlike stat).
func ThreadCPU(tb testing.TB, pid int) map[int]uint64 {
	tb.Helper()
	m, err := ReadThreadCPU(pid)
	if err != nil {
		tb.Fatalf("list threads: %v", err)
	}
	return m
}

// ReadThreadCPU is ThreadCPU for a goroutine other than the test's, which
// must not fail the test itself.
func ReadThreadCPU(pid int) (map[int]uint64, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, err
	}
	m := map[int]uint64{}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/schedstat", pid, tid))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) > 0 {
			v, _ := strconv.ParseUint(f[0], 10, 64)
			m[tid] = v
		}
	}
	return m, nil
}

// Sum adds up a ThreadCPU map.
func Sum(m map[int]uint64) uint64 {
	var s uint64
	for _, v := range m {
		s += v
	}
	return s
}

// BuildWithToolchain builds the standard-library-only child name (a
// directory of this package) with an older Go release, "go1.24.13", from
// the module cache, fetching it through the Go module proxy when missing
// (GOTOOLCHAIN=name go version), and returns the binary's path. When the
// toolchain cannot be had the test skips, or fails with
// PERFPROF_REQUIRE_RUNTIMES=1.
func BuildWithToolchain(tb testing.TB, toolchain, name string) string {
	tb.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	key := name + "\x00toolchain " + toolchain
	if p, ok := built[key]; ok {
		return p
	}
	modcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		tb.Fatalf("go env GOMODCACHE: %v", err)
	}
	root := filepath.Join(strings.TrimSpace(string(modcache)), "golang.org", "toolchain@v0.0.1-"+toolchain+".linux-"+runtime.GOARCH)
	goBin := filepath.Join(root, "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		fetch := exec.Command("go", "version")
		fetch.Env = append(os.Environ(), "GOTOOLCHAIN="+toolchain)
		if out, err := fetch.CombinedOutput(); err != nil {
			NeedRuntime(tb, "Go toolchain %s not in the module cache and not fetched: %v\n%s", toolchain, err, out)
		}
		if _, err := os.Stat(goBin); err != nil {
			NeedRuntime(tb, "Go toolchain %s fetched, but %s is missing: %v", toolchain, goBin, err)
		}
	}
	ensureBuildDir(tb)
	_, self, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(self), name)
	dir := filepath.Join(buildDir, fmt.Sprintf("%s-%s-src", filepath.Base(name), toolchain))
	files, err := filepath.Glob(filepath.Join(src, "*.go"))
	if err != nil || len(files) == 0 {
		tb.Fatalf("no Go files in %s: %v", src, err)
	}
	for i, f := range files {
		files[i] = filepath.Base(f)
	}
	copyFiles(tb, src, dir, files...)
	writeFile(tb, filepath.Join(dir, "go.mod"), []byte("module "+filepath.Base(name)+"\n\ngo 1.22\n"))
	out := filepath.Join(buildDir, fmt.Sprintf("%s-%s", filepath.Base(name), toolchain))
	cmd := exec.Command(goBin, "build", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOROOT="+root, "GOFLAGS=-mod=mod")
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("build %s with %s: %v\n%s", name, toolchain, err, b)
	}
	built[key] = out
	return out
}

// copyFiles copies the files names, paths relative to src, to the same
// paths under dir, making directories as needed.
func copyFiles(tb testing.TB, src, dir string, names ...string) {
	tb.Helper()
	for _, f := range names {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			tb.Fatal(err)
		}
		writeFile(tb, filepath.Join(dir, f), b)
	}
}

// writeFile writes data to path, making its directory.
func writeFile(tb testing.TB, path string, data []byte) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		tb.Fatal(err)
	}
}
