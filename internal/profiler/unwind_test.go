package profiler_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/internal/testchild"
)

// TestUnwindNoFramePointers profiles the programs built without frame
// pointers (C at -O2 through libz and libc, C++ with inlining and
// exceptions, Rust's release profile) as the receiver does, from their
// start, and checks the symbolized stacks of its reports: with UnwindAuto
// ≥ 99% of the on-CPU samples reach the thread's root (main or
// start_thread) along the true path; with UnwindFramePointer, on the same
// program, most do not, which is what the copies are for.
func TestUnwindNoFramePointers(t *testing.T) {
	for _, name := range []string{"c", "cxx", "rust"} {
		t.Run(name, func(t *testing.T) {
			bin := testchild.NoFP(t, name)
			for _, mode := range []profiler.UnwindMode{profiler.UnwindAuto, profiler.UnwindFramePointer} {
				st, rooted, onPath, inLevels, n := profileNoFP(t, bin, mode)
				t.Logf("%v: %d samples, %d (%.2f%%) rooted, %d in level3, %d (%.2f%%) of them on the true path; unwind %+v",
					mode, n, rooted, pctOf(rooted, n), inLevels, onPath, pctOf(onPath, inLevels), st)
				if n < 500 {
					t.Fatalf("%v: only %d samples", mode, n)
				}
				switch mode {
				case profiler.UnwindAuto:
					if rooted < n*99/100 {
						t.Errorf("auto: %d of %d samples rooted, want ≥ 99%%", rooted, n)
					}
					if inLevels < n/5 || onPath < inLevels*99/100 {
						t.Errorf("auto: %d samples in level3, %d on the true path", inLevels, onPath)
					}
					if st.Pending > int64(n/20) {
						t.Errorf("auto: %d samples before the tables were read", st.Pending)
					}
				case profiler.UnwindFramePointer:
					if rooted > n/2 {
						t.Errorf("frame pointers: %d of %d samples rooted: the target has frame pointers after all?", rooted, n)
					}
				}
			}
		})
	}
}

// profileNoFP profiles bin for 3 s in mode and counts its on-CPU samples,
// those whose stack reaches the thread's root, and those in level3 and on
// the true path from there.
func profileNoFP(t *testing.T, bin string, mode profiler.UnwindMode) (st profiler.UnwindStats, rooted, onPath, inLevels, n int) {
	child := testchild.Start(t, bin)
	defer child.Cmd.Process.Kill()
	p, err := profiler.Open(profiler.Options{
		Pids:      []int{child.Pid},
		Perf:      perf.Options{Frequency: 499},
		Unwind:    mode,
		Symbolize: true,
	})
	testchild.RequirePerf(t, err)
	time.Sleep(3 * time.Second)
	snaps, err := p.Close()
	if err != nil {
		t.Fatal(err)
	}
	st = p.Stats().Unwind
	path := []string{"level3", "level2", "level1", "worker"}
	for _, sn := range snaps {
		if sn.Pid != child.Pid {
			continue
		}
		for _, s := range sn.Samples {
			if s.OffCPU() || s.Stack < 0 {
				continue
			}
			n++
			var fns []string // leaf first, inlined frames too
			for _, l := range sn.Stacks[s.Stack] {
				for _, f := range l.Frames {
					fn := f.Function
					if i := strings.IndexByte(fn, '('); i > 0 {
						fn = fn[:i] // C++ parameters
					}
					if i := strings.LastIndex(fn, "::"); i >= 0 && strings.HasPrefix(fn, "nofp") {
						fn = fn[i+2:] // Rust path
					}
					fns = append(fns, fn)
				}
			}
			if slices.Contains(fns, "main") || slices.Contains(fns, "start_thread") {
				rooted++
			}
			i := slices.Index(fns, path[0])
			if i < 0 {
				continue
			}
			inLevels++
			// Inlined frames of std code may sit between the levels
			// in C++: the path must appear in order.
			k := 0
			for _, fn := range fns[i:] {
				if k < len(path) && fn == path[k] {
					k++
				}
			}
			if k == len(path) {
				onPath++
			}
		}
	}
	return st, rooted, onPath, inLevels, n
}

func pctOf(a, b int) float64 { return 100 * float64(a) / float64(max(b, 1)) }

// TestUnwindGo profiles Go code under constant garbage collection
// (testchild/goalloc: goroutines not locked to threads, GC workers and
// assists on the system stack) with UnwindAuto: Go frames step by their
// pcsp tables, and a stack on the system stack goes on, by the kernel's
// frame-pointer chain, into the goroutine that switched to it. Its stacks
// must reach a root (runtime.goexit, or runtime.mstart and the like for
// the threads' own stacks) at least as often as the kernel's chains do,
// and the GC assists the goroutine that allocated.
func TestUnwindGo(t *testing.T) {
	bin := testchild.Build(t, "goalloc")
	rooted := map[profiler.UnwindMode]float64{}
	var assists, assistsLinked int
	for _, mode := range []profiler.UnwindMode{profiler.UnwindAuto, profiler.UnwindFramePointer} {
		child := testchild.Start(t, bin)
		p, err := profiler.Open(profiler.Options{
			Pids: []int{child.Pid}, Perf: perf.Options{Frequency: 499}, Unwind: mode, Symbolize: true,
		})
		testchild.RequirePerf(t, err)
		time.Sleep(3 * time.Second)
		snaps, err := p.Close()
		child.Cmd.Process.Kill()
		if err != nil {
			t.Fatal(err)
		}
		roots := map[string]int{}
		var n, ok, assist, assistLinked int
		for _, sn := range snaps {
			for _, s := range sn.Samples {
				if s.OffCPU() || s.Stack < 0 {
					continue
				}
				stack := sn.Stacks[s.Stack]
				var fns []string
				for _, l := range stack {
					for _, f := range l.Frames {
						fns = append(fns, f.Function)
					}
				}
				if len(fns) == 0 {
					continue
				}
				n++
				root := fns[len(fns)-1]
				roots[root]++
				switch root {
				case "runtime.goexit", "runtime.mstart", "runtime.rt0_go":
					ok++
				case "runtime.morestack", "runtime.mcall":
					// The top of the thread's g0 stack: these switch
					// to it without a frame-pointer link back, and
					// Go's own traceback follows the goroutine's
					// saved registers, which a sample does not hold.
					ok++
				}
				if slices.Contains(fns, "runtime.gcAssistAlloc") {
					assist++
					if slices.Contains(fns, "main.level3") {
						assistLinked++
					}
				}
			}
		}
		rooted[mode] = pctOf(ok, n)
		if mode == profiler.UnwindAuto {
			assists, assistsLinked = assist, assistLinked
		}
		t.Logf("%v: %d samples, %d (%.2f%%) rooted; in GC assists %d, %d of them under main.level3; roots %v; unwind %+v",
			mode, n, ok, pctOf(ok, n), assist, assistLinked, roots, p.Stats().Unwind)
		if n < 500 {
			t.Fatalf("%v: only %d samples", mode, n)
		}
	}
	if rooted[profiler.UnwindAuto] < 99 || rooted[profiler.UnwindAuto] < rooted[profiler.UnwindFramePointer]-0.5 {
		t.Errorf("rooted: auto %.2f%%, frame pointers %.2f%%: want auto ≥ 99%% and no worse", rooted[profiler.UnwindAuto], rooted[profiler.UnwindFramePointer])
	}
	if assistsLinked < assists*99/100 {
		t.Errorf("auto: %d of %d samples in GC assists under the allocating main.level3", assistsLinked, assists)
	}
}
