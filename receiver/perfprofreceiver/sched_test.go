package perfprofreceiver

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/perfprof/perfprof/internal/testchild"
)

func ptr[T any](v T) *T { return &v }

// schedPaths are the two ways context switches are captured: by the eBPF
// scheduler program (the default where it runs), and by perf's
// context-switch events (its fallback, with sched.enabled: true).
var schedPaths = []struct{ name, ebpf string }{{"kernel", "required"}, {"perf_events", "off"}}

// offCPURun profiles a burner child with sched capture, on the path ebpf
// says, for d and returns the samples of its first worker thread, and the
// wall time from the receiver's start to its stop (with the eBPF programs,
// less their loading, ~0.1 s, which the shares would count as not
// observed).
func offCPURun(t *testing.T, ebpf string, d time.Duration, args ...string) (samples []joinedSample, tid int64, wall time.Duration) {
	requirePerf(t)
	bin := testchild.Build(t, "burner")
	child := testchild.Start(t, bin, args...)
	cfg := createDefaultConfig()
	cfg.Targets.Pids = []int{child.Pid}
	cfg.Frequency = 199
	cfg.ReportInterval = time.Second
	cfg.Correlation.Window = 0
	cfg.EBPF = ebpf
	if ebpf == "off" {
		cfg.Sched.Enabled = ptr(true) // the fallback is asked for
	}
	cfg.Sched.OffCPUInterval = 10 * time.Millisecond
	sink := new(consumertest.ProfilesSink)
	r := startReceiverOrSkip(t, cfg, sink)
	start := time.Now()
	off := r.(signal).Value().prof.Stats().OffCPU
	if off.Kernel != (ebpf != "off") || off.Perf != (ebpf == "off") {
		t.Fatalf("ebpf %s: off-CPU capture %+v", ebpf, off)
	}
	time.Sleep(d)
	require.NoError(t, r.Shutdown(context.Background()))
	wall = time.Since(start)
	tid = int64(child.Ready[1])
	for _, s := range joinedSamples(t, sink, child.Pid) {
		if s.tid == tid {
			samples = append(samples, s)
		}
	}
	return samples, tid, wall
}

// TestOffCPUSleepingThread: a thread burning 20 ms in burnAlpha, then
// sleeping 30 ms in nanosleep inside sleepGamma, spends 40% of its time on
// CPU and 60% blocked, and the off-CPU time has sleepGamma's stack.
func TestOffCPUSleepingThread(t *testing.T) {
	for _, path := range schedPaths {
		t.Run(path.name, func(t *testing.T) { testOffCPUSleepingThread(t, path.ebpf) })
	}
}

func testOffCPUSleepingThread(t *testing.T, ebpf string) {
	samples, _, wall := offCPURun(t, ebpf, 4*time.Second, "-burnsleep", "20ms,30ms", "-beta", "0")
	var on, blocked, runnable, inSleep, deltas float64
	var withDelta, onSamples int
	period := 1e9 / 199.0
	for _, s := range samples {
		if !s.offCPU {
			on += period
			onSamples++
			if s.cpuDelta > 0 {
				withDelta++
				deltas += float64(s.cpuDelta)
			}
			continue
		}
		switch s.state {
		case "blocked":
			blocked += float64(s.value)
			if has(s.functions, "main.sleepGamma") {
				inSleep += float64(s.value)
			}
		case "runnable":
			runnable += float64(s.value)
		default:
			t.Fatalf("off-CPU sample with thread.state %q", s.state)
		}
	}
	w := float64(wall.Nanoseconds())
	t.Logf("over %v: on-CPU %.1f%% (CPU deltas of %d of %d samples: %.1f%%), blocked %.1f%% (in sleepGamma %.1f%%), runnable %.1f%%",
		wall.Round(time.Millisecond), 100*on/w, withDelta, onSamples, 100*deltas/w, 100*blocked/w, 100*inSleep/w, 100*runnable/w)
	require.InDelta(t, 0.40, on/w, 0.10, "on-CPU share")
	// Each on-CPU sample says the CPU time it stands for: the thread's
	// since its previous sample (the first of each thread has none). On
	// perf's events a sample taken by a report before its context switches
	// are accounted (they wait 500 ms to be put in order) goes without.
	if ebpf != "off" {
		require.GreaterOrEqual(t, withDelta, onSamples*95/100, "on-CPU samples with thread.cpu.time_delta")
		require.InDelta(t, 0.40, deltas/w, 0.10, "on-CPU share by CPU deltas")
	}
	require.InDelta(t, 0.60, inSleep/w, 0.10, "off-CPU share with the sleeping function's stack")
}

// TestOffCPURunnable: a busy thread pinned, with two CPU hogs, to one CPU
// gets a third of it and waits, runnable, for much of the rest. (It also
// blocks: the Go runtime preempts a goroutine running over 10 ms, and a
// thread locked to its goroutine then sleeps until the goroutine is handed
// back.) Unpinned and alone, the sleeping thread above shows ~1% runnable.
func TestOffCPURunnable(t *testing.T) {
	for _, path := range schedPaths {
		t.Run(path.name, func(t *testing.T) { testOffCPURunnable(t, path.ebpf) })
	}
}

func testOffCPURunnable(t *testing.T, ebpf string) {
	samples, _, wall := offCPURun(t, ebpf, 3*time.Second, "-alpha", "1", "-beta", "0", "-hogs", "2", "-pin", "0")
	var on, blocked, runnable float64
	for _, s := range samples {
		switch {
		case !s.offCPU:
			on += 1e9 / 199.0
		case s.state == "runnable":
			runnable += float64(s.value)
		case s.state == "blocked":
			blocked += float64(s.value)
		}
	}
	w := float64(wall.Nanoseconds())
	t.Logf("over %v: on-CPU %.1f%%, runnable %.1f%%, blocked %.1f%%", wall.Round(time.Millisecond), 100*on/w, 100*runnable/w, 100*blocked/w)
	require.Greater(t, runnable/w, 0.2, "a thread sharing one CPU with two hogs waits, runnable, for it")
	require.InDelta(t, 1.0, (on+runnable+blocked)/w, 0.15, "on-CPU + off-CPU time accounts for the wall time")
}
