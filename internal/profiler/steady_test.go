package profiler_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/internal/testchild"
	"go.uber.org/zap/zaptest"
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

// TestReaderWakeups counts the perf reader's passes over the rings (each
// one a wake-up of the collector) while it profiles the C program's two
// busy threads with stack copies (UnwindAuto), after the first 5 s in which
// it passes every 100 ms. The rings wake it by the bytes written, at half:
// at 99 Hz a 2 MiB ring per CPU every MiB, 62 samples of 16.5 KiB, at
// 999 Hz a 4 MiB ring every 124, with a pass every second besides when
// they are slower than that. The bound is 1.5 times
// that for the samples taken (the target's share of a busy machine
// varies): a reader that polled on a timer again (10 passes a second), or
// rings that woke it far more often, would fail.
func TestReaderWakeups(t *testing.T) {
	bin := testchild.NoFP(t, "c")
	for _, hz := range []uint64{99, 999} {
		t.Run(fmt.Sprint(hz), func(t *testing.T) {
			child := testchild.Start(t, bin)
			p, err := profiler.Open(profiler.Options{
				Pids:   []int{child.Pid},
				Perf:   perf.Options{Frequency: hz},
				Unwind: profiler.UnwindAuto,
			})
			testchild.RequirePerf(t, err)
			defer p.Close()
			time.Sleep(6 * time.Second) // past readBusy after Open
			p.Take(false)
			s0, t0 := p.Stats().Source, time.Now()
			for range 8 {
				time.Sleep(time.Second)
				p.Take(false)
			}
			s1, el := p.Stats().Source, time.Since(t0).Seconds()
			passes, samples := float64(s1.Passes-s0.Passes)/el, float64(s1.Samples-s0.Samples)/el
			t.Logf("%d Hz: %.1f passes/s for %.0f samples/s (%.1f samples a pass), %d lost", hz, passes, samples, samples/passes, s1.Lost)
			if samples < float64(hz)/4 {
				t.Fatalf("only %.0f samples/s: the target hardly ran", samples)
			}
			perWake := 62.0
			if hz > 120 {
				perWake = 124
			}
			if max := 1.5 * (samples/perWake + 1); passes > max {
				t.Errorf("%.1f passes/s, want at most %.1f", passes, max)
			}
		})
	}
}

// TestShortLivedSampledFromStart starts three processes of a target
// executable one after another, each killed after a second of two busy
// threads, and counts their samples against the CPU time they had: the
// exec watcher asks for discovery as a process starts, so each is sampled
// from its first milliseconds. Found at the next scan instead (every
// second), a process that lives a second lost half of it on average.
func TestShortLivedSampledFromStart(t *testing.T) {
	bin := testchild.NoFP(t, "c")
	const hz = 499
	p, err := profiler.Open(profiler.Options{
		Executables: []string{filepath.Base(bin)},
		Perf:        perf.Options{Frequency: hz},
		Logger:      zaptest.NewLogger(t),
	})
	testchild.RequirePerf(t, err)
	defer p.Close()
	testchild.WaitFor(t, 10*time.Second, "the first scan, of every process", func() bool { return p.Stats().Discovery.Scans > 0 })
	pids := map[int]bool{}
	samples := 0
	take := func(snaps []profiler.Snapshot) {
		for _, sn := range snaps {
			if pids[sn.Pid] {
				samples += len(sn.Samples)
			}
		}
	}
	var cpu float64 // seconds
	for range 3 {
		child := testchild.Start(t, bin)
		pids[child.Pid] = true
		for range 4 { // a second of the process's life, taken as a receiver takes it
			time.Sleep(250 * time.Millisecond)
			take(p.Take(false))
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child.Pid))
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
		ut, _ := strconv.Atoi(f[11])
		st, _ := strconv.Atoi(f[12])
		cpu += float64(ut+st) / 100 // USER_HZ
		_ = child.Cmd.Process.Kill()
		_ = child.Cmd.Wait()
	}
	take(p.Take(false))
	snaps, _ := p.Close() // with what the rings still hold
	take(snaps)
	want := cpu * hz
	t.Logf("3 processes of 1 s: %.2f s of CPU, %d samples of the %.0f it stands for (%.0f%%); discovery %+v",
		cpu, samples, want, 100*float64(samples)/want, p.Stats().Discovery)
	if float64(samples) < 0.8*want {
		t.Errorf("%d samples for %.2f s of CPU at %d Hz: want at least 80%% of %.0f", samples, cpu, hz, want)
	}
}
