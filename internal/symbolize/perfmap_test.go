package symbolize

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/perfprof/perfprof/internal/limits"
	"github.com/perfprof/perfprof/internal/testchild"
)

// jitSource maps anonymous executable memory, copies a tiny function into
// it, and describes it in /tmp/perf-PID.map like a JIT: two symbols out of
// address order at first, a third one appended when asked on stdin.
const jitSource = `#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int ret42(void) { return 42; }

int main(void)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	unsigned char *code = mmap(NULL, 3 * page, PROT_READ | PROT_WRITE | PROT_EXEC,
	                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (code == MAP_FAILED)
		return 1;
	memcpy(code, (void *)ret42, 16);
	char path[64];
	snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
	FILE *f = fopen(path, "w");
	if (f == NULL)
		return 1;
	fprintf(f, "%lx %zx jit_second\n", (unsigned long)(code + page), page);
	fprintf(f, "%lx 40 jit_first\n", (unsigned long)code);
	fflush(f);
	printf("code %p\npage %#zx\nready\n", (void *)code, page);
	fflush(stdout);
	char c;
	while (read(0, &c, 1) > 0) {
		fprintf(f, "0x%lx 0x20 LazyCompile:*third /app/x.js:3\n", (unsigned long)(code + 2 * page));
		fflush(f);
		printf("appended\n");
		fflush(stdout);
	}
	fclose(f);
	unlink(path);
	return 0;
}
`

func TestLookupJIT(t *testing.T) {
	bin := compileC(t, t.TempDir(), "jit.c", jitSource, "jit", "-O1")
	var pid int
	t.Cleanup(func() {
		if pid != 0 {
			os.Remove(fmt.Sprintf("/tmp/perf-%d.map", pid))
		}
	})
	ch := launch(t, exec.Command(bin))
	pid = ch.pid
	ch.waitReady(nil)
	code, page := ch.addrs["code"], ch.addrs["page"]
	if code == 0 || page == 0 {
		t.Fatalf("child printed %v", ch.addrs)
	}

	p, _ := openProcess(t, pid, Options{})
	check := func(pc uint64, want string) {
		t.Helper()
		loc := p.Lookup(pc)
		got := ""
		if len(loc.Frames) == 1 {
			got = loc.Frames[0].Function
		}
		if got != want {
			t.Errorf("Lookup(%#x) = %q (%d frames), want %q", pc, got, len(loc.Frames), want)
		}
		if loc.Mapping == nil || loc.Mapping.Path != "" {
			t.Errorf("Lookup(%#x): mapping %v, want the anonymous one", pc, loc.Mapping)
		}
	}
	check(code+4, "jit_first")
	check(code+page+100, "jit_second")
	check(code+0x40, "")     // past jit_first
	check(code+2*page+4, "") // not written yet

	if _, err := ch.stdin.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	if !ch.stdout.Scan() || ch.stdout.Text() != "appended" {
		t.Fatal("child did not append")
	}
	time.Sleep(perfMapMissInterval + 100*time.Millisecond)
	check(code+2*page+4, "LazyCompile:*third /app/x.js:3")
	check(code+4, "jit_first")
}

// current returns the newest names of m, as (start, end, name) triples.
func current(m *PerfMap) string {
	var b strings.Builder
	for _, s := range m.syms {
		fmt.Fprintf(&b, "{%d %d %s}", s.start, s.end, s.name)
	}
	return b.String()
}

func TestPerfMapAdd(t *testing.T) {
	type sym struct {
		start, end uint64
		name       string
	}
	tests := []struct {
		name string
		add  []sym
		want []sym
	}{
		{"in order", []sym{{0, 10, "a"}, {10, 20, "b"}}, []sym{{0, 10, "a"}, {10, 20, "b"}}},
		{"out of order", []sym{{10, 20, "b"}, {0, 10, "a"}, {30, 40, "d"}, {20, 25, "c"}},
			[]sym{{0, 10, "a"}, {10, 20, "b"}, {20, 25, "c"}, {30, 40, "d"}}},
		{"same range replaced", []sym{{0, 10, "a"}, {0, 10, "b"}}, []sym{{0, 10, "b"}}},
		{"inside splits", []sym{{0, 30, "a"}, {10, 20, "b"}}, []sym{{0, 10, "a"}, {10, 20, "b"}, {20, 30, "a"}}},
		{"covers several", []sym{{0, 10, "a"}, {10, 20, "b"}, {20, 30, "c"}, {5, 25, "d"}},
			[]sym{{0, 5, "a"}, {5, 25, "d"}, {25, 30, "c"}}},
		{"covers all", []sym{{10, 20, "a"}, {20, 30, "b"}, {0, 40, "c"}}, []sym{{0, 40, "c"}}},
	}
	for _, tt := range tests {
		var want strings.Builder
		for _, s := range tt.want {
			fmt.Fprintf(&want, "{%d %d %s}", s.start, s.end, s.name)
		}
		// One line per read, and all lines in one read, give the same map.
		t.Run(tt.name+"/one by one", func(t *testing.T) {
			var m PerfMap
			for _, s := range tt.add {
				m.addAll([]jitSym{{start: s.start, end: s.end, name: s.name, until: Latest}})
			}
			if got := current(&m); got != want.String() {
				t.Errorf("got %v, want %v", got, want.String())
			}
		})
		t.Run(tt.name+"/at once", func(t *testing.T) {
			var m PerfMap
			var lines []jitSym
			for _, s := range tt.add {
				lines = append(lines, jitSym{start: s.start, end: s.end, name: s.name, until: Latest})
			}
			m.addAll(lines)
			if got := current(&m); got != want.String() {
				t.Errorf("got %v, want %v", got, want.String())
			}
		})
	}
}

// TestPerfMapGenerations names addresses as the map stood when they were
// sampled: a line that reuses an address names it only from its
// generation on.
func TestPerfMapGenerations(t *testing.T) {
	var m PerfMap
	read := func(lines string) Gen {
		t.Helper()
		if _, err := m.parse(strings.NewReader(lines)); err != nil {
			t.Fatal(err)
		}
		m.sortHistory()
		return m.gen
	}
	g0 := read("0 a first\n14 a other\n")     // [0,10) first, [20,30) other
	g1 := read("0 a second\n")                // reuses [0,10)
	g2 := read("5 14 third\n32 8 appended\n") // [5,25): splits second, cuts other
	if g0 != 0 || g1 != 1 || g2 != 2 {
		t.Fatalf("generations %d %d %d, want 0 1 2", g0, g1, g2)
	}
	tests := []struct {
		pc   uint64
		at   Gen
		want string
	}{
		{3, g0, "first"},
		{3, g1, "second"},
		{3, g2, "second"}, // the part of second that third left
		{7, g0, "first"},
		{7, g1, "second"},
		{7, g2, "third"},
		{7, Latest, "third"},
		{22, g0, "other"},
		{22, g1, "other"},
		{22, g2, "third"},
		{27, g2, "other"},
		// Not named at g0: the oldest line read since names it.
		{0x33, g0, "appended"},
		{0x40, g0, ""},
	}
	for _, tt := range tests {
		got := ""
		if f, how := m.Lookup(tt.pc, tt.at); how != JITUnnamed {
			got = f.Function
		}
		if got != tt.want {
			t.Errorf("Lookup(%#x, %d) = %q, want %q", tt.pc, tt.at, got, tt.want)
		}
	}
	if st := m.Stats(); st.Replaced != 2 || st.Lines != 5 {
		t.Errorf("stats %+v: want 5 lines, 2 replacing", st)
	}
	for _, c := range []struct {
		pc   uint64
		at   Gen
		want JITNaming
	}{{3, g2, JITNewest}, {7, g1, JITOlder}, {0x33, g0, JITLater}, {0x40, g0, JITUnnamed}} {
		if _, how := m.Lookup(c.pc, c.at); how != c.want {
			t.Errorf("Lookup(%#x, %d) named it %d, want %d", c.pc, c.at, how, c.want)
		}
	}
	// A line that repeats the newest name changes nothing.
	if g := read("5 14 third\n"); g != g2 {
		t.Errorf("a repeated line made generation %d, want %d", g, g2)
	}
}

// TestPerfMapRewrite reads a map written anew (as a JVM writes it on
// Compiler.perfmap) from its start, larger or not, in place or replaced.
func TestPerfMapRewrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perf-1.map")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	name := func(m *PerfMap, pc uint64) string {
		f, _ := m.Lookup(pc, Latest)
		return f.Function
	}
	m := newPerfMapAt(path)
	write("1000 100 A::one\n2000 100 A::two\n")
	if _, err := m.Update(); err != nil {
		t.Fatal(err)
	}
	// Appended: read from where it stopped.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("3000 100 A::three\n")
	f.Close()
	if _, err := m.Update(); err != nil {
		t.Fatal(err)
	}
	if got := name(m, 0x3010); got != "A::three" {
		t.Fatalf("appended line: %q", got)
	}
	// Written anew in place, larger than before: the code at 0x2000 was
	// freed and reused; 0x1000 is unchanged.
	write("1000 100 A::one\n2000 80 B::reused\n3000 100 A::three\n4000 100 A::four\n")
	gen, err := m.Update()
	if err != nil {
		t.Fatal(err)
	}
	if got := name(m, 0x2010); got != "B::reused" {
		t.Errorf("after a rewrite 0x2010 is %q, want B::reused", got)
	}
	if got := name(m, 0x4010); got != "A::four" {
		t.Errorf("after a rewrite 0x4010 is %q, want A::four", got)
	}
	if f, _ := m.Lookup(0x2010, gen-1); f.Function != "A::two" {
		t.Errorf("before the rewrite 0x2010 is %q, want A::two", f.Function)
	}
	// Written anew through a new file, the same size.
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte("1000 100 A::one\n2000 80 C::again\n3000 100 A::three\n4000 100 A::four\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Update(); err != nil {
		t.Fatal(err)
	}
	if got := name(m, 0x2010); got != "C::again" {
		t.Errorf("after a replacement 0x2010 is %q, want C::again", got)
	}
	if st := m.Stats(); st.Rewrites != 2 {
		t.Errorf("%d rewrites counted, want 2", st.Rewrites)
	}
}

// TestPerfMapRereadAfterMiss: a map looked for before its process wrote
// it (a JVM before the collector asks it for one) is read as soon as the
// caller says it was written, not after the miss interval: in the second
// after attaching to a JVM, its samples were left unnamed.
func TestPerfMapRereadAfterMiss(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perf-1.map")
	m := newPerfMapAt(path)
	if _, err := m.Update(); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("no map yet: %v, want os.ErrNotExist", err)
	}
	if err := os.WriteFile(path, []byte("1000 100 A::one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Update(); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("looked for again within the miss interval: %v", err)
	}
	m.Reread()
	if _, err := m.Update(); err != nil {
		t.Fatal(err)
	}
	if f, how := m.Lookup(0x1010, Latest); f.Function != "A::one" || how != JITNewest {
		t.Errorf("after Reread 0x1010 is %q (%v), want A::one", f.Function, how)
	}
}

func TestPerfMapParse(t *testing.T) {
	// A partial last line is left for the next read; junk is skipped.
	in := "1000 10 a\nnot a line\n0x2000 0x10 b c d\n3000 0 zero\n4000 10 partial"
	var m PerfMap
	n, err := m.parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(strings.LastIndexByte(in, '\n') + 1); n != want {
		t.Errorf("parsed %d bytes, want %d", n, want)
	}
	if got, want := current(&m), "{4096 4112 a}{8192 8208 b c d}"; got != want {
		t.Errorf("got %v, want %v", got, want)
	}
}

// FuzzPerfMap reads arbitrary maps: the newest names must be the last line
// covering each address, in file order, and no lookup may panic.
func FuzzPerfMap(f *testing.F) {
	f.Add([]byte("1000 10 a\n1008 10 b\n0x1000 4 c\n"), uint16(0x1009), uint8(0))
	f.Add([]byte("0 ffffffffffffffff x\nffffffffffffffff 1 y\n"), uint16(3), uint8(1))
	f.Add([]byte("10 5 a b\r\n\n  \n12 2 c\n"), uint16(0x12), uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, pc16 uint16, at uint8) {
		var m PerfMap
		if _, err := m.parse(bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		m.sortHistory()
		for i := 1; i < len(m.syms); i++ {
			if m.syms[i-1].end > m.syms[i].start || m.syms[i].start >= m.syms[i].end {
				t.Fatalf("symbols overlap or are empty: %v", m.syms)
			}
		}
		pc := uint64(pc16)
		want, ok := "", false
		for line := range bytes.Lines(data) {
			if s, good := parseJITLine(line); good && s.start <= pc && pc < s.end {
				want, ok = s.name, true
			}
		}
		// A last line without its newline is not read.
		if len(data) > 0 && data[len(data)-1] != '\n' {
			last := data[bytes.LastIndexByte(data, '\n')+1:]
			if s, good := parseJITLine(last); good && s.start <= pc && pc < s.end {
				want, ok = "", false
				for line := range bytes.Lines(data[:len(data)-len(last)]) {
					if s, good := parseJITLine(line); good && s.start <= pc && pc < s.end {
						want, ok = s.name, true
					}
				}
			}
		}
		got, how := m.Lookup(pc, Latest)
		if gok := how != JITUnnamed; gok != ok || got.Function != want {
			t.Fatalf("Lookup(%#x) = %q %v, want %q %v", pc, got.Function, gok, want, ok)
		}
		// At the newest generation, the newest names; at any other, a
		// line that covers the address.
		if g, how := m.Lookup(pc, m.gen); (how != JITUnnamed) != ok || g.Function != want {
			t.Fatalf("Lookup(%#x, %d) = %q %d, want %q %v", pc, m.gen, g.Function, how, want, ok)
		}
		if g, how := m.Lookup(pc, Gen(at)); how != JITUnnamed {
			covers := false
			for line := range bytes.Lines(data) {
				if s, good := parseJITLine(line); good && s.start <= pc && pc < s.end && s.name == g.Function {
					covers = true
				}
			}
			if !covers {
				t.Fatalf("Lookup(%#x, %d) = %q, a name no line gives it", pc, at, g.Function)
			}
		}
	})
}

// TestPerfMapNoSymlink refuses a perf map that is a symbolic link: the
// target makes the file, and must not make us read one of ours.
func TestPerfMapNoSymlink(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("1000 100 secret_name\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "perf-1.map")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{link, fmt.Sprintf("/proc/%d/root%s", os.Getpid(), link)} {
		m := newPerfMapAt(name)
		if _, err := m.Update(); err == nil {
			t.Errorf("%s: a symbolic link was read", name)
		}
		if f, how := m.Lookup(0x1010, Latest); how != JITUnnamed {
			t.Errorf("%s: named %q from the link's target", name, f.Function)
		}
	}
}

func TestDisplayName(t *testing.T) {
	for in, want := range map[string]string{
		"long Burn.burnAlpha(long)": "Burn.burnAlpha",
		"void java.util.concurrent.ThreadPoolExecutor.runWorker(java.util.concurrent.ThreadPoolExecutor$Worker)": "java.util.concurrent.ThreadPoolExecutor.runWorker",
		"int[] a.b.C$D.<init>()":     "a.b.C$D.<init>",
		"JS:*burnAlpha /app/x.js:3":  "JS:*burnAlpha /app/x.js:3",
		"JS:~ node:tty:1:1":          "JS:~ node:tty:1:1",
		"StubRoutines (1)":           "StubRoutines (1)",
		"Interpreter":                "Interpreter",
		"py::main:/app/x.py":         "py::main:/app/x.py",
		"Builtin:ArrayPrototypePush": "Builtin:ArrayPrototypePush",
	} {
		if got := displayName(in); got != want {
			t.Errorf("displayName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestNoMappingIsJITOnlyWithAPerfMap: an address in no mapping of a
// process without a perf map is not JIT code (a frame pointer of code
// built without them points anywhere): it is no JIT frame, named or not.
// Once the process has a perf map, such an address is JIT code unmapped
// since, named by the map.
func TestNoMappingIsJITOnlyWithAPerfMap(t *testing.T) {
	pid := os.Getpid()
	path := fmt.Sprintf("/tmp/perf-%d.map", pid)
	os.Remove(path)
	t.Cleanup(func() { os.Remove(path) })
	p, _ := openProcess(t, pid, Options{})
	const pc = 0x1010 // below every mapping of a Go test binary
	if loc := p.LookupAt(pc, 0); loc.JIT != NotJIT || loc.Mapping != nil || len(loc.Frames) != 0 {
		t.Errorf("without a perf map: %+v, want no mapping, no frames, not JIT", loc)
	}
	if err := os.WriteFile(path, []byte("1000 100 jitfn\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(perfMapMissInterval + 100*time.Millisecond)
	if loc := p.LookupAt(pc, 0); loc.JIT == NotJIT || len(loc.Frames) != 1 || loc.Frames[0].Function != "jitfn" {
		t.Errorf("with a perf map: %+v, want JIT code named jitfn", loc)
	}
}

// TestPerfMapFIFO: a target that makes its perf map a FIFO (no privilege
// needed) blocked the poller inside open, with the map's lock held, until
// a writer came; now it is refused at once, directly and through the
// process's root.
func TestPerfMapFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perf-1.map")
	if err := unix.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{path, fmt.Sprintf("/proc/%d/root%s", os.Getpid(), path)} {
		m := newPerfMapAt(name)
		m.limits = limits.NewRecorder(nil)
		done := make(chan error, 1)
		go func() {
			_, err := m.Update()
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || m.Found() {
				t.Errorf("%s: a FIFO was read as a perf map (err %v)", name, err)
			}
			if n := m.limits.Counts()[limits.FileRefused]; n != 1 {
				t.Errorf("%s: refused %d times, want 1 counted", name, n)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: Update still waits on a FIFO after 5 s", name)
		}
	}
}

// A perf map truncated to a TiB (sparse: it costs its owner nothing) is
// read up to maxPerfMapBytes, in a fraction of a second, and counted once.
func TestPerfMapBytesBound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perf-1.map")
	if err := os.WriteFile(path, []byte("1000 10 first\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 1<<40); err != nil {
		testchild.Unavailable(t, "no sparse file: %v", err)
	}
	rec := limits.NewRecorder(nil)
	m := newPerfMapAt(path)
	m.limits = rec
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		for range 3 {
			if _, err := m.Update(); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("reading a sparse perf map of a TiB does not end")
	}
	t.Logf("3 updates in %v, %d bytes read", time.Since(start), m.read)
	if m.read > maxPerfMapBytes {
		t.Errorf("read up to %d, past %d", m.read, maxPerfMapBytes)
	}
	if f, how := m.Lookup(0x1004, Latest); how != JITNewest || f.Function != "first" {
		t.Errorf("Lookup = %+v, %v; want first", f, how)
	}
	if got := rec.Counts()[limits.FileTooLarge]; got != 1 {
		t.Errorf("FileTooLarge counted %d times, want 1", got)
	}
}

// A perf map keeps its first lines up to the bound, whether they come in
// one read or several, or again in the map written anew, and counts it
// once.
func TestPerfMapLinesBound(t *testing.T) {
	const bound = 100
	path := filepath.Join(t.TempDir(), "perf-1.map")
	lines := func(from, to int) []byte {
		var b []byte
		for i := from; i < to; i++ {
			b = fmt.Appendf(b, "%x 10 f%d\n", 0x1000+i*0x10, i)
		}
		return b
	}
	rec := limits.NewRecorder(nil)
	m := newPerfMapAt(path)
	m.limits, m.maxLines = rec, bound
	check := func(step string) {
		t.Helper()
		if _, err := m.Update(); err != nil {
			t.Fatal(err)
		}
		if len(m.syms) != bound {
			t.Errorf("%s: %d symbols, want %d", step, len(m.syms), bound)
		}
		if f, how := m.Lookup(0x1000+(bound-1)*0x10, Latest); how != JITNewest || f.Function != fmt.Sprint("f", bound-1) {
			t.Errorf("%s: the last line kept names %+v, %v", step, f, how)
		}
		if _, how := m.Lookup(0x1000+bound*0x10, Latest); how != JITUnnamed {
			t.Errorf("%s: a line past the bound names code: %v", step, how)
		}
		if got := rec.Counts()[limits.PerfMapSymbols]; got != 1 {
			t.Errorf("%s: PerfMapSymbols counted %d times, want 1", step, got)
		}
	}
	if err := os.WriteFile(path, lines(0, bound+50), 0o644); err != nil {
		t.Fatal(err)
	}
	check("one read")
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(lines(bound+50, bound+100))
	f.Close()
	check("appended")
	if err := os.WriteFile(path, lines(0, bound+100), 0o644); err != nil {
		t.Fatal(err)
	}
	m.Reread()
	check("written anew")
}
