package profiler_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/internal/testchild"
)

// TestSteadyTargetsParseOnce profiles two steady targets over 20 reports:
// the C program of TestUnwindNoFramePointers (its binary, libz, libc with
// its debug file, ld.so, the vDSO) and the same program linked statically
// and stripped, whose binary has no symbols at all and fails to parse.
// After the first reports every binary is parsed, failures included, and
// no later report opens or parses one again: a steady target costs the
// symbolizer lookups only. The DWARF units the reports need are decoded
// before their lookups, a report's together.
func TestSteadyTargetsParseOnce(t *testing.T) {
	normal := testchild.NoFP(t, "c")
	_, self, _, _ := runtime.Caller(0)
	stripped := filepath.Join(t.TempDir(), "nofp-static-stripped")
	if b, err := exec.Command("gcc", "-x", "c", "-O2", "-pthread", "-static", "-s",
		filepath.Join(filepath.Dir(self), "..", "testchild", "nofp", "nofp.c"), "-lz", "-o", stripped).CombinedOutput(); err != nil {
		testchild.NeedRuntime(t, "cannot link the program statically (libc.a, libz.a): %v\n%s", err, b)
	}
	a := testchild.Start(t, normal)
	b := testchild.Start(t, stripped)
	p, err := profiler.Open(profiler.Options{
		Pids:      []int{a.Pid, b.Pid},
		Perf:      perf.Options{Frequency: 499},
		Symbolize: true,
	})
	testchild.RequirePerf(t, err)
	defer p.Close()

	var settled profiler.Stats
	samples := map[int]int{} // by pid, after the reports that settle
	for i := range 20 {
		time.Sleep(200 * time.Millisecond)
		snaps := p.Take(false)
		if i < 3 {
			settled = p.Stats()
			continue
		}
		for _, sn := range snaps {
			samples[sn.Pid] += len(sn.Samples)
		}
	}
	end := p.Stats()
	t.Logf("after 3 reports: %+v", settled.Symbols)
	t.Logf("after 20:        %+v; samples of the last 17 %v", end.Symbols, samples)
	if samples[a.Pid] < 100 || samples[b.Pid] < 100 {
		t.Fatalf("samples of the last 17 reports: %v, want ≥ 100 of each target", samples)
	}
	if end.Symbols.BinariesParsed != settled.Symbols.BinariesParsed || end.Symbols.FilesOpened != settled.Symbols.FilesOpened {
		t.Errorf("binaries parsed %d → %d, files opened %d → %d over 17 reports of steady targets: want no change",
			settled.Symbols.BinariesParsed, end.Symbols.BinariesParsed, settled.Symbols.FilesOpened, end.Symbols.FilesOpened)
	}
	if end.Symbols.BinariesParsed > end.Symbols.Binaries || end.Symbols.BinariesEvicted != 0 {
		t.Errorf("%d binaries parsed, %d held, %d evicted: each held binary is parsed once", end.Symbols.BinariesParsed, end.Symbols.Binaries, end.Symbols.BinariesEvicted)
	}
	// A report decodes the DWARF units of its stacks (libc's, with its
	// debug file) before it looks them up (Process.Prepare): none is
	// decoded by a lookup of its own, which costs a pass over a
	// compressed .debug_info.
	if end.Symbols.DWARFUnprepared != 0 {
		t.Errorf("%d DWARF units decoded, %d of them by a lookup: want none by a lookup", end.Symbols.DWARFUnitsDecoded, end.Symbols.DWARFUnprepared)
	}
}
