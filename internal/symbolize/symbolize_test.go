package symbolize

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/testchild"
)

// The tests build small C and Go programs, run them as children that print
// the addresses of their functions and wait on stdin, and symbolize those
// addresses through /proc like the receiver does. addr2line (binutils) is the
// reference for file:line.

const cSource = `#include <dlfcn.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

long burn_a(long n)
{
	long s = 0;
	for (long i = 0; i < n; i++)
		s += i * i;
	return s;
}

long burn_b(long n)
{
	long s = 1;
	for (long i = 0; i < n; i++)
		s ^= burn_a(i) + i;
	return s;
}

int main(void)
{
	void *vdso = dlopen("linux-vdso.so.1", RTLD_LAZY | RTLD_NOLOAD);
	printf("burn_a %p\n", (void *)burn_a);
	printf("burn_b %p\n", (void *)burn_b);
	printf("getpid %p\n", (void *)getpid);
	printf("nanosleep %p\n", (void *)nanosleep);
	printf("clock_gettime %p\n", vdso ? dlsym(vdso, "__vdso_clock_gettime") : NULL);
	printf("ready\n");
	fflush(stdout);
	char c;
	while (read(0, &c, 1) > 0)
		;
	return (int)burn_b(3);
}
`

const goSource = `package main

import (
	"fmt"
	"os"
	"reflect"
)

//go:noinline
func burnA(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += i * i
	}
	return s
}

//go:noinline
func burnB(n int) int {
	s := 1
	for i := 0; i < n; i++ {
		s ^= burnA(i) + i
	}
	return s
}

func main() {
	fmt.Printf("main.burnA %#x\n", reflect.ValueOf(burnA).Pointer())
	fmt.Printf("main.burnB %#x\n", reflect.ValueOf(burnB).Pointer())
	fmt.Println("ready")
	b := make([]byte, 1)
	for {
		if _, err := os.Stdin.Read(b); err != nil {
			os.Exit(burnB(3) & 1)
		}
	}
}
`

var (
	buildDir  string
	buildOnce sync.Once
	buildErr  error
	bins      = map[string]string{} // variant → path
)

func TestMain(m *testing.M) {
	var err error
	buildDir, err = os.MkdirTemp("", "symbolize-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(buildDir)
	os.Exit(code)
}

// build builds every test program once, in parallel, and returns the path of
// variant.
func build(tb testing.TB, variant string) string {
	tb.Helper()
	buildOnce.Do(func() { buildErr = buildAll() })
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return bins[variant]
}

func buildAll() error {
	goDir := filepath.Join(buildDir, "goprog")
	if err := writeGoModule(goDir, "goprog", goSource); err != nil {
		return err
	}
	src := filepath.Join(buildDir, "prog.c")
	if err := os.WriteFile(src, []byte(cSource), 0o644); err != nil {
		return err
	}
	cflags := []string{"-fno-omit-frame-pointer", "-O1", "-fno-inline"}
	cmds := map[string]*exec.Cmd{}
	for variant, args := range map[string][]string{
		"c-g":     {"-g"},
		"c-nog":   nil,
		"c-nopie": {"-g", "-no-pie"},
	} {
		bins[variant] = filepath.Join(buildDir, variant)
		cmds[variant] = exec.Command("gcc", append(append(args, cflags...), "-o", bins[variant], src)...)
	}
	for variant, flags := range map[string][]string{
		"go":         nil,
		"go-ref":     nil, // DWARF 4, for addr2line (binutils 2.40 misreads Go's DWARF 5 lines)
		"go-strip":   {"-ldflags=-s -w"},
		"go-piestrp": {"-buildmode=pie", "-ldflags=-s -w"},
	} {
		bins[variant] = filepath.Join(buildDir, variant)
		cmds[variant] = goBuildCmd(goDir, bins[variant], flags...)
		if variant == "go-ref" {
			cmds[variant].Env = append(cmds[variant].Env, "GOEXPERIMENT=nodwarf5")
		}
	}
	return runBuilds(cmds)
}

func TestLookupC(t *testing.T) {
	for _, tc := range []struct {
		variant string
		dwarf   bool
	}{
		{"c-g", true},
		{"c-nog", false},
		{"c-nopie", true},
	} {
		t.Run(tc.variant, func(t *testing.T) {
			bin := build(t, tc.variant)
			ch := start(t, bin)
			p, _ := openProcess(t, ch.pid, Options{})
			for _, fn := range []string{"burn_a", "burn_b"} {
				for _, off := range []uint64{0, 4, 9} {
					pc := ch.addr(t, fn) + off
					got := lookupOne(t, p, pc)
					if got.Function != fn || got.SystemName != fn {
						t.Errorf("%s+%d: got function %q (system %q), want %q", fn, off, got.Function, got.SystemName, fn)
					}
					if !tc.dwarf {
						if got.File != "" || got.Line != 0 || got.StartLine != 0 {
							t.Errorf("%s+%d: got %s:%d (start %d) without DWARF", fn, off, got.File, got.Line, got.StartLine)
						}
						continue
					}
					want := addr2line(t, bin, fileAddr(t, ch.pid, bin, pc))
					if want.Function != fn {
						t.Fatalf("addr2line says %q at %s+%d", want.Function, fn, off)
					}
					if got.File != want.File || got.Line != want.Line {
						t.Errorf("%s+%d: got %s:%d, addr2line says %s:%d", fn, off, got.File, got.Line, want.File, want.Line)
					}
					if ws := sourceLine(t, cSource, "long "+fn+"("); got.StartLine != ws {
						t.Errorf("%s+%d: StartLine %d, want %d", fn, off, got.StartLine, ws)
					}
				}
			}
			m := p.Lookup(ch.addr(t, "burn_a")).Mapping
			if m.Path != bin || m.Deleted || m.BuildID == "" || m.Inode == 0 {
				t.Errorf("mapping %+v", *m)
			}
			checkBuildID(t, m, bin)
		})
	}
}

// TestLookupLibc resolves functions of a shared library and of the vDSO.
func TestLookupLibc(t *testing.T) {
	ch := start(t, build(t, "c-g"))
	p, _ := openProcess(t, ch.pid, Options{})
	for _, fn := range []string{"getpid", "nanosleep"} {
		pc := ch.addr(t, fn)
		loc := p.Lookup(pc + 1)
		if loc.Mapping == nil || !strings.Contains(filepath.Base(loc.Mapping.Path), "libc") {
			t.Fatalf("%s: mapping %v, want libc", fn, loc.Mapping)
		}
		if len(loc.Frames) != 1 || !strings.Contains(loc.Frames[0].Function, fn) {
			t.Errorf("%s+1 resolved to %+v", fn, loc.Frames)
		}
		if want := readelfBuildID(t, loc.Mapping.Path); loc.Mapping.BuildID != want {
			t.Errorf("libc build id %q, readelf says %q", loc.Mapping.BuildID, want)
		}
	}

	pc, ok := ch.addrs["clock_gettime"]
	if !ok || pc == 0 {
		testchild.Unavailable(t, "the child found no __vdso_clock_gettime")
	}
	loc := p.Lookup(pc)
	if loc.Mapping == nil || loc.Mapping.Path != "[vdso]" {
		t.Fatalf("vdso: mapping %v", loc.Mapping)
	}
	if len(loc.Frames) != 1 || !strings.Contains(loc.Frames[0].Function, "clock_gettime") {
		t.Errorf("__vdso_clock_gettime resolved to %+v", loc.Frames)
	}
}

func TestLookupGo(t *testing.T) {
	// The reference: addr2line on an unstripped build with DWARF 4. burnA and
	// burnB compile to the same code in every variant, so offsets carry over.
	refBin := build(t, "go-ref")
	ref := start(t, refBin)
	want := map[string]Frame{}
	offsets := []uint64{0, 5, 17}
	for _, fn := range []string{"main.burnA", "main.burnB"} {
		for _, off := range offsets {
			w := addr2line(t, refBin, fileAddr(t, ref.pid, refBin, ref.addr(t, fn)+off))
			if w.Function != fn || w.Line == 0 {
				t.Fatalf("addr2line says %+v at %s+%d", w, fn, off)
			}
			w.StartLine = sourceLine(t, goSource, "func "+strings.TrimPrefix(fn, "main.")+"(")
			want[fmt.Sprint(fn, "+", off)] = w
		}
	}

	for _, variant := range []string{"go", "go-strip", "go-piestrp"} {
		t.Run(variant, func(t *testing.T) {
			bin := build(t, variant)
			ch := start(t, bin)
			p, _ := openProcess(t, ch.pid, Options{})
			for _, fn := range []string{"main.burnA", "main.burnB"} {
				for _, off := range offsets {
					got := lookupOne(t, p, ch.addr(t, fn)+off)
					w := want[fmt.Sprint(fn, "+", off)]
					if got.Function != fn || got.SystemName != fn {
						t.Errorf("%s+%d: function %q (system %q)", fn, off, got.Function, got.SystemName)
					}
					if got.File != w.File || got.Line != w.Line || got.StartLine != w.StartLine {
						t.Errorf("%s+%d: got %s:%d (start %d), want %s:%d (start %d)", fn, off,
							got.File, got.Line, got.StartLine, w.File, w.Line, w.StartLine)
					}
				}
			}
		})
	}
}

// TestLookupSelf symbolizes the test binary itself: a big Go binary.
func TestLookupSelf(t *testing.T) {
	c := NewCache(Options{})
	defer c.Close()
	p, err := c.Process(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	pc := pcOf(TestLookupSelf)
	got := lookupOne(t, p, pc)
	if !strings.HasSuffix(got.Function, ".TestLookupSelf") || filepath.Base(got.File) != "symbolize_test.go" ||
		got.StartLine != sourceLineOfFile(t, "func TestLookupSelf(") {
		t.Errorf("got %+v", got)
	}
}

func sourceLineOfFile(tb testing.TB, prefix string) int {
	src, err := os.ReadFile("symbolize_test.go")
	if err != nil {
		tb.Fatal(err)
	}
	return sourceLine(tb, string(src), prefix)
}

// TestCacheSharing checks that two processes of one binary parse it once.
func TestCacheSharing(t *testing.T) {
	bin := build(t, "c-g")
	ch1, ch2 := start(t, bin), start(t, bin)
	p1, c := openProcess(t, ch1.pid, Options{})
	lookupOne(t, p1, ch1.addr(t, "burn_a"))
	if s := c.Stats(); s.BinariesParsed != 1 {
		t.Fatalf("after the first process: %+v", s)
	}
	opened := c.Stats().FilesOpened
	p2, err := c.Process(ch2.pid)
	if err != nil {
		t.Fatal(err)
	}
	if f := lookupOne(t, p2, ch2.addr(t, "burn_b")); f.Function != "burn_b" {
		t.Errorf("got %+v", f)
	}
	lookupOne(t, p2, ch2.addr(t, "burn_b"))
	s := c.Stats()
	if s.BinariesParsed != 1 {
		t.Errorf("after the second process: %+v, want 1 binary parsed", s)
	}
	// Only the vDSO, which has no file, is read again.
	if s.FilesOpened > opened+1 {
		t.Errorf("second process opened %d files", s.FilesOpened-opened)
	}
	if s.LookupsCached != 1 || s.LookupsResolved != 2 {
		t.Errorf("lookups: %+v", s)
	}
}

// TestCacheByteBound bounds the cache below what libc's tables take once
// its DWARF sections are dropped: the binaries stay within the bound except
// the one in use, lookups that alternate stay right, and without a bound
// both stay parsed.
func TestCacheByteBound(t *testing.T) {
	ch := start(t, build(t, "c-nog"))
	p, c := openProcess(t, ch.pid, Options{})
	lookupOne(t, p, ch.addr(t, "burn_a"))
	lookupOne(t, p, ch.addr(t, "getpid"))
	for range dwarfIdleTrims {
		c.Trim()
	}
	both := c.Stats()
	if both.BinariesParsed < 2 || both.BinariesEvicted != 0 {
		t.Fatalf("unbounded: %+v", both)
	}
	bound := both.BytesHeld / 2
	p, c = openProcess(t, ch.pid, Options{MaxBytes: bound})
	for range 3 {
		if f := lookupOne(t, p, ch.addr(t, "getpid")); !strings.Contains(f.Function, "getpid") {
			t.Errorf("getpid: %+v", f)
		}
		// libc alone is over the bound, but it is in use: it stays.
		if f := lookupOne(t, p, ch.addr(t, "burn_a")); f.Function != "burn_a" {
			t.Errorf("burn_a: %+v", f)
		}
		// The program is the binary in use now: libc goes.
		c.Trim()
		if s := c.Stats(); s.BytesHeld > bound {
			t.Errorf("holds %d bytes with a bound of %d", s.BytesHeld, bound)
		}
	}
	if s := c.Stats(); s.BinariesEvicted < 2 {
		t.Errorf("nothing evicted for bytes: %+v", s)
	}
	if s := c.Stats(); s.DWARFLoads > 0 && s.DWARFDrops == 0 {
		t.Errorf("DWARF sections held over the bound: %+v", s)
	}
}

// TestCacheEviction runs with room for one binary: lookups that alternate
// between the executable and libc evict and re-open, and stay right.
func TestCacheEviction(t *testing.T) {
	ch := start(t, build(t, "c-nog"))
	p, c := openProcess(t, ch.pid, Options{MaxBinaries: 1})
	for range 3 {
		if f := lookupOne(t, p, ch.addr(t, "burn_a")); f.Function != "burn_a" {
			t.Errorf("burn_a: %+v", f)
		}
		if f := lookupOne(t, p, ch.addr(t, "getpid")); !strings.Contains(f.Function, "getpid") {
			t.Errorf("getpid: %+v", f)
		}
	}
	if s := c.Stats(); s.Binaries != 1 || s.BinariesEvicted < 5 || s.BinariesParsed < 6 {
		t.Errorf("stats %+v", s)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if loc := p.Lookup(ch.addr(t, "burn_a")); loc.Mapping == nil || len(loc.Frames) != 0 {
		t.Errorf("after Close: %+v", loc)
	}
}

// TestDeletedBinary resolves a binary deleted after it started, through
// /proc/PID/map_files.
func TestDeletedBinary(t *testing.T) {
	data, err := os.ReadFile(build(t, "c-nog"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "deleted")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	ch := start(t, bin)
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	p, _ := openProcess(t, ch.pid, Options{})
	loc := p.Lookup(ch.addr(t, "burn_b") + 2)
	if loc.Mapping == nil || !loc.Mapping.Deleted || loc.Mapping.Path != bin {
		t.Fatalf("mapping %v", loc.Mapping)
	}
	if len(loc.Frames) != 1 || loc.Frames[0].Function != "burn_b" {
		t.Errorf("frames %+v", loc.Frames)
	}
}

// TestExitedProcess: a process that is gone is os.ErrNotExist; a process
// that exits after Process still resolves, from the files kept open.
func TestExitedProcess(t *testing.T) {
	ch := start(t, build(t, "c-nog"))
	pid := ch.pid
	p, c := openProcess(t, pid, Options{})
	ch.stop()

	if _, err := c.Process(pid); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Process(%d) of an exited process: %v, want os.ErrNotExist", pid, err)
	} else if !strings.Contains(err.Error(), fmt.Sprint("pid ", pid)) {
		t.Errorf("error %q does not name the pid", err)
	}
	if err := p.Refresh(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Refresh of an exited process: %v", err)
	}
	if f := lookupOne(t, p, ch.addr(t, "burn_a")); f.Function != "burn_a" {
		t.Errorf("after exit: %+v", f)
	}
	if _, err := c.Process(-1); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Process(-1): %v", err)
	}
}

// TestZombieProcess: a process that has exited but is not reaped yet
// still has its /proc entry, and an empty memory map. Refresh must say it
// is gone and keep the map it had, so that its last samples resolve; a
// profiler that symbolizes after the exit (a slow report, a target that
// ends as its profile is taken) meets exactly this.
func TestZombieProcess(t *testing.T) {
	ch := start(t, build(t, "c-nog"))
	pid := ch.pid
	p, c := openProcess(t, pid, Options{})
	before := len(p.Mappings())
	if err := ch.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.cmd.Wait() })
	// Until the parent waits, the process stays a zombie: its /proc
	// entry is there, its memory map is empty once the kill has torn
	// it down.
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
		if err != nil {
			t.Fatalf("maps of a zombie: %v", err)
		}
		if len(b) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still maps %d bytes 5 s after SIGKILL", pid, len(b))
		}
		time.Sleep(5 * time.Millisecond)
	}

	if err := p.Refresh(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Refresh of a zombie: %v, want os.ErrNotExist", err)
	}
	if n := len(p.Mappings()); n != before {
		t.Errorf("%d mappings after Refresh of a zombie, %d before", n, before)
	}
	// A miss a while after the last read re-reads the map: it must not
	// empty it either.
	p.lastRefresh = time.Now().Add(-2 * refreshInterval)
	p.Lookup(0x1000)
	if f := lookupOne(t, p, ch.addr(t, "burn_a")); f.Function != "burn_a" {
		t.Errorf("a zombie's code after a miss: %+v", f)
	}
	if _, err := c.Process(pid); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Process(%d) of a zombie: %v, want os.ErrNotExist", pid, err)
	}
}

func TestRefresh(t *testing.T) {
	ch := start(t, build(t, "c-nog"))
	p, _ := openProcess(t, ch.pid, Options{})
	before := p.Mappings()
	if len(before) < 3 {
		t.Fatalf("mappings %v", before)
	}
	if err := p.Refresh(); err != nil {
		t.Fatal(err)
	}
	after := p.Mappings()
	if len(after) != len(before) {
		t.Fatalf("%d mappings, then %d", len(before), len(after))
	}
	for i := range before {
		if before[i] != after[i] {
			t.Errorf("mapping %v changed pointer across Refresh", before[i])
		}
	}

	// A miss re-reads the maps, at most once a second.
	const nowhere = 0x1000
	last := p.lastRefresh
	if loc := p.Lookup(nowhere); loc.Mapping != nil || len(loc.Frames) != 0 {
		t.Errorf("Lookup(nowhere) = %+v", loc)
	}
	if p.lastRefresh != last {
		t.Errorf("a miss right after Refresh re-read the maps")
	}
	p.lastRefresh = time.Now().Add(-2 * refreshInterval)
	p.Lookup(nowhere)
	if !p.lastRefresh.After(last) {
		t.Errorf("a miss a while after Refresh did not re-read the maps")
	}
}

func TestKernel(t *testing.T) {
	k, err := LoadKernel()
	if errors.Is(err, ErrKernelAddressesHidden) {
		testchild.Unavailable(t, "%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	// Names by address: aliases share one (_text, _stext and the first
	// function of the kernel).
	names := map[uint64][]string{}
	want := map[string]uint64{}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || !strings.ContainsAny(f[1], "tTwW") {
			continue
		}
		addr, _ := strconv.ParseUint(f[0], 16, 64)
		names[addr] = append(names[addr], f[2])
		if f[2] == "do_syscall_64" || f[2] == "_text" || f[2] == "schedule" {
			want[f[2]] = addr
		}
	}
	if len(want) == 0 {
		testchild.Unavailable(t, "no well-known symbol in /proc/kallsyms")
	}
	for name, addr := range want {
		for _, pc := range []uint64{addr, addr + 1} {
			f, ok := k.Lookup(pc)
			if !ok || !slices.Contains(names[addr], f.Function) || f.File != "" {
				t.Errorf("Lookup(%s %#x) = %+v, %v; want one of %q", name, pc, f, ok, names[addr])
			}
		}
	}
	if _, ok := k.Lookup(0x1000); ok {
		t.Error("Lookup of a user address resolved")
	}
}

func pcOf(f func(*testing.T)) uint64 {
	return uint64(reflect.ValueOf(f).Pointer())
}
