package goruntime_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/perfprof/perfprof/internal/goruntime"
	"github.com/perfprof/perfprof/internal/limits"
	"github.com/perfprof/perfprof/internal/testchild"
)

func TestReadGoBinary(t *testing.T) {
	bin := testchild.Build(t, "golabels")
	l, err := goruntime.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", l)
	if l.GoVersion != runtime.Version() {
		t.Errorf("GoVersion %q, want %q", l.GoVersion, runtime.Version())
	}
	if l.FromTable {
		t.Error("FromTable set for a binary with DWARF")
	}
	if l.TLSG != -8 {
		t.Errorf("TLSG %d, want -8 for an internally linked binary", l.TLSG)
	}
	if l.Labels != goruntime.LabelsSlice || l.LabelSize != 32 || l.LabelKey != 0 || l.LabelValue != 16 || l.LabelList != 0 {
		t.Errorf("label layout %+v, want a slice of 32-byte {key, value string}", l)
	}
	known, ok := goruntime.Known(runtime.Version())
	if !ok {
		t.Fatalf("%s missing from the table of known releases", runtime.Version())
	}
	if l.GM != known.GM || l.GLabels != known.GLabels || l.MCurg != known.MCurg || l.GGoid != known.GGoid {
		t.Errorf("DWARF offsets m=%d labels=%d curg=%d, table has m=%d labels=%d curg=%d",
			l.GM, l.GLabels, l.MCurg, known.GM, known.GLabels, known.MCurg)
	}
}

func TestReadWithoutDWARF(t *testing.T) {
	withDWARF, err := goruntime.ReadFile(testchild.Build(t, "golabels"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := goruntime.ReadFile(testchild.Build(t, "golabels", "-ldflags=-w"))
	if err != nil {
		t.Fatal(err)
	}
	if !l.FromTable {
		t.Error("FromTable not set for a binary without DWARF")
	}
	l.FromTable = false
	if l != withDWARF {
		t.Errorf("without DWARF: %+v\nwith DWARF:    %+v", l, withDWARF)
	}
}

func TestReadNotGo(t *testing.T) {
	cc := testchild.LookTool(t, "gcc")
	dir := t.TempDir()
	src := filepath.Join(dir, "p.c")
	os.WriteFile(src, []byte("int main(void) { return 0; }\n"), 0o644)
	bin := filepath.Join(dir, "p")
	if out, err := exec.Command(cc, "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	if _, err := goruntime.ReadFile(bin); !errors.Is(err, goruntime.ErrNotGo) {
		t.Errorf("C binary: err %v, want ErrNotGo", err)
	}
	if _, err := goruntime.ReadFile(src); !errors.Is(err, goruntime.ErrNotGo) {
		t.Errorf("C source: err %v, want ErrNotGo", err)
	}
}

// A cgo binary whose C code has thread-locals keeps runtime.tlsg below
// them: the g pointer is no longer at -8 from the thread pointer.
func TestReadCgoTLS(t *testing.T) {
	testchild.LookTool(t, "gcc")
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module cgotls\n\ngo 1.24\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "main.go"), []byte(`package main

/*
__thread int buf[100];
int get(void) { return buf[3]; }
*/
import "C"

func main() { println(C.get()) }
`), 0o644)
	bin := filepath.Join(dir, "cgotls")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	l, err := goruntime.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	// The instruction the compiler emits to load g names the offset.
	out, err := exec.Command(testchild.LookTool(t, "objdump"), "-d", "--no-show-raw-insn", bin).Output()
	if err != nil {
		t.Fatalf("objdump: %v", err)
	}
	want := ""
	for _, line := range strings.Split(string(out), "\n") {
		if i := strings.Index(line, "mov    %fs:0x"); i >= 0 && strings.HasSuffix(line, ",%r14") {
			want = strings.TrimSuffix(line[i+len("mov    %fs:"):], ",%r14")
			break
		}
	}
	if want == "" {
		t.Fatal("no load of g from FS found")
	}
	if got := fmt.Sprintf("%#x", uint64(int64(l.TLSG))); got != want {
		t.Errorf("TLSG %d (%s), the code loads g from %%fs:%s", l.TLSG, got, want)
	}
}

// TestKnownMatchesDWARF checks the fallback table against the DWARF of
// binaries built with the other toolchains in the table, when they are in
// the module cache (GOTOOLCHAIN=go1.NN.P go version fetches one).
func TestKnownMatchesDWARF(t *testing.T) {
	modcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"go1.23.12", "go1.24.13", "go1.25.5"} {
		t.Run(v, func(t *testing.T) {
			root := filepath.Join(strings.TrimSpace(string(modcache)), "golang.org", "toolchain@v0.0.1-"+v+".linux-amd64")
			if _, err := os.Stat(filepath.Join(root, "bin", "go")); err != nil {
				t.Skipf("toolchain %s not in the module cache (GOTOOLCHAIN=%s go version fetches it)", v, v)
			}
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module labels\n\ngo 1.22\n"), 0o644)
			os.WriteFile(filepath.Join(dir, "main.go"), []byte(`package main

import (
	"context"
	"runtime/pprof"
)

func main() {
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("span_id", "0123456789abcdef")))
}
`), 0o644)
			bin := filepath.Join(dir, "labels")
			cmd := exec.Command(filepath.Join(root, "bin", "go"), "build", "-o", bin, ".")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOROOT="+root)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("build: %v\n%s", err, out)
			}
			l, err := goruntime.ReadFile(bin)
			if err != nil {
				t.Fatal(err)
			}
			known, ok := goruntime.Known(v)
			if !ok {
				t.Fatalf("%s not in the table", v)
			}
			known.GoVersion, known.TLSG = l.GoVersion, l.TLSG
			if l != known {
				t.Errorf("DWARF: %+v\ntable: %+v", l, known)
			}
		})
	}
}

// A Go binary with a section of DWARF that inflates to 513 MiB (half a
// MB on disk) is refused before debug/elf inflates it.
func TestReadInflatingDWARF(t *testing.T) {
	bin := testchild.Forge(t, testchild.Build(t, "golabels"), map[string][]byte{".zdebug_types": testchild.ZDebug(t, 513<<20)})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := goruntime.ReadFile(bin)
	runtime.ReadMemStats(&after)
	if k, ok := limits.KindOf(err); !ok || k != limits.CompressedSection {
		t.Errorf("err %v, want a %v", err, limits.CompressedSection)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
		t.Errorf("reading the layout allocated %d MB", alloc>>20)
	}
}
