package profiler

import (
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/testchild"
)

// noProcEnv marks the run of TestTakeWithoutProc in its mount namespace.
const noProcEnv = "PERFPROF_TEST_TAKE_WITHOUT_PROC"

// TestTakeWithoutProc: the report is a function of what was read before
// it. A C target without frame pointers is sampled by a perf session, with
// a span on each of its threads; then the profiler's workers are stopped
// and /proc is hidden (a tmpfs over it, in a mount namespace of the test's
// own) before the report is taken. Its samples are still joined to the
// spans of their threads, symbolized to the target's functions (through
// the binaries opened when its memory map was read) and unwound to main or
// start_thread, and its threads named.
func TestTakeWithoutProc(t *testing.T) {
	if os.Getenv(noProcEnv) != "1" {
		cmd := exec.Command("unshare", "--mount", "--propagation", "private",
			os.Args[0], "-test.run=^TestTakeWithoutProc$", "-test.v", "-test.count=1", "-test.timeout=5m")
		cmd.Env = append(os.Environ(), noProcEnv+"=1")
		out, err := cmd.CombinedOutput()
		t.Logf("in a mount namespace of its own:\n%s", out)
		if err != nil && strings.Contains(string(out), "unshare failed") {
			testchild.RequireKernel(t, "mount namespaces", err, err)
		}
		if err != nil || !strings.Contains(string(out), "--- PASS: TestTakeWithoutProc") {
			t.Fatalf("the run in a mount namespace of its own did not pass: %v", err)
		}
		return
	}
	child := testchild.Start(t, testchild.NoFP(t, "c"))
	start := uint64(time.Now().UnixNano()) // the spans cover every sample
	p, err := Open(Options{Pids: []int{child.Pid}, Perf: perf.Options{Frequency: 499}, Symbolize: true, Unwind: UnwindAuto})
	testchild.RequirePerf(t, err)
	closed := false
	defer func() {
		if !closed {
			p.Close()
		}
	}()
	// A span on each thread, over the whole run.
	tids := readTids(t, child.Pid)
	var spans []Span
	for i, tid := range tids {
		spans = append(spans, Span{Tid: tid, Pid: uint32(child.Pid), TraceID: [16]byte{1, byte(i)}, SpanID: [8]byte{2, byte(i)},
			Start: start, End: start + uint64(30*time.Second), Name: "work " + strconv.Itoa(i), WorkerID: -1, Resource: -1})
	}
	if c := p.AddSpans(spans); c.Indexed != int64(len(spans)) {
		t.Fatalf("spans: %+v", c)
	}
	time.Sleep(1500 * time.Millisecond) // sampling
	p.catchUp()
	if err := p.stopWorkers(); err != nil {
		t.Fatal(err)
	}
	closed = true
	defer p.syms.close()

	if err := unix.Mount("perfprof-no-proc", "/proc", "tmpfs", 0, "size=64k"); err != nil {
		t.Fatalf("hide /proc: %v", err)
	}
	defer unix.Unmount("/proc", unix.MNT_DETACH)
	if _, err := os.ReadFile("/proc/self/maps"); err == nil {
		t.Fatal("/proc is still there")
	}
	snaps := p.take(clock.Monotonic(), math.MaxUint64, true)

	var samples, linked, named, whole int
	threads := map[uint32]string{}
	for _, sn := range snaps {
		if sn.Pid != child.Pid {
			continue
		}
		for tid, name := range sn.Threads {
			threads[tid] = name
		}
		for _, s := range sn.Samples {
			samples++
			i := indexOf(tids, s.Tid)
			if s.Link.Linked && i >= 0 && s.Link.SpanID == spans[i].SpanID {
				linked++
			}
			if s.Stack < 0 {
				continue
			}
			var fns []string
			for _, l := range sn.Stacks[s.Stack] {
				if f := outerFunction(l); f != "" {
					fns = append(fns, f)
				}
			}
			if slices.Contains(fns, "level1") {
				named++
			}
			if n := len(fns); n > 0 && (fns[n-1] == "_start" || fns[n-1] == "__libc_start_main" || fns[n-1] == "clone3" || fns[n-1] == "__clone3" || fns[n-1] == "start_thread" || slices.Contains(fns, "main")) {
				whole++
			}
		}
	}
	t.Logf("%d samples: %d linked to their thread's span, %d in level1, %d reaching main or start_thread; threads %v", samples, linked, named, whole, threads)
	if samples < 100 {
		t.Fatalf("%d samples of the target, want ≥ 100", samples)
	}
	if linked < samples*95/100 {
		t.Errorf("%d of %d samples linked to their thread's span, want ≥ 95%%", linked, samples)
	}
	if named < samples*80/100 {
		t.Errorf("%d of %d samples name level1, want ≥ 80%%", named, samples)
	}
	if whole < samples*80/100 {
		t.Errorf("%d of %d samples unwound to main or start_thread, want ≥ 80%%", whole, samples)
	}
	for _, tid := range tids {
		if threads[tid] == "" {
			t.Errorf("thread %d unnamed: %v", tid, threads)
		}
	}
}

// readTids returns the threads of pid, waiting for it to have two.
func readTids(t *testing.T, pid int) []uint32 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) >= 2 || time.Now().After(deadline) {
			var tids []uint32
			for _, e := range ents {
				n, _ := strconv.Atoi(e.Name())
				tids = append(tids, uint32(n))
			}
			return tids
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func indexOf(s []uint32, v uint32) int { return slices.Index(s, v) }
