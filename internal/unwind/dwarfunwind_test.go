package unwind_test

import (
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/testchild"
	"github.com/perfprof/perfprof/internal/unwind"
)

// TestDWARFUnwind: samples of programs built without frame pointers (C at
// -O2 calling into Debian's libz and libc, C++ with inlining and
// exceptions, Rust's release profile), two threads each, unwound from
// their 16 KiB stack copies by the binaries' compiled .eh_frame, reach the
// thread's root (main through _start, start_thread through clone3) in
// ≥ 99% of cases, along the true path (level3, level2, level1, worker);
// the kernel's frame-pointer callchains of the same samples mostly do not.
func TestDWARFUnwind(t *testing.T) {
	for _, c := range []struct {
		name string
		path []string // the true path, from the innermost function checked out
	}{
		{"c", nil},
		{"cxx", nil},
		{"rust", nil},
		// Through the signal frame: the handler, libc's trampoline, the
		// interrupted level3 and its callers.
		{"signal", []string{"inHandler", "handler", "*", "level3", "level2", "level1", "worker"}},
		// Out of the vDSO: clock_gettime's frames there, then level3.
		{"vdso", []string{"__vdso_clock_gettime", "*", "level3", "level2", "level1", "worker"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := c.path
			if path == nil {
				path = []string{"level3", "level2", "level1", "worker"}
			}
			testDWARFUnwind(t, testchild.NoFP(t, c.name), path)
		})
	}
}

// testDWARFUnwind samples bin and checks the unwound stacks: ≥ 99% reach
// the thread's root, and ≥ 99% of those holding path[0] hold path from
// there ("*" matches any one frame), which at least a fifth of all do.
func testDWARFUnwind(t *testing.T, bin string, path []string) {
	child := testchild.Start(t, bin)
	s, err := perf.Open(perf.Options{Frequency: 999, StackUser: 16 << 10})
	testchild.RequirePerf(t, err)
	defer s.Close()
	proc, outer := symbolizer(t, child.Pid)
	// The read loop's unwinder: the tables of every binary mapped now.
	unw := proc.Unwinder()
	// The function's name without its C++ parameters or Rust path.
	name := func(pc uint64) string {
		fn := outer(pc)
		if fn == "" {
			return "?"
		}
		if i := strings.IndexByte(fn, '('); i > 0 {
			fn = fn[:i]
		}
		if i := strings.LastIndex(fn, "::"); i >= 0 && strings.HasPrefix(fn, "nofp") {
			fn = fn[i+2:]
		}
		return fn
	}
	if err := s.Attach(child.Pid); err != nil {
		testchild.RequirePerf(t, err)
	}
	// The samples are kept, and unwound after the reading: the
	// unwinding and naming here (slow under the race detector) must not
	// hold up the rings.
	type sample struct {
		regs  unwind.Regs
		stack []byte
		fp    []uint64 // the kernel's frame-pointer chain, user frames
	}
	var samples []sample
	var read atomic.Int64
	done := make(chan error, 1)
	go func() {
		done <- s.Read(func(r *perf.Record) {
			smp := &r.Sample
			if r.Type != perf.RecordSample || smp.Kind != perf.EventCPUClock || int(smp.Pid) != child.Pid {
				return
			}
			ip, ok1 := smp.UserIP()
			sp, ok2 := smp.UserSP()
			bp, _ := smp.UserBP()
			if !ok1 || !ok2 {
				return
			}
			k := sample{regs: unwind.Regs{IP: ip, SP: sp, BP: bp}, stack: slices.Clone(smp.StackUser)}
			perf.Frames(smp.Callchain, func(a uint64, kernel bool) {
				if !kernel {
					k.fp = append(k.fp, a)
				}
			})
			samples = append(samples, k)
			read.Add(1)
		})
	}()
	// Samples enough to judge, however slowly a busy machine runs the
	// child.
	testchild.WaitFor(t, 60*time.Second, "1200 samples", func() bool { return read.Load() >= 1200 })
	s.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	type result struct {
		fns  []string // leaf first
		stop unwind.Stop
		fp   []string
	}
	var results []result
	out := make([]uint64, 0, 128)
	for _, k := range samples {
		chain, stop := unw.Unwind(k.regs, &unwind.StackCopy{SP: k.regs.SP, Data: k.stack}, out[:0])
		res := result{fns: []string{name(k.regs.IP)}, stop: stop}
		for _, ra := range chain {
			res.fns = append(res.fns, name(ra-1))
		}
		for _, a := range k.fp {
			res.fp = append(res.fp, name(a))
		}
		results = append(results, res)
	}

	rooted := func(fns []string) bool {
		return slices.Contains(fns, "main") && slices.Contains(fns, "_start") ||
			slices.Contains(fns, "start_thread") && (slices.Contains(fns, "clone3") || slices.Contains(fns, "__clone3"))
	}
	onPath := func(fns []string) bool {
		if len(fns) < len(path) {
			return false
		}
		for i, want := range path {
			if want != "*" && fns[i] != want {
				return false
			}
		}
		return true
	}
	var root, fpRoot, inLevels, truePath int
	stops := map[unwind.Stop]int{}
	var bad []result
	for _, r := range results {
		stops[r.stop]++
		if rooted(r.fns) && r.stop == unwind.StopEnd {
			root++
		} else if len(bad) < 5 {
			bad = append(bad, r)
		}
		if rooted(r.fp) {
			fpRoot++
		}
		i := slices.Index(r.fns, path[0])
		if i < 0 {
			continue
		}
		inLevels++
		if onPath(r.fns[i:]) {
			truePath++
		}
	}
	n := len(results)
	t.Logf("%d samples: %d (%.2f%%) unwound to the thread's root (frame pointers: %d, %.2f%%); stops %v; %d in %s, %d (%.2f%%) of them on the true path %v",
		n, root, pct(root, n), fpRoot, pct(fpRoot, n), stops, inLevels, path[0], truePath, pct(truePath, inLevels), path)
	for _, r := range bad {
		t.Logf("not rooted (%v): %v", r.stop, r.fns)
	}
	if n < 1000 {
		t.Fatalf("only %d samples", n)
	}
	if root < n*99/100 {
		t.Errorf("%d of %d samples unwound to the root, want ≥ 99%%", root, n)
	}
	if inLevels < n/5 || truePath < inLevels*99/100 {
		t.Errorf("%d samples in %s, %d on the true path: want ≥ a fifth of the samples there, ≥ 99%% of them on it", inLevels, path[0], truePath)
	}
}

func pct(a, b int) float64 { return 100 * float64(a) / float64(max(b, 1)) }
