package profiler_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/internal/testchild"
)

// TestSymbolizedAfterExit: a target that exits before its samples are
// symbolized (a service that ends as its profile is taken, a report that
// comes late) still has every sample named. Its parent has not reaped it:
// /proc still has the process, with an empty memory map, which must not
// replace the map read while it ran. The frame-pointer chains of code
// built without frame pointers hold addresses in no mapping, and each miss
// re-reads the map (at most once a second): the case CI met, where a tokio
// target ended 5 s after it started and a slow final report read its map
// after that.
func TestSymbolizedAfterExit(t *testing.T) {
	bin := testchild.NoFP(t, "c")
	child := testchild.Start(t, bin)
	p, err := profiler.Open(profiler.Options{
		Pids:      []int{child.Pid},
		Perf:      perf.Options{Frequency: 499},
		Unwind:    profiler.UnwindFramePointer,
		Symbolize: true,
	})
	testchild.RequirePerf(t, err)
	testchild.WaitFor(t, 30*time.Second, "500 samples of the child", func() bool { return p.Stats().Samples >= 500 })
	if err := child.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The test's cleanup reaps it; until then it is a zombie. A miss
	// re-reads the map once a second has passed since the last read: the
	// wait is the point, that re-read must not replace the map.
	time.Sleep(1500 * time.Millisecond)
	snaps, err := p.Close()
	if err != nil {
		t.Fatal(err)
	}
	// Its leaves are in the program and in libz, whose static functions
	// Debian strips: a leaf must be in a mapping, and named when it is in
	// the program.
	var n, mapped, inBin, named int
	for _, sn := range snaps {
		if sn.Pid != child.Pid {
			continue
		}
		for _, s := range sn.Samples {
			if s.OffCPU() || s.Stack < 0 || len(sn.Stacks[s.Stack]) == 0 {
				continue
			}
			n++
			leaf := sn.Stacks[s.Stack][0]
			if leaf.Mapping == nil {
				continue
			}
			mapped++
			if leaf.Mapping.Path == bin {
				inBin++
				if len(leaf.Frames) > 0 {
					named++
				}
			}
		}
	}
	t.Logf("%d on-CPU samples, %d in a mapping; %d in %s, %d of them named", n, mapped, inBin, bin, named)
	if n < 200 || inBin < 10 {
		t.Fatalf("%d samples, %d in the program", n, inBin)
	}
	if mapped < n*99/100 || named < inBin*99/100 {
		t.Errorf("after the target exited: %d of %d samples in a mapping, %d of %d in the program named; want ≥ 99%%", mapped, n, named, inBin)
	}
}
