package symbolize

import (
	"debug/elf"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// inlineSource has a chain of calls that the compiler inlines:
// main.loop → inl1 → inl2, where inl2 calls capture (not inlined). capture
// prints the return address into the inlined code and what
// runtime.CallersFrames, the ground truth for inline expansion, makes of it.
const inlineSource = `package main

import (
	"fmt"
	"os"
	"runtime"
)

//go:noinline
func capture() {
	// Callers returns one pc per frame, inlined ones too: all of them are
	// the same return address or, for the inlined ones, markers next to it.
	var pcs [8]uintptr
	n := runtime.Callers(2, pcs[:])
	fmt.Printf("pc %#x\n", pcs[0])
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		fmt.Printf("frame %s %s %d\n", f.Function, f.File, f.Line)
		if !more || f.Function == "main.loop" {
			break
		}
	}
}

func inl2(x int) int {
	if x == 8 {
		capture()
	}
	return x * 3
}

func inl1(x int) int {
	return inl2(x+1) + 1
}

//go:noinline
func loop(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += inl1(i)
	}
	return s
}

func main() {
	loop(10)
	fmt.Println("ready")
	b := make([]byte, 1)
	for {
		if _, err := os.Stdin.Read(b); err != nil {
			os.Exit(loop(3) & 1)
		}
	}
}
`

var (
	inlineOnce sync.Once
	inlineBins map[string]string
	inlineErr  error
)

// buildInline builds inlineSource plain, stripped, and as a stripped PIE.
func buildInline(tb testing.TB) map[string]string {
	tb.Helper()
	inlineOnce.Do(func() {
		dir := filepath.Join(buildDir, "inlprog")
		if inlineErr = writeGoModule(dir, "inlprog", inlineSource); inlineErr != nil {
			return
		}
		inlineBins = map[string]string{}
		cmds := map[string]*exec.Cmd{}
		for variant, flags := range map[string][]string{
			"plain":     nil,
			"strip":     {"-ldflags=-s -w"},
			"pie-strip": {"-buildmode=pie", "-ldflags=-s -w"},
		} {
			inlineBins[variant] = filepath.Join(buildDir, "inl-"+variant)
			cmds[variant] = goBuildCmd(dir, inlineBins[variant], flags...)
		}
		inlineErr = runBuilds(cmds)
	})
	if inlineErr != nil {
		tb.Fatal(inlineErr)
	}
	return inlineBins
}

// startInline runs bin and returns the child, the pc it captured and the
// frames runtime.CallersFrames reported for it.
func startInline(t *testing.T, bin string) (*child, uint64, []Frame) {
	t.Helper()
	ch := launch(t, exec.Command(bin))
	var pc uint64
	var want []Frame
	ready := ch.waitReady(func(line string) {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "pc" && pc == 0:
			pc, _ = strconv.ParseUint(f[1], 0, 64)
		case len(f) == 4 && f[0] == "frame":
			line, _ := strconv.Atoi(f[3])
			want = append(want, Frame{Function: f[1], File: f[2], Line: line})
		}
	})
	if !ready {
		t.Fatalf("%s exited before it was ready", bin)
	}
	return ch, pc, want
}

func TestLookupGoInlined(t *testing.T) {
	bins := buildInline(t)
	for _, variant := range []string{"plain", "strip", "pie-strip"} {
		t.Run(variant, func(t *testing.T) {
			ch, pc, want := startInline(t, bins[variant])
			if len(want) != 3 || want[0].Function != "main.inl2" || want[1].Function != "main.inl1" || want[2].Function != "main.loop" {
				t.Fatalf("runtime.CallersFrames reports %+v: inl1 and inl2 not inlined into main.loop?", want)
			}
			p, _ := openProcess(t, ch.pid, Options{})
			// CallersFrames looks up the call instruction, pc-1 of a return address.
			got := p.Lookup(pc - 1).Frames
			if len(got) != len(want) {
				t.Fatalf("Lookup(%#x) = %+v, want %+v", pc-1, got, want)
			}
			for i := range want {
				if got[i].Function != want[i].Function || got[i].File != want[i].File || got[i].Line != want[i].Line {
					t.Errorf("frame %d = %s %s:%d, want %s %s:%d", i, got[i].Function, got[i].File, got[i].Line,
						want[i].Function, want[i].File, want[i].Line)
				}
				if got[i].StartLine == 0 {
					t.Errorf("frame %d (%s): no StartLine", i, got[i].Function)
				}
			}
		})
	}
}

// TestGofuncWithoutSymbols checks that go:func.* found in stripped binaries
// (through runtime.firstmoduledata) is where the symbol says it is.
func TestGofuncWithoutSymbols(t *testing.T) {
	bins := []string{buildInline(t)["plain"]}
	if exe, err := exec.LookPath("go"); err == nil {
		bins = append(bins, exe)
	}
	for _, bin := range bins {
		ef, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		syms, err := ef.Symbols()
		if err != nil {
			t.Fatalf("%s: %v", bin, err)
		}
		withSym, err := newGoTable(ef, syms)
		if err != nil {
			t.Fatalf("%s: %v", bin, err)
		}
		without, err := newGoTable(ef, nil)
		if err != nil {
			t.Fatalf("%s: %v", bin, err)
		}
		ef.Close()
		if withSym.gofunc == nil {
			t.Fatalf("%s: go:func.* symbol not used", bin)
		}
		if len(without.gofunc) != len(withSym.gofunc) {
			t.Errorf("%s: go:func.* found %d bytes before the end of .gopclntab, symbol says %d",
				bin, len(without.gofunc), len(withSym.gofunc))
		}
	}
}
