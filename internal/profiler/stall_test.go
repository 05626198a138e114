package profiler_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/internal/testchild"
)

// libcBurner spends its CPU in libc (qsort calling back into the program,
// snprintf), so that its stacks need libc's symbols, whose first parse
// (with the debug file) takes a large fraction of a second.
const libcBurner = `
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static int cmp(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }
int main(void) {
	int v[4096];
	char buf[64];
	printf("ready %d\n", getpid());
	fflush(stdout);
	for (unsigned long i = 0;; i++) {
		for (int j = 0; j < 4096; j++) v[j] = (int)((j * 2654435761u) ^ i);
		qsort(v, 4096, sizeof v[0], cmp);
		snprintf(buf, sizeof buf, "%d %g", v[i % 4096], (double)i / 3.0);
	}
}
`

// TestFirstSymbolizationDoesNotStallReading profiles a 999 Hz target with a
// cold symbol cache and takes reports while it runs: the reports pay for
// parsing libc, the read loop must not. It fails if a ring overflows or the
// reader is away from the rings for more than 100 ms: a first parse of
// libc holds its goroutine for 0.4-5 s; on two CPUs, one taken by the
// target, the reader still waits for a CPU at times (20-55 ms measured).
// With UnwindAuto, the samples taken until the tables are read wait for
// them, and are unwound in chunks that the read loop does not wait for
// either: the test holds the tables for the first second (OpenHoldingTables), so
// that the queue fills (a process's share holds half a second of this
// target) and is unwound while the reader reads. Its rings of 4 MiB wake
// the reader every 128 samples of a CPU, and for 5 s after an attach
// every 100 ms (perf.readWake) besides: the reader may be away 200 ms
// there.
func TestFirstSymbolizationDoesNotStallReading(t *testing.T) {
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "burn.c"), filepath.Join(dir, "burn")
	if err := os.WriteFile(src, []byte(libcBurner), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O1", "-g", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	for _, mode := range []profiler.UnwindMode{profiler.UnwindFramePointer, profiler.UnwindAuto} {
		t.Run(mode.String(), func(t *testing.T) { testFirstSymbolization(t, bin, mode) })
	}
}

func testFirstSymbolization(t *testing.T, bin string, mode profiler.UnwindMode) {
	pages := 8
	if mode != profiler.UnwindFramePointer {
		pages = 0 // the default for stack copies: 8 pages hold two samples
	}
	child := testchild.Start(t, bin)
	opts := profiler.Options{
		Pids:              []int{child.Pid},
		Perf:              perf.Options{Frequency: 999, RingPages: pages},
		RecoverLeafCaller: true,
		Unwind:            mode,
		Symbolize:         true,
		Window:            0,
	}
	var p *profiler.Profiler
	var err error
	if mode != profiler.UnwindFramePointer {
		// Held from before the symbol worker starts: one that started
		// first would read the tables before any sample came.
		var release func()
		p, release, err = profiler.OpenHoldingTables(opts)
		if err == nil {
			time.AfterFunc(time.Second, release)
		}
	} else {
		p, err = profiler.Open(opts)
	}
	testchild.RequirePerf(t, err)

	// Count over every sample, the final report included: a slow machine can
	// spend the whole run in the first report, and main is the leaf of only
	// a few percent of the samples (qsort and snprintf take the rest).
	var longest time.Duration
	var libc, main int
	count := func(snaps []profiler.Snapshot) {
		for _, sn := range snaps {
			for _, stack := range sn.Stacks {
				for _, l := range stack {
					if l == nil || len(l.Frames) == 0 {
						continue
					}
					if l.Mapping != nil && strings.Contains(l.Mapping.Path, "libc") {
						libc++
					}
					if l.Frames[len(l.Frames)-1].Function == "main" {
						main++
					}
				}
			}
		}
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(150 * time.Millisecond)
		start := time.Now()
		snaps := p.Take(false)
		longest = max(longest, time.Since(start))
		count(snaps)
	}
	st := p.Stats()
	t.Logf("longest report: %v (symbolization included); longest gap between ring passes: %v; lost records: %d; samples: %d; binaries parsed: %d, holding %d KiB; unwind %+v",
		longest, st.Source.LongestGap, st.Source.Lost, st.Samples, st.Symbols.BinariesParsed, st.Symbols.BytesHeld>>10, st.Unwind)
	final, err := p.Close()
	if err != nil {
		t.Fatalf("close: %v", err)
	}
	count(final)
	t.Logf("locations in libc: %d; in main: %d", libc, main)
	if st.Samples < 1000 {
		t.Fatalf("only %d samples in 3 s at 999 Hz", st.Samples)
	}
	if libc == 0 || main == 0 {
		t.Fatalf("stacks were not symbolized: %d libc locations, %d in main", libc, main)
	}
	if st.Source.Lost != 0 {
		t.Errorf("%d records lost", st.Source.Lost)
	}
	maxGap := 100 * time.Millisecond
	if mode != profiler.UnwindFramePointer {
		maxGap = 200 * time.Millisecond
	}
	if st.Source.LongestGap > maxGap {
		t.Errorf("the reader was away from the rings for %v", st.Source.LongestGap)
	}
	if mode != profiler.UnwindFramePointer && st.Unwind.PendingUnwound == 0 {
		t.Errorf("no sample waited for the tables: %+v", st.Unwind)
	}
}
