package perf_test

import (
	"errors"
	"math"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/testchild"
)

type collected struct {
	mu       sync.Mutex
	samples  int
	period   map[uint32]uint64 // by tid
	pids     map[uint32]int
	comm     int
	mmaps    int
	buildIDs int
	exits    int
}

func collect(t *testing.T, s *perf.Session) (*collected, func()) {
	c := &collected{period: map[uint32]uint64{}, pids: map[uint32]int{}}
	done := make(chan error, 1)
	go func() {
		done <- s.Read(func(r *perf.Record) {
			c.mu.Lock()
			defer c.mu.Unlock()
			switch r.Type {
			case perf.RecordSample:
				c.samples++
				c.period[r.Sample.Tid] += r.Sample.Period
				c.pids[r.Sample.Pid]++
				if len(r.Sample.Callchain) == 0 {
					t.Errorf("sample without callchain")
				}
			case perf.RecordComm:
				c.comm++
			case perf.RecordMmap2:
				c.mmaps++
				if len(r.Mmap2.BuildID) > 0 {
					c.buildIDs++
				}
			case perf.RecordExit:
				c.exits++
			}
		})
	}()
	return c, func() {
		s.Close()
		if err := <-done; err != nil {
			t.Errorf("Read: %v", err)
		}
	}
}

func TestProcessScopeSamplesChildThreads(t *testing.T) {
	for _, scope := range []perf.Scope{perf.ScopeProcess, perf.ScopeSystem} {
		t.Run(scope.String(), func(t *testing.T) {
			bin := testchild.Build(t, "burner")
			// Another process burning CPU that is not a target: its
			// samples must not show up.
			other := testchild.Start(t, bin, "-alpha", "0.5", "-beta", "0")
			child := testchild.Start(t, bin, "-alpha", "1", "-beta", "0.5")
			s, err := perf.Open(perf.Options{Scope: scope, Frequency: 999})
			testchild.RequirePerf(t, err)
			c, stop := collect(t, s)
			before := testchild.ThreadCPU(t, child.Pid)
			if err := s.Attach(child.Pid); err != nil {
				t.Fatalf("Attach: %v", err)
			}
			// The measurement window: the sum of the periods is judged
			// against 2 s of the child's CPU.
			time.Sleep(2 * time.Second)
			after := testchild.ThreadCPU(t, child.Pid)
			stop() // Read delivers what the rings hold before it returns

			c.mu.Lock()
			defer c.mu.Unlock()
			if c.samples < 300 {
				t.Fatalf("only %d samples in 2 s at 999 Hz of a busy child", c.samples)
			}
			for pid, n := range c.pids {
				if int(pid) != child.Pid {
					t.Errorf("%d samples of pid %d (not a target; other burner is %d)", n, pid, other.Pid)
				}
			}
			for tid := range c.period {
				if _, ok := after[int(tid)]; !ok {
					t.Errorf("sample of tid %d, not a thread of the child", tid)
				}
			}
			var periods uint64
			for _, p := range c.period {
				periods += p
			}
			cpu := testchild.Sum(after) - testchild.Sum(before)
			ratio := float64(periods) / float64(cpu)
			t.Logf("%s: %d samples, periods %.3f s, child CPU %.3f s, ratio %.3f, comm %d mmap2 %d (build ids %d)",
				scope, c.samples, float64(periods)/1e9, float64(cpu)/1e9, ratio, c.comm, c.mmaps, c.buildIDs)
			if math.Abs(ratio-1) > 0.10 {
				t.Errorf("sum of sample periods is %.1f%% of the child's CPU time, want within 10%%", ratio*100)
			}
			// The two busy threads: alpha at 100%, beta at 50%.
			pa, pb := c.period[uint32(child.Ready[1])], c.period[uint32(child.Ready[2])]
			if pa == 0 || pb == 0 {
				t.Fatalf("no samples on a busy thread: alpha %d ns, beta %d ns", pa, pb)
			}
		})
	}
}

func TestAttachMissingProcess(t *testing.T) {
	s, err := perf.Open(perf.Options{Frequency: 99})
	testchild.RequirePerf(t, err)
	defer s.Close()
	// Pid max is at most 2^22; this one cannot exist.
	err = s.Attach(1 << 23)
	if !errors.Is(err, perf.ErrNoProcess) {
		t.Fatalf("Attach of a missing pid: got %v, want ErrNoProcess", err)
	}
}

func TestTargetExitIsReleased(t *testing.T) {
	bin := testchild.Build(t, "burner")
	short := testchild.Start(t, bin, "-alpha", "0.3", "-beta", "0.3", "-duration", "500ms")
	long := testchild.Start(t, bin, "-alpha", "0.3", "-beta", "0")
	s, err := perf.Open(perf.Options{Frequency: 499})
	testchild.RequirePerf(t, err)
	c, stop := collect(t, s)
	defer stop()
	for _, p := range []int{short.Pid, long.Pid} {
		if err := s.Attach(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := short.Cmd.Wait(); err != nil {
		t.Fatalf("short child: %v", err)
	}
	locked := func(f func() bool) func() bool {
		return func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return f()
		}
	}
	testchild.WaitFor(t, 10*time.Second, "an EXIT record after a target exited", locked(func() bool { return c.exits > 0 }))
	c.mu.Lock()
	before := c.pids[uint32(long.Pid)]
	c.mu.Unlock()
	s.Detach(short.Pid)
	s.Refresh() // must not trip over the dead process
	testchild.WaitFor(t, 10*time.Second, "samples of the surviving target", locked(func() bool { return c.pids[uint32(long.Pid)] > before }))
}

func TestScanFindsByExecutableName(t *testing.T) {
	bin := testchild.Build(t, "burner")
	child := testchild.Start(t, bin, "-alpha", "0", "-beta", "0")
	name := baseName(bin)
	procs, err := perf.Scan([]string{name})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range procs {
		if p.Pid == child.Pid {
			found = true
			if !p.Alive() {
				t.Errorf("Alive() false for a running child")
			}
		}
		if p.Pid == os.Getpid() {
			t.Errorf("Scan returned the calling process")
		}
	}
	if !found {
		t.Fatalf("Scan(%q) did not find pid %d among %+v", name, child.Pid, procs)
	}
}

func baseName(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[i+1:]
		}
	}
	return p
}
