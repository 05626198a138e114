package profiler_test

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/internal/testchild"
)

// churnProc names one process: pids are reused.
type churnProc struct {
	pid   int
	start uint64
}

type churnSpan struct {
	proc   churnProc
	tid    uint32
	t0, t1 uint64
}

// churnCheck holds what the churn processes said they ran, hands their
// spans to the profiler, and checks every sample taken against it.
type churnCheck struct {
	p *profiler.Profiler

	mu      sync.Mutex
	seq     uint64
	spans   map[[8]byte]churnSpan
	byTid   map[churnProc]map[uint32][]churnSpan
	ended   map[churnProc]uint64 // Unix ns when it had been reaped
	last    map[int]churnProc    // the latest process of each pid
	pidSeen map[int]int          // processes seen per pid
	tidSeen map[uint32]map[churnProc]bool

	// Of the samples taken: in a known churn process; of them, inside a
	// span of their own process and thread; linked to a span; linked to
	// a span of another process, or of another thread or time (must stay
	// 0); taken after their process said its last word (must stay 0).
	samples, covered, linked, wrongLink, afterEnd int
	wrongExamples                                 []string
}

func newChurnCheck(p *profiler.Profiler) *churnCheck {
	return &churnCheck{p: p, spans: map[[8]byte]churnSpan{}, byTid: map[churnProc]map[uint32][]churnSpan{},
		ended: map[churnProc]uint64{}, last: map[int]churnProc{}, pidSeen: map[int]int{}, tidSeen: map[uint32]map[churnProc]bool{}}
}

// read takes the lines of the churn processes until r closes.
func (c *churnCheck) read(t *testing.T, r *os.File) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var pr churnProc
		var tid uint32
		var t0, t1 uint64
		line := sc.Text()
		switch line[0] {
		case 'P':
			if _, err := fmt.Sscanf(line, "P %d %d", &pr.pid, &pr.start); err != nil {
				t.Errorf("churn said %q: %v", line, err)
				continue
			}
			c.mu.Lock()
			c.pidSeen[pr.pid]++
			c.last[pr.pid] = pr
			c.mu.Unlock()
		case 'R':
			// A pid is not reused before it is reaped: the
			// reaped process is the latest to say it had it.
			if _, err := fmt.Sscanf(line, "R %d %d", &pr.pid, &t1); err != nil {
				t.Errorf("churn said %q: %v", line, err)
				continue
			}
			c.mu.Lock()
			if last, ok := c.last[pr.pid]; ok {
				c.ended[last] = t1
			}
			c.mu.Unlock()
		case 'S':
			if _, err := fmt.Sscanf(line, "S %d %d %d %d %d", &pr.pid, &pr.start, &tid, &t0, &t1); err != nil {
				t.Errorf("churn said %q: %v", line, err)
				continue
			}
			sp := churnSpan{proc: pr, tid: tid, t0: t0, t1: t1}
			c.mu.Lock()
			c.seq++
			// The trace id carries the process, the span id a
			// sequence number: a link names the span's process.
			var id profiler.Span
			binary.BigEndian.PutUint64(id.SpanID[:], c.seq)
			binary.BigEndian.PutUint64(id.TraceID[:], uint64(pr.pid))
			binary.BigEndian.PutUint64(id.TraceID[8:], pr.start)
			id.Tid, id.Pid, id.Start, id.End = tid, uint32(pr.pid), t0, t1
			id.Name, id.WorkerID, id.Resource = "churn", -1, -1
			c.spans[id.SpanID] = sp
			if c.byTid[pr] == nil {
				c.byTid[pr] = map[uint32][]churnSpan{}
			}
			c.byTid[pr][tid] = append(c.byTid[pr][tid], sp)
			if c.tidSeen[tid] == nil {
				c.tidSeen[tid] = map[churnProc]bool{}
			}
			c.tidSeen[tid][pr] = true
			c.mu.Unlock()
			c.p.AddSpans([]profiler.Span{id})
		}
	}
}

// check checks the samples of snapshots and keeps only the counts.
func (c *churnCheck) check(snaps []profiler.Snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Sample times are mapped from CLOCK_MONOTONIC to Unix time by an
	// offset measured at each report.
	const exitSlack = uint64(time.Millisecond)
	for _, sn := range snaps {
		pr := churnProc{sn.Pid, sn.StartTime}
		threads, known := c.byTid[pr]
		for _, s := range sn.Samples {
			if !known {
				continue // the launcher, or a process that ran no span yet
			}
			c.samples++
			if end, ok := c.ended[pr]; ok && s.Time > end+exitSlack {
				c.afterEnd++
				kernel := 0
				if s.Stack >= 0 {
					for _, l := range sn.Stacks[s.Stack] {
						if l.Kernel {
							kernel++
						}
					}
				}
				c.note("pid %d start %d (%s) tid %d: sample at %d, %.1f ms after it was reaped, %d kernel frames of %d", pr.pid, pr.start, sn.Comm, s.Tid, s.Time, float64(s.Time-end)/1e6, kernel, len(sn.Stacks[max(s.Stack, 0)]))
			}
			for _, sp := range threads[s.Tid] {
				if s.Time >= sp.t0 && s.Time < sp.t1 {
					c.covered++
					break
				}
			}
			if !s.Link.Linked {
				continue
			}
			c.linked++
			sp, ok := c.spans[s.Link.SpanID]
			if !ok || sp.proc != pr || sp.tid != s.Tid || s.Time < sp.t0 || s.Time >= sp.t1 {
				c.wrongLink++
				c.note("sample of pid %d start %d tid %d at %d linked to span %+v", pr.pid, pr.start, s.Tid, s.Time, sp)
			}
		}
	}
}

func (c *churnCheck) note(format string, args ...any) {
	if len(c.wrongExamples) < 10 {
		c.wrongExamples = append(c.wrongExamples, fmt.Sprintf(format, args...))
	}
}

// reused counts the pids and thread ids that more than one process had.
func (c *churnCheck) reused() (pids, tids int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.pidSeen {
		if n > 1 {
			pids++
		}
	}
	for _, procs := range c.tidSeen {
		if len(procs) > 1 {
			tids++
		}
	}
	return pids, tids
}

// openFDs returns what the open fds of the test process name. Files the
// profiler's goroutines open for a moment (/proc/PID/maps, a perf map)
// are not growth: of five looks 100 ms apart, the one with the fewest
// counts.
func openFDs(t *testing.T) map[string]int {
	var least map[string]int
	for range 5 {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		fds := map[string]int{}
		for _, e := range ents {
			target, _ := os.Readlink("/proc/self/fd/" + e.Name())
			fds[target]++
		}
		if least == nil || len(ents) < total(least) {
			least = fds
		}
		time.Sleep(100 * time.Millisecond)
	}
	return least
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestChurn profiles, by executable name, processes that start and end
// many times a second, fork/exec storms and fork-without-exec children,
// with pids and thread ids reused on purpose, and an app in a pid namespace
// that reports a target's thread id as its own: no sample may be linked to
// a span of another process, or counted to a process after it ended, and
// exited processes must be released without fd or memory growth.
func TestChurn(t *testing.T) {
	testchild.NeedRoot(t, "forcing pid reuse (writing /proc/sys/kernel/ns_last_pid)")
	bin := testchild.Churn(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	idle := exec.Command(bin, "idle")
	idle.Stdout = w
	idleIn, err := idle.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := idle.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { idleIn.Close(); _ = idle.Wait() })

	p, err := profiler.Open(profiler.Options{
		// Discovery at its default interval, 1 s: most processes live
		// less, and a pid is often taken again before it runs.
		Executables: []string{testchild.ChurnName},
		Perf:        perf.Options{Frequency: 999},
		Window:      time.Second,
	})
	testchild.RequirePerf(t, err)
	closed := false
	t.Cleanup(func() {
		if !closed {
			p.Close()
		}
	})
	c := newChurnCheck(p)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		c.read(t, r)
	}()
	stopTake := make(chan struct{})
	takeDone := make(chan struct{})
	go func() {
		defer close(takeDone)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopTake:
				return
			case <-tick.C:
				c.check(p.Take(false))
			}
		}
	}()

	launch := func(secs int) {
		t.Helper()
		cmd := exec.Command(bin, "launch", strconv.Itoa(secs), "5", "200")
		cmd.Stdout = w
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("launcher: %v", err)
		}
	}
	// settle waits until only the idle process is attached and the
	// engine holds no state of the processes that ended.
	settle := func() profiler.Stats {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			st := p.Stats()
			if st.Processes == 1 && st.ProcessesHeld == 1 {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("exited processes not released: %d attached, %d held, want 1 (the idle process)", st.Processes, st.ProcessesHeld)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// A short churn first fills what is filled once (binaries parsed,
	// goroutines, pools): the baseline is taken after it.
	launch(2)
	settle()
	fdBase, heapBase := openFDs(t), heapInUse()

	c.mu.Lock()
	warmProcs := 0
	for _, n := range c.pidSeen {
		warmProcs += n
	}
	c.mu.Unlock()
	// Meanwhile an app in a pid namespace of its own reports, as its
	// second thread's id, the idle process's: its spans cover the idle
	// process's unspanned work on that thread id, and name their
	// process by its namespace-local pid, which is not the idle one's.
	// The app is no target (a copy under another name): a target's
	// spans would be mapped to its own ids as soon as discovery found it,
	// and the scenario would depend on how long that took.
	nsBin := filepath.Join(t.TempDir(), "churn-nsapp")
	if b, err := os.ReadFile(bin); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(nsBin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	ns := exec.Command(nsBin, "nsspan", strconv.Itoa(idle.Process.Pid), "3000")
	ns.Stdout = w
	ns.Stderr = os.Stderr
	const secs = 20
	began := time.Now()
	if err := ns.Start(); err != nil {
		t.Fatal(err)
	}
	launch(secs)
	if err := ns.Wait(); err != nil {
		t.Errorf("nsspan: %v", err)
	}
	ran := time.Since(began)
	st := settle()
	fdAfter, heapAfter := openFDs(t), heapInUse()
	t.Logf("released in %v after the launcher ended", time.Since(began)-ran)

	close(stopTake)
	<-takeDone
	snaps, err := p.Close()
	closed = true
	if err != nil {
		t.Errorf("Close: %v", err)
	}
	c.check(snaps)
	final := p.Stats()
	idleIn.Close()
	_ = idle.Wait()
	w.Close()
	<-readDone

	c.mu.Lock()
	procs := 0
	for _, n := range c.pidSeen {
		procs += n
	}
	c.mu.Unlock()
	pids, tids := c.reused()
	perMinute := float64(procs-warmProcs) / ran.Minutes()
	t.Logf("%d processes (%d in the warm-up) in %v (%.0f a minute), %d pids and %d thread ids reused; %d spans",
		procs, warmProcs, ran.Round(time.Millisecond), perMinute, pids, tids, len(c.spans))
	t.Logf("samples of churn processes %d: in a span of their thread %d, linked %d, linked wrongly %d, after their process was reaped %d; engine: %+v, held spans %d",
		c.samples, c.covered, c.linked, c.wrongLink, c.afterEnd, final.Joins, st.SpansHeld)
	t.Logf("ebpf active %v percpu %v reason %v; perf records %+v", final.EBPF.Active, final.EBPF.PerCPU, final.EBPF.Reason, final.Source)
	t.Logf("fds %d -> %d, heap in use %.1f -> %.1f MiB, execs %d, samples %d, dropped as of a reused pid %d", total(fdBase), total(fdAfter), float64(heapBase)/(1<<20), float64(heapAfter)/(1<<20), final.Execs, final.Samples, final.PidReused)
	for _, ex := range c.wrongExamples {
		t.Log(ex)
	}

	if perMinute < 300 {
		t.Errorf("%.0f process lifetimes a minute, want at least 300", perMinute)
	}
	if pids < 20 || tids < 20 {
		t.Errorf("%d pids and %d thread ids reused, want at least 20 each: the test did not exercise reuse", pids, tids)
	}
	if c.wrongLink != 0 {
		t.Errorf("%d samples linked to a span of another process, thread or time", c.wrongLink)
	}
	if final.Joins.OtherProcess == 0 {
		t.Errorf("no sample was refused a span of another process: the namespaced app's spans did not meet the idle process's samples")
	}
	if c.afterEnd != 0 {
		t.Errorf("%d samples counted to a process after it ended", c.afterEnd)
	}
	// The join must work, or the checks above prove nothing.
	if c.covered < 500 || c.linked < c.covered/2 {
		t.Errorf("%d samples linked of %d in spans of their thread: want at least half of at least 500", c.linked, c.covered)
	}
	if total(fdAfter) > total(fdBase) {
		var grew []string
		for target, n := range fdAfter {
			if n > fdBase[target] {
				grew = append(grew, fmt.Sprintf("%s: %d -> %d", target, fdBase[target], n))
			}
		}
		// Who holds the new fds is not in /proc: the goroutines at this
		// moment may show it.
		var stacks strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
		t.Errorf("open fds grew from %d to %d: %v; goroutines:\n%s", total(fdBase), total(fdAfter), grew, stacks.String())
	}
	if heapAfter > heapBase+heapBase/2+4<<20 {
		t.Errorf("heap in use grew from %.1f to %.1f MiB", float64(heapBase)/(1<<20), float64(heapAfter)/(1<<20))
	}
}
