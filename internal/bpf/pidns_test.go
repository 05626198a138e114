//go:build amd64

package bpf_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/bpf"
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/testchild"
)

// The test binary runs itself again inside a new pid and mount namespace
// for the layouts whose collector has one: layoutEnv names the layout,
// outsiderEnv the pid (in the initial namespace) of a process outside it.
const (
	layoutEnv   = "PERFPROF_BPF_PIDNS_LAYOUT"
	outsiderEnv = "PERFPROF_BPF_PIDNS_OUTSIDER"
)

// TestPidNamespaces: wherever the collector and its target are, the
// programs keep exactly the target's samples and name them, its records
// and its off-CPU groups by the ids perf and /proc give the collector:
//
//   - host: the collector in the initial namespace, the target in a
//     container's (a per-node collector);
//   - pod: both in one new namespace (a sidecar with shareProcessNamespace);
//     the target's pid there is made the global pid of a busy process
//     outside, which the programs must not take for it;
//   - nested: the target in a namespace below the collector's.
func TestPidNamespaces(t *testing.T) {
	for _, l := range []struct {
		name                  string
		collectorNS, targetNS bool
	}{
		{"host", false, true},
		{"pod", true, false},
		{"nested", true, true},
	} {
		t.Run(l.name, func(t *testing.T) {
			if l.collectorNS && os.Getenv(layoutEnv) != l.name {
				runInPidNamespace(t, l.name)
				return
			}
			checkLayout(t, l.targetNS)
		})
	}
}

// runInPidNamespace runs subtest layout of this test in the test binary
// started in a new pid and mount namespace, with a burning process outside
// it, and passes on its verdict.
func runInPidNamespace(t *testing.T, layout string) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		testchild.RequireKernel(t, "pid namespaces", fmt.Errorf("%w: no unshare(1): %v", bpf.ErrNotSupported, err), bpf.ErrNotSupported)
	}
	outsider := testchild.Start(t, testchild.Build(t, "burner"), "-alpha", "1", "-beta", "0.2", "-duration", "1m")
	cmd := exec.Command(unshare, "--pid", "--fork", "--mount-proc", "--kill-child",
		os.Args[0], "-test.run", "^TestPidNamespaces$/^"+layout+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), layoutEnv+"="+layout, outsiderEnv+"="+strconv.Itoa(outsider.Pid))
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		t.Log(line)
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && strings.Contains(string(out), "unshare failed") {
			testchild.RequireKernel(t, "pid namespaces", fmt.Errorf("%w: %s", bpf.ErrNotSupported, out), bpf.ErrNotSupported)
		}
		t.Fatalf("the test in a pid namespace of its own failed: %v", err)
	}
	if strings.Contains(string(out), "--- SKIP") {
		t.Skip("skipped in the pid namespace (above)")
	}
}

// checkLayout is the collector's side: the programs on per-CPU events
// that drop the samples of other processes, and the scheduler program,
// with one target started here (in a namespace of its own with targetNS).
func checkLayout(t *testing.T, targetNS bool) {
	p := load(t, bpf.Options{DropOthers: true, SchedInterval: time.Millisecond})
	if err := p.AttachSched(); err != nil {
		t.Fatal(err)
	}
	ns := p.PidNamespace()
	inside := os.Getenv(layoutEnv) != ""
	if (ns.Level > 0) != inside {
		t.Fatalf("the programs name processes in %+v; in a pid namespace of its own: %v", ns, inside)
	}
	outsider, _ := strconv.Atoi(os.Getenv(outsiderEnv))
	target, local := startTarget(t, targetNS, outsider)
	t.Logf("pid namespace %+v; target pid %d here, %d in its own namespace; outsider %d (initial namespace)", ns, target, local, outsider)
	if err := p.AddPlainTarget(target); err != nil {
		t.Fatal(err)
	}

	s, err := perf.Open(perf.Options{Scope: perf.ScopeSystem, Frequency: 999, BPFProgram: p.FD()})
	testchild.RequirePerf(t, err)
	var (
		mu              sync.Mutex
		mine, others    int
		unpaired, tids  = 0, map[uint32]bool{}
		pairer          = newPairer(maxSkew)
		recPids, recBad = map[uint32]int{}, 0
	)
	addRecord := func(r *bpf.Record) {
		if r.Pid != uint32(target) {
			recBad++
		}
		recPids[r.Pid]++
		pairer.add(r)
	}
	done := make(chan error, 1)
	go func() {
		done <- s.Read(func(r *perf.Record) {
			if r.Type != perf.RecordSample || r.Sample.Kind != perf.EventCPUClock {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if int(r.Sample.Pid) != target {
				others++
				return
			}
			mine++
			tids[r.Sample.Tid] = true
			if _, ok := pairer.pair(r.Sample.Tid, r.Sample.Time); !ok {
				if _, err := p.Drain(addRecord); err != nil {
					t.Errorf("Drain: %v", err)
				}
				if _, ok := pairer.pair(r.Sample.Tid, r.Sample.Time); !ok {
					unpaired++
				}
			}
		})
	}()
	if err := s.Attach(target); err != nil {
		t.Fatal(err)
	}
	cpu0 := testchild.Sum(testchild.ThreadCPU(t, target))
	time.Sleep(1500 * time.Millisecond) // the measurement window: the samples of 1.5 s of the target's CPU
	cpu := time.Duration(testchild.Sum(testchild.ThreadCPU(t, target)) - cpu0)
	s.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if _, err := p.Drain(addRecord); err != nil {
		t.Fatal(err)
	}
	threads, err := perf.Threads(target)
	if err != nil {
		t.Fatal(err)
	}
	var groups, groupsBad int
	var off time.Duration
	if _, err := p.DrainSched(func(r *bpf.SchedRecord) {
		groups++
		off += time.Duration(r.Count) * time.Millisecond
		if r.Pid != uint32(target) || !slices.Contains(threads, int(r.Tid)) {
			groupsBad++
		}
	}); err != nil {
		t.Fatal(err)
	}
	st, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	// What the programs cost here, where the kernel counts it
	// (Options.RunStats; needs CAP_SYS_ADMIN): every run, of every
	// sample and context switch on the machine, targets or not.
	if st.RunCount > 0 {
		t.Logf("the programs ran %d times, %v a run on average (pid namespace level %d)", st.RunCount, st.RunTime/time.Duration(st.RunCount), ns.Level)
	}
	want := int(cpu.Seconds() * 999)
	t.Logf("1.5 s at 999 Hz: %d samples of the target (its %v of CPU: %d expected) on %d threads (%d without their record), %d of other processes; records by pid %v; "+
		"%d off-CPU groups (%v); the programs dropped %d samples of other processes",
		mine, cpu.Round(time.Millisecond), want, len(tids), unpaired, others, recPids, groups, off, st.Others)
	if mine < want*9/10 || mine > want*11/10 {
		t.Errorf("%d samples of the target, want %d ± 10%%", mine, want)
	}
	if others > 0 {
		t.Errorf("%d samples of other processes reached perf's rings", others)
	}
	if recBad > 0 || unpaired > mine/100 {
		t.Errorf("%d records of other pids; %d of %d samples without their record", recBad, unpaired, mine)
	}
	for tid := range tids {
		if !slices.Contains(threads, int(tid)) {
			t.Errorf("a sample of tid %d, not a thread of %d (%v)", tid, target, threads)
		}
	}
	if groups == 0 || groupsBad > 0 {
		t.Errorf("%d off-CPU groups, %d of them not of the target's threads", groups, groupsBad)
	}
	if outsider > 0 && st.Others == 0 {
		t.Errorf("the programs dropped no sample of the burning process outside the namespace")
	}
}

// startTarget starts burner, in a pid namespace of its own with ownNS, and
// returns its pid here and in its own namespace. In a pid namespace of the
// collector's own it gives the target the pid that the outsider has in the
// initial namespace (ns_last_pid), the collision that ids of the wrong
// namespace would not survive.
func startTarget(t *testing.T, ownNS bool, outsider int) (pid, local int) {
	bin := testchild.Build(t, "burner")
	args := []string{"-alpha", "1", "-beta", "0.5", "-duration", "1m"}
	if ownNS {
		args = append([]string{"--pid", "--fork", "--mount-proc", "--kill-child", bin}, args...)
		bin = "unshare"
	}
	for try := 0; ; try++ {
		// unshare forks once more: its child is the target.
		want := outsider
		if outsider > 0 && os.Getenv(layoutEnv) != "" {
			last := outsider - 1
			if ownNS {
				last--
			}
			if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(last)), 0); err != nil {
				t.Fatalf("set ns_last_pid: %v", err)
			}
		} else {
			want = 0
		}
		c := testchild.Start(t, bin, args...)
		pid, local = c.Pid, c.Ready[0]
		if ownNS {
			pid = onlyChild(t, c.Pid)
		}
		if want == 0 || pid == want {
			return pid, local
		}
		// Another task of this namespace took the pid first.
		_ = c.Cmd.Process.Kill()
		_ = c.Cmd.Wait()
		if try == 20 {
			t.Fatalf("could not give the target pid %d (got %d)", want, pid)
		}
	}
}

// onlyChild returns the one child of pid, waiting for it.
func onlyChild(t *testing.T, pid int) int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", strconv.Itoa(pid), "children"))
		if f := strings.Fields(string(b)); len(f) == 1 {
			c, err := strconv.Atoi(f[0])
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("children of %d: %q", pid, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
