package symbolize

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/testchild"
)

// Helpers shared by the tests of this package: building the test programs,
// running them as children, reading /proc/PID/maps and ELF headers
// independently of the code under test, and running the addr2line oracles.

// goTool returns the go command that builds the Go test programs.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(os.Getenv("GOROOT"), "bin", "go")
}

// writeGoModule writes src as main.go of a module named module in dir.
func writeGoModule(dir, module, src string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module "+module+"\n\ngo 1.24\n"), 0o644)
}

// goBuildCmd returns the command that builds the module in dir into out,
// with flags, without cgo and outside any workspace.
func goBuildCmd(dir, out string, flags ...string) *exec.Cmd {
	cmd := exec.Command(goTool(), append(append([]string{"build"}, flags...), "-o", out, ".")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=")
	return cmd
}

// runBuilds runs the build commands, by name, in parallel and returns their
// failures.
func runBuilds(cmds map[string]*exec.Cmd) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for name, cmd := range cmds {
		wg.Go(func() {
			if out, err := cmd.CombinedOutput(); err != nil {
				mu.Lock()
				defer mu.Unlock()
				errs = append(errs, fmt.Errorf("build %s: %v\n%s", name, err, out))
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// compileC writes code to dir/srcName and compiles it with gcc and flags into
// dir/binName, which it returns.
func compileC(t *testing.T, dir, srcName, code, binName string, flags ...string) string {
	t.Helper()
	src, bin := filepath.Join(dir, srcName), filepath.Join(dir, binName)
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", append(flags, "-o", bin, src)...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}

// child is a running test program.
type child struct {
	pid    int
	addrs  map[string]uint64 // function → runtime address, as printed
	stdin  io.WriteCloser
	stdout *bufio.Scanner
	cmd    *exec.Cmd
}

// launch starts cmd with pipes to its stdin and stdout, and stops it when
// the test ends.
func launch(tb testing.TB, cmd *exec.Cmd) *child {
	tb.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	c := &child{pid: cmd.Process.Pid, addrs: map[string]uint64{}, stdin: stdin, stdout: bufio.NewScanner(stdout), cmd: cmd}
	tb.Cleanup(c.stop)
	return c
}

// waitReady reads what the child prints up to the line "ready": lines
// "NAME ADDRESS" into addrs, and every line to other when it is not nil. It
// reports whether the child printed "ready" before it exited.
func (c *child) waitReady(other func(line string)) bool {
	for c.stdout.Scan() {
		line := c.stdout.Text()
		if other != nil && line != "ready" {
			other(line)
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			if name == "ready" {
				return true
			}
			continue
		}
		if a, err := strconv.ParseUint(val, 0, 64); err == nil {
			c.addrs[name] = a
		}
	}
	return false
}

// start runs bin until the test ends and reads the addresses it prints.
func start(tb testing.TB, bin string) *child {
	tb.Helper()
	c := launch(tb, exec.Command(bin))
	if !c.waitReady(nil) {
		tb.Fatalf("%s exited before it was ready", bin)
	}
	return c
}

func (c *child) stop() {
	c.stdin.Close()
	done := make(chan struct{})
	go func() { c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		c.cmd.Process.Kill()
		<-done
	}
}

func (c *child) addr(tb testing.TB, name string) uint64 {
	tb.Helper()
	a, ok := c.addrs[name]
	if !ok || a == 0 {
		tb.Fatalf("child did not print the address of %s", name)
	}
	return a
}

// openProcess returns a Process of pid from a new Cache with opts, closed
// when the test ends, and that Cache.
func openProcess(tb testing.TB, pid int, opts Options) (*Process, *Cache) {
	tb.Helper()
	c := NewCache(opts)
	tb.Cleanup(func() { c.Close() })
	p, err := c.Process(pid)
	if err != nil {
		tb.Fatal(err)
	}
	return p, c
}

// firstSegment returns the vaddr of the PT_LOAD segment at file offset 0 of
// the ELF file bin, and whether bin is loaded at fixed addresses (ET_EXEC).
func firstSegment(tb testing.TB, bin string) (vaddr uint64, fixed bool) {
	tb.Helper()
	ef, err := elf.Open(bin)
	if err != nil {
		tb.Fatal(err)
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Off == 0 {
			vaddr = p.Vaddr
		}
	}
	return vaddr, ef.Type == elf.ET_EXEC
}

// mapsLine is a file mapping of /proc/PID/maps, read independently of
// parseMaps.
type mapsLine struct {
	start, limit  uint64
	perms, offset string
	path          string
}

// readMaps returns the lines of /proc/PID/maps that map a file, and the text
// it read.
func readMaps(tb testing.TB, pid int) ([]mapsLine, []byte) {
	tb.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		tb.Fatal(err)
	}
	var ms []mapsLine
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) != 6 {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		s, _ := strconv.ParseUint(lo, 16, 64)
		l, _ := strconv.ParseUint(hi, 16, 64)
		ms = append(ms, mapsLine{start: s, limit: l, perms: f[1], offset: f[2], path: f[5]})
	}
	return ms, data
}

// loadBias returns runtime address - ELF vaddr for file path mapped by pid,
// from the mapping of file offset 0 (independently of the code under test):
// the start of that mapping minus the vaddr of the segment at offset 0.
func loadBias(tb testing.TB, pid int, path string) uint64 {
	tb.Helper()
	segVaddr, fixed := firstSegment(tb, path)
	if fixed {
		return 0
	}
	ms, _ := readMaps(tb, pid)
	for _, m := range ms {
		if m.path == path && m.offset == "00000000" {
			return m.start - segVaddr
		}
	}
	tb.Fatalf("no mapping at offset 0 of %s in pid %d", path, pid)
	return 0
}

// fileAddr translates a runtime address in bin into the address addr2line
// wants, independently of the code under test.
func fileAddr(tb testing.TB, pid int, bin string, pc uint64) uint64 {
	tb.Helper()
	return pc - loadBias(tb, pid, bin)
}

// fileLine splits an addr2line position FILE:LINE; "??" is no file.
func fileLine(pos string) (file string, line int) {
	if i := strings.LastIndexByte(pos, ':'); i >= 0 {
		file = pos[:i]
		line, _ = strconv.Atoi(pos[i+1:])
	}
	if file == "??" {
		file = ""
	}
	return file, line
}

// binutilsPos is the position in a line of binutils' addr2line, without the
// discriminator.
func binutilsPos(l string) string {
	pos, _, _ := strings.Cut(l, " (discriminator")
	return pos
}

// addr2line returns what binutils says about a file address in bin.
func addr2line(tb testing.TB, bin string, addr uint64) Frame {
	tb.Helper()
	out, err := exec.Command(testchild.LookTool(tb, "addr2line"), "-f", "-e", bin, fmt.Sprintf("%#x", addr)).Output()
	if err != nil {
		tb.Fatalf("addr2line: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		tb.Fatalf("addr2line output %q", out)
	}
	f := Frame{Function: lines[0]}
	f.File, f.Line = fileLine(binutilsPos(lines[1]))
	return f
}

// inlinedArgs are the arguments of addr2line -a -f -i -C for addrs in bin,
// for binutils and elfutils alike.
func inlinedArgs(bin string, addrs []uint64) []string {
	args := []string{"-a", "-f", "-i", "-C", "-e", bin}
	for _, a := range addrs {
		args = append(args, fmt.Sprintf("%#x", a))
	}
	return args
}

// parseInlined parses the lines of addr2line -a -f -i for addrs: each
// address as 0x%016x, then a function line and a position line per frame,
// innermost first. fn and pos take the function name and FILE:LINE out of
// their lines.
func parseInlined(lines []string, addrs []uint64, fn, pos func(string) string) ([][]Frame, error) {
	res := make([][]Frame, len(addrs))
	i := -1
	var name string
	haveFn := false
	for _, l := range lines {
		if i+1 < len(addrs) && !haveFn && l == fmt.Sprintf("0x%016x", addrs[i+1]) {
			i++
			continue
		}
		if i < 0 {
			return nil, fmt.Errorf("output starts with %q", l)
		}
		if !haveFn {
			name, haveFn = fn(l), true
			continue
		}
		haveFn = false
		f := Frame{Function: name}
		if f.Function == "??" {
			f.Function = ""
		}
		f.File, f.Line = fileLine(pos(l))
		res[i] = append(res[i], f)
	}
	if i != len(addrs)-1 {
		return nil, fmt.Errorf("answered for %d addresses of %d", i+1, len(addrs))
	}
	return res, nil
}

// sourceLine returns the 1-based line of src that starts with prefix.
func sourceLine(tb testing.TB, src, prefix string) int {
	tb.Helper()
	for i, l := range strings.Split(src, "\n") {
		if strings.HasPrefix(l, prefix) {
			return i + 1
		}
	}
	tb.Fatalf("no line %q", prefix)
	return 0
}

func lookupOne(tb testing.TB, p *Process, pc uint64) Frame {
	tb.Helper()
	loc := p.Lookup(pc)
	if loc.Address != pc {
		tb.Errorf("Lookup(%#x).Address = %#x", pc, loc.Address)
	}
	if loc.Mapping == nil {
		tb.Fatalf("Lookup(%#x): no mapping", pc)
	}
	if len(loc.Frames) != 1 {
		tb.Fatalf("Lookup(%#x) in %s: %d frames, want 1", pc, loc.Mapping, len(loc.Frames))
	}
	return loc.Frames[0]
}

var buildIDRE = regexp.MustCompile(`Build ID: ([0-9a-f]+)`)

func readelfBuildID(tb testing.TB, bin string) string {
	tb.Helper()
	out, err := exec.Command(testchild.LookTool(tb, "readelf"), "-n", bin).Output()
	if err != nil {
		tb.Fatalf("readelf: %v", err)
	}
	m := buildIDRE.FindSubmatch(out)
	if m == nil {
		return ""
	}
	return string(m[1])
}

// checkBuildID checks the build id of m against readelf on bin.
func checkBuildID(t *testing.T, m *Mapping, bin string) {
	t.Helper()
	if want := readelfBuildID(t, bin); m.BuildID != want {
		t.Errorf("build id %q, readelf says %q", m.BuildID, want)
	}
}

// inlineCallLines returns the lines of inlineCSource where acc calls sq and
// where work calls acc.
func inlineCallLines(t *testing.T) (callSq, callAcc int) {
	t.Helper()
	return sourceLine(t, inlineCSource, "\t\ts += sq(i)"), sourceLine(t, inlineCSource, "\t\tt += acc(")
}

// unitSources writes the C sources of a program of four compilation units
// (unit_a … unit_d, each calling an inlined helper of its own) and its
// main into dir, and returns the units' function names, their files and
// main's.
func unitSources(t *testing.T, dir string) (names, units []string, main string) {
	t.Helper()
	names = []string{"unit_a", "unit_b", "unit_c", "unit_d"}
	for _, n := range names {
		src := filepath.Join(dir, n+".c")
		code := fmt.Sprintf("static inline int helper_%[1]s(int x) { return x * 3 + 1; }\n"+
			"__attribute__((noinline)) int %[1]s(int x) { return helper_%[1]s(x) + helper_%[1]s(x ^ 5); }\n", n)
		if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
			t.Fatal(err)
		}
		units = append(units, src)
	}
	main = filepath.Join(dir, "main.c")
	if err := os.WriteFile(main, []byte("int unit_a(int), unit_b(int), unit_c(int), unit_d(int);\n"+
		"int main(int argc, char **argv) { return unit_a(argc) + unit_b(argc) + unit_c(argc) + unit_d(argc); }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return names, units, main
}
