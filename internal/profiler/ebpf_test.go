package profiler_test

import (
	"strings"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/bpf"
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/internal/testchild"
)

// TestEBPFFallback: when the eBPF program cannot be loaded, ebpf auto
// profiles as before and says why, and ebpf required refuses to start.
// The load fails here by a label key the program cannot hold; a kernel
// without BTF or a collector without CAP_BPF takes the same path.
func TestEBPFFallback(t *testing.T) {
	child := testchild.Start(t, testchild.Build(t, "burner"), "-alpha", "1", "-beta", "0")
	opts := func(mode profiler.EBPFMode) profiler.Options {
		return profiler.Options{
			Pids: []int{child.Pid}, Perf: perf.Options{Frequency: 499}, Symbolize: true,
			EBPF: mode, SpanLabelKey: strings.Repeat("k", 40),
		}
	}
	p, err := profiler.Open(opts(profiler.EBPFAuto))
	testchild.RequirePerf(t, err)
	testchild.WaitFor(t, 10*time.Second, "100 samples", func() bool { return p.Stats().Samples >= 100 })
	st := p.Stats()
	snaps, err := p.Close()
	if err != nil {
		t.Fatal(err)
	}
	if st.EBPF.Active || st.EBPF.Reason == nil || !strings.Contains(st.EBPF.Reason.Error(), "longer than 32 bytes") {
		t.Errorf("ebpf auto: active %v, reason %v", st.EBPF.Active, st.EBPF.Reason)
	}
	n := 0
	for _, sn := range snaps {
		n += len(sn.Samples)
	}
	if n < 100 {
		t.Errorf("ebpf auto without its program: %d samples, the engine read %d", n, st.Samples)
	}
	if _, err := profiler.Open(opts(profiler.EBPFRequired)); err == nil || !strings.Contains(err.Error(), "eBPF") {
		t.Errorf("ebpf required without its program: Open returned %v", err)
	}
}

// TestSchedFallback: sched capture runs in the kernel where the eBPF
// scheduler program loads; where it does not (here, the programs refused
// by a label key they cannot hold, as a kernel without BTF or a collector
// without CAP_BPF would), it is off and says why, unless perf's
// context-switch events are allowed as the fallback, which then capture
// the off-CPU time of a thread that sleeps.
func TestSchedFallback(t *testing.T) {
	child := testchild.Start(t, testchild.Build(t, "burner"), "-burnsleep", "5ms,20ms", "-beta", "0")
	for _, c := range []struct {
		name             string
		key              string
		fallback         bool
		kernel, perfPath bool
		wantReason       string
	}{
		{"kernel", "", false, true, false, ""},
		{"off_without_bpf", strings.Repeat("k", 40), false, false, false, "longer than 32 bytes"},
		{"perf_without_bpf", strings.Repeat("k", 40), true, false, true, "longer than 32 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := profiler.Open(profiler.Options{
				Pids: []int{child.Pid}, Perf: perf.Options{Frequency: 199, Sched: true}, Symbolize: true,
				SpanLabelKey: c.key, SchedPerfFallback: c.fallback,
			})
			testchild.RequirePerf(t, err)
			// The measurement window: the off-CPU time of a second of
			// the worker's sleeps, or none.
			time.Sleep(time.Second)
			st := p.Stats()
			snaps, err := p.Close()
			if err != nil {
				t.Fatal(err)
			}
			if c.kernel && !st.OffCPU.Kernel {
				testchild.RequireKernel(t, "BPF", st.OffCPU.Reason, bpf.ErrPermission, bpf.ErrNotSupported)
			}
			off := st.OffCPU
			if off.Kernel != c.kernel || off.Perf != c.perfPath || (c.wantReason == "") != (off.Reason == nil) ||
				(off.Reason != nil && !strings.Contains(off.Reason.Error(), c.wantReason)) {
				t.Fatalf("off-CPU capture %+v, want kernel %v, perf %v, reason %q", off, c.kernel, c.perfPath, c.wantReason)
			}
			var offNs uint64
			for _, sn := range snaps {
				for _, s := range sn.Samples {
					if s.OffCPU() {
						offNs += s.Weight
					}
				}
			}
			// The worker sleeps 80% of the second, the runtime's threads most of it.
			t.Logf("off-CPU time %v; %+v", time.Duration(offNs), off)
			switch {
			case c.kernel || c.perfPath:
				if offNs < uint64(600*time.Millisecond) {
					t.Errorf("off-CPU time %v of a thread asleep 80%% of 1 s", time.Duration(offNs))
				}
			case offNs != 0:
				t.Errorf("sched capture off, yet %v of off-CPU time", time.Duration(offNs))
			}
		})
	}
}

// TestSchedGroupsOfExitedProcess: a process that switches 200 000 times a
// second and exits within a second, before the scheduler program's ring is
// read, still has its off-CPU time reported: its last groups are read
// before it is released, or else given to it once released, never
// dropped as belonging to no process.
func TestSchedGroupsOfExitedProcess(t *testing.T) {
	child := testchild.Start(t, testchild.Build(t, "spin"), "-pingpong", "60000", "-hop", "40")
	p, err := profiler.Open(profiler.Options{
		Pids: []int{child.Pid}, Perf: perf.Options{Frequency: 99, Sched: true}, EBPF: profiler.EBPFRequired,
	})
	testchild.RequireKernel(t, "BPF", err, bpf.ErrPermission, bpf.ErrNotSupported)
	child.Send(t, "go")
	if err := child.Cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	testchild.WaitFor(t, 10*time.Second, "a discovery pass sees the child exited", func() bool { return p.Stats().Processes == 0 })
	snaps, err := p.Close()
	if err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	var offNs uint64
	for _, sn := range snaps {
		for _, s := range sn.Samples {
			if s.OffCPU() && sn.Pid == child.Pid {
				offNs += s.Weight
			}
		}
	}
	t.Logf("off-CPU time %v in %d samples; %+v; program: %+v", time.Duration(offNs), st.OffCPU.Samples, st.OffCPU, st.EBPF.Program)
	if st.OffCPU.Unattached != 0 || st.EBPF.Program.SchedDropped != 0 {
		t.Errorf("%d groups of no process, %d dropped", st.OffCPU.Unattached, st.EBPF.Program.SchedDropped)
	}
	// Two threads share one CPU for ~0.6 s: each is off it about half
	// the time.
	if offNs < uint64(300*time.Millisecond) {
		t.Errorf("off-CPU time %v of two threads sharing a CPU", time.Duration(offNs))
	}
}
