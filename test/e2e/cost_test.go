package e2e

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/testchild"
	"github.com/perfprof/perfprof/test/measure"
)

// The bounds TestCollectorCost holds the collector to in make test, on a
// machine that runs other tests before and after it and may be busy: four
// times the budget make cost measures on a quiet machine (README, Cost), so
// that a regression of the kind the budget is for (a binary parsed again
// at every report, a timer that wakes ten times a second, a ring sized for
// the largest host) fails it, and noise does not.
const (
	costMaxCPU     = 1.0 // % of a core, steady state, 99 Hz
	costMaxPeakMiB = 64  // VmHWM over the whole run
)

// TestCollectorCost runs the collector with the receiver's defaults (99 Hz,
// unwind auto, eBPF and off-CPU capture where they run) and the tracefile
// exporter on a steady two-thread C program built with frame pointers, and
// measures its CPU after the first reports (the first symbolization of libc
// with its debug file included in the warm-up) and its peak RSS.
func TestCollectorCost(t *testing.T) {
	requirePerf(t)
	bin := filepath.Join(t.TempDir(), "nofp-c-fp")
	cmd, err := testchild.NoFPCommand("c", bin, "-fno-omit-frame-pointer")
	if err != nil {
		testchild.NeedRuntime(t, "cannot build the C target: %v", err)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the C target: %v\n%s", err, out)
	}
	target := testchild.Start(t, bin)
	dir := t.TempDir()
	config := fmt.Sprintf(`
receivers:
  perfprof:
    targets:
      pids: [%d]
exporters:
  tracefile:
    directory: %s
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [perfprof]
      exporters: [tracefile]
`, target.Pid, dir)
	cmd, out := runCollector(t, config, nil)
	waitFor(t, out, "Everything is ready", 30*time.Second)
	// The first report comes after report_interval (10 s) and symbolizes
	// libc with its debug file; the window starts after the second.
	time.Sleep(22 * time.Second)
	const window = 20 * time.Second
	pid := cmd.Process.Pid
	cpu0, err := measure.StatCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	tcpu0, _ := measure.StatCPU(target.Pid)
	time.Sleep(window)
	cpu1, err := measure.StatCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	tcpu1, _ := measure.StatCPU(target.Pid)
	mem, err := measure.ReadMemory(pid)
	if err != nil {
		t.Fatal(err)
	}
	pct := 100 * float64(cpu1-cpu0) / float64(window)
	peak := float64(mem.HWM) / 1024
	t.Logf("collector: %.2f%% of a core over %v (target %.2f cores), RSS %.1f MiB (anon %.1f, file %.1f), peak %.1f MiB; load average %s",
		pct, window, float64(tcpu1-tcpu0)/float64(window), float64(mem.RSS)/1024, float64(mem.RSSAnon)/1024, float64(mem.RSSFile)/1024, peak, measure.LoadAvg())
	if tcpu1-tcpu0 < window/4 {
		t.Fatalf("the target ran %v of CPU in %v: the machine is too busy to measure", tcpu1-tcpu0, window)
	}
	if pct > costMaxCPU {
		t.Errorf("the collector took %.2f%% of a core in steady state at 99 Hz, want ≤ %.2f%%", pct, costMaxCPU)
	}
	if peak > costMaxPeakMiB {
		t.Errorf("the collector's peak RSS was %.1f MiB, want ≤ %d MiB", peak, costMaxPeakMiB)
	}
}
