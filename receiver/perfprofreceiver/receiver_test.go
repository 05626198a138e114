package perfprofreceiver

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatatest/pprofiletest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.opentelemetry.io/collector/receiver/xreceiver"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/perfprof/perfprof/internal/bpf"
	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/testchild"
	"github.com/perfprof/perfprof/pkg/pprofiledict"
	"github.com/perfprof/perfprof/receiver/perfprofreceiver/internal/metadata"
)

// requirePerf skips (or, with PERFPROF_REQUIRE_PERF=1, fails) when this
// machine denies perf events, by trying what the receiver will do.
func requirePerf(t *testing.T) {
	s, err := perf.Open(perf.Options{Frequency: 99})
	testchild.RequirePerf(t, err)
	s.Close()
}

func startReceiver(t *testing.T, cfg *Config, sink *consumertest.ProfilesSink) xreceiver.Profiles {
	t.Helper()
	r, err := createAndStart(t, cfg, sink)
	require.NoError(t, err)
	return r
}

// processLogged returns a receiver.Settings whose logger is observed, and a
// function that reports whether the engine logged msg ("Sampling process",
// "Released process") of process pid.
func processLogged(t *testing.T) (receiver.Settings, func(msg string, pid int) bool) {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	set := receivertest.NewNopSettings(metadata.Type)
	set.Logger = zap.New(core)
	return set, func(msg string, pid int) bool {
		for _, e := range logs.FilterMessage(msg).All() {
			if p, ok := e.ContextMap()["pid"]; ok && p == int64(pid) {
				return true
			}
		}
		return false
	}
}

// createAndStart makes a receiver of a valid cfg and returns it with the
// error of its start.
func createAndStart(t *testing.T, cfg *Config, sink *consumertest.ProfilesSink) (xreceiver.Profiles, error) {
	t.Helper()
	require.NoError(t, cfg.Validate())
	f := NewFactory().(xreceiver.Factory)
	r, err := f.CreateProfiles(context.Background(), receivertest.NewNopSettings(f.Type()), cfg, sink)
	require.NoError(t, err)
	return r, r.Start(context.Background(), nil)
}

// startReceiverOrSkip is startReceiver for a configuration that needs the
// eBPF programs (ebpf: required): it skips the test, naming why, when the
// kernel or the privileges do not allow them (fails it under
// PERFPROF_REQUIRE_PERF=1).
func startReceiverOrSkip(t *testing.T, cfg *Config, sink *consumertest.ProfilesSink) xreceiver.Profiles {
	t.Helper()
	r, err := createAndStart(t, cfg, sink)
	testchild.RequireKernel(t, "BPF", err, bpf.ErrPermission, bpf.ErrNotSupported)
	return r
}

// flatSample is one timestamp of one pprofile sample, resolved.
type flatSample struct {
	pid       int64
	tid       int64
	threadNm  string
	time      uint64   // Unix ns
	functions []string // leaf first
	files     []string
}

func flatten(t *testing.T, all []pprofile.Profiles) []flatSample {
	t.Helper()
	var out []flatSample
	for _, pd := range all {
		validate(t, pd)
		for _, p := range pprofiledict.Decode(pd) {
			pid, ok := p.Resource.Get(convention.ProcessPid)
			require.True(t, ok, "resource without process.pid")
			for _, prof := range p.Profiles {
				if prof.OffCPU {
					continue
				}
				for _, s := range prof.Samples {
					fs := flatSample{pid: pid.Int(), tid: int64(s.Tid), threadNm: s.ThreadName, time: s.Time}
					for _, l := range s.Stack {
						for _, f := range l.Frames {
							fs.functions = append(fs.functions, f.Name)
							fs.files = append(fs.files, f.File)
						}
					}
					out = append(out, fs)
				}
			}
		}
	}
	return out
}

// validate has collector-contrib's validator check every profile of pd,
// and checks that every sample has a value per timestamp.
func validate(t *testing.T, pd pprofile.Profiles) {
	t.Helper()
	for _, rp := range pd.ResourceProfiles().All() {
		for _, sp := range rp.ScopeProfiles().All() {
			for _, prof := range sp.Profiles().All() {
				require.NoError(t, pprofiletest.ValidateProfile(pd.Dictionary(), prof))
				for _, s := range prof.Samples().All() {
					require.Equal(t, s.TimestampsUnixNano().Len(), s.Values().Len())
				}
			}
		}
	}
}

func has(fns []string, name string) bool {
	for _, f := range fns {
		if f == name {
			return true
		}
	}
	return false
}

// TestReceiverProfilesRealProcess samples a child that burns CPU in two
// known functions on two threads, through the whole receiver, and checks
// the profiles against the child's own CPU accounting.
func TestReceiverProfilesRealProcess(t *testing.T) {
	requirePerf(t)
	bin := testchild.Build(t, "burner")
	child := testchild.Start(t, bin, "-alpha", "1.0", "-beta", "0.4")
	tidA, tidB := child.Ready[1], child.Ready[2]

	cfg := createDefaultConfig()
	cfg.Targets.Pids = []int{child.Pid}
	cfg.Frequency = 999
	cfg.ReportInterval = time.Second
	// The burner is Go (frame pointers). Unwinding 16 KiB copies costs
	// 13 µs a sample under the race detector (0.6 without): with both
	// CPUs burning at 999 Hz the reader then lost ~4% of the records
	// (counted), against the 10% this test allows for sampling error.
	cfg.Unwind = "frame_pointer"
	sink := new(consumertest.ProfilesSink)
	r := startReceiver(t, cfg, sink)
	// The measurement window is bounded by two reads of the child's CPU
	// clocks, taken once sampling runs, and only the samples stamped
	// inside it are counted: measured from before Start to after
	// Shutdown, the window also held the receiver's start and stop, which
	// take a tenth of 4 s on a busy machine under the race detector (a CI
	// run counted 11% fewer samples than CPU time that way).
	time.Sleep(500 * time.Millisecond)
	t0, before := time.Now(), testchild.ThreadCPU(t, child.Pid)
	// The ratios below are judged on the thousands of samples of 4 s of
	// the child's CPU.
	time.Sleep(4 * time.Second)
	after, t1 := testchild.ThreadCPU(t, child.Pid), time.Now()
	// One more report interval, so the samples of the window are out.
	time.Sleep(1500 * time.Millisecond)
	st := r.(signal).Value().prof.Stats().Source
	require.NoError(t, r.Shutdown(context.Background()))
	t.Logf("session: %+v", st)

	all := flatten(t, sink.AllProfiles())
	require.Greater(t, len(all), 500, "samples in 4 s at 999 Hz of a busy child")
	var samples []flatSample
	var alpha, beta int
	for _, s := range all {
		require.Equal(t, int64(child.Pid), s.pid)
		_, ok := after[int(s.tid)]
		require.True(t, ok, "tid %d is not a thread of the child", s.tid)
		switch {
		case has(s.functions, "main.burnAlpha"):
			require.Equal(t, int64(tidA), s.tid, "burnAlpha sampled on the wrong thread")
		case has(s.functions, "main.burnBeta"):
			require.Equal(t, int64(tidB), s.tid, "burnBeta sampled on the wrong thread")
		}
		if s.time < uint64(t0.UnixNano()) || s.time >= uint64(t1.UnixNano()) {
			continue
		}
		samples = append(samples, s)
		switch {
		case has(s.functions, "main.burnAlpha"):
			alpha++
		case has(s.functions, "main.burnBeta"):
			beta++
		}
	}
	cpuA := float64(after[tidA] - before[tidA])
	cpuB := float64(after[tidB] - before[tidB])
	total := float64(testchild.Sum(after) - testchild.Sum(before))
	wantRatio := cpuA / cpuB
	gotRatio := float64(alpha) / float64(beta)
	period := 1e9 / float64(cfg.Frequency)
	t.Logf("%d samples (%d in the window): burnAlpha %d, burnBeta %d (ratio %.3f; CPU ratio %.3f); samples × period %.3f s, child CPU %.3f s",
		len(all), len(samples), alpha, beta, gotRatio, wantRatio, float64(len(samples))*period/1e9, total/1e9)
	require.InEpsilon(t, wantRatio, gotRatio, 0.15, "burnAlpha:burnBeta samples against their threads' CPU time")
	require.InEpsilon(t, total, float64(len(samples))*period, 0.10, "samples × period against the child's CPU time")
	// Frames carry file:line for the Go binary.
	for _, s := range samples {
		for i, f := range s.functions {
			if f == "main.burnAlpha" {
				require.Equal(t, "main.go", filepath.Base(s.files[i]))
			}
		}
	}
}

// TestReceiverFindsExecutablesStartedLater checks discovery: a process of a
// target executable started after the receiver is sampled within seconds,
// and one that exits is released while the other goes on.
func TestReceiverFindsExecutablesStartedLater(t *testing.T) {
	requirePerf(t)
	bin := testchild.Build(t, "burner")
	cfg := createDefaultConfig()
	cfg.Targets.Executables = []string{filepath.Base(bin)}
	cfg.Frequency = 499
	cfg.ReportInterval = 500 * time.Millisecond
	cfg.DiscoveryInterval = 200 * time.Millisecond
	cfg.Correlation.Window = 0 // no spans here: emit at once
	sink := new(consumertest.ProfilesSink)
	require.NoError(t, cfg.Validate())
	set, logged := processLogged(t)
	r, err := NewFactory().(xreceiver.Factory).CreateProfiles(context.Background(), set, cfg, sink)
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background(), nil))
	defer func() { require.NoError(t, r.Shutdown(context.Background())) }()

	short := testchild.Start(t, bin, "-alpha", "0.5", "-beta", "0", "-duration", "1500ms")
	long := testchild.Start(t, bin, "-alpha", "0.5", "-beta", "0")
	count := func(pid int) int {
		n := 0
		for _, s := range flatten(t, sink.AllProfiles()) {
			if s.pid == int64(pid) {
				n++
			}
		}
		return n
	}
	// A deadline, not a measure: a busy machine finds and samples the
	// processes later, and gives the short one little of its 1.5 s.
	if !assert.Eventually(t, func() bool { return count(short.Pid) > 10 && count(long.Pid) > 50 }, 15*time.Second, 100*time.Millisecond) {
		t.Fatalf("processes started after the receiver were not sampled: %d samples of the short one, %d of the long one", count(short.Pid), count(long.Pid))
	}
	require.NoError(t, short.Cmd.Wait())
	prof := r.(signal).Value().prof
	require.Eventually(t, func() bool { return logged("Released process", short.Pid) }, 5*time.Second, 20*time.Millisecond,
		"the exited process was not released")
	n := count(long.Pid)
	require.Eventually(t, func() bool { return count(long.Pid) > n+50 }, 5*time.Second, 100*time.Millisecond,
		"the surviving target stopped being sampled after the other exited")
	require.False(t, logged("Released process", long.Pid), "the surviving process released")
	require.Equal(t, 1, prof.Stats().Processes, "exited process still counted")
}

func TestReceiverFailsOnMissingPid(t *testing.T) {
	requirePerf(t)
	cfg := createDefaultConfig()
	cfg.Targets.Pids = []int{1 << 23}
	f := NewFactory().(xreceiver.Factory)
	r, err := f.CreateProfiles(context.Background(), receivertest.NewNopSettings(f.Type()), cfg, consumertest.NewNop())
	require.NoError(t, err)
	err = r.Start(context.Background(), nil)
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "target pid 8388608") && strings.Contains(err.Error(), "no such process"), err.Error())
	require.NoError(t, r.Shutdown(context.Background()))
}

// TestProfilesSignalFlushesWhenItStops: the collector stops all pipelines
// in one order, in which the profiles exporters may stop before the traces
// side of this receiver. The final report must go out when the profiles
// signal stops, not when the last signal does: a report sent to a stopped
// exporter's queue is lost without an error.
func TestProfilesSignalFlushesWhenItStops(t *testing.T) {
	requirePerf(t)
	bin := testchild.Build(t, "burner")
	child := testchild.Start(t, bin, "-alpha", "1", "-beta", "0")
	cfg := createDefaultConfig()
	cfg.Targets.Pids = []int{child.Pid}
	cfg.Frequency = 499
	cfg.ReportInterval = time.Minute // only the final report
	cfg.Correlation.Window = 0
	f := NewFactory().(xreceiver.Factory)
	set := receivertest.NewNopSettings(f.Type())
	sink := new(consumertest.ProfilesSink)
	prof, err := f.CreateProfiles(context.Background(), set, cfg, sink)
	require.NoError(t, err)
	traces, err := f.CreateTraces(context.Background(), set, cfg, new(consumertest.TracesSink))
	require.NoError(t, err)
	require.NoError(t, prof.Start(context.Background(), nil))
	require.NoError(t, traces.Start(context.Background(), nil))
	p := prof.(signal).Value().prof
	require.Eventually(t, func() bool { return p.Stats().Samples > 0 }, 10*time.Second, 10*time.Millisecond, "no sample read")

	require.NoError(t, prof.Shutdown(context.Background()))
	require.Positive(t, sink.SampleCount(), "no final report when the profiles signal stopped")
	n := sink.SampleCount()
	require.NoError(t, traces.Shutdown(context.Background()))
	require.Equal(t, n, sink.SampleCount(), "a report after the profiles signal stopped")
}

// TestSamplesWaitOnlyForSpansThatCanCome runs the receiver on a busy child
// twice, reporting every 500 ms: without protocols no span can come, and
// its samples are emitted at the first reports; with span ingest on they
// wait for correlation.window (here 6 s) first.
func TestSamplesWaitOnlyForSpansThatCanCome(t *testing.T) {
	requirePerf(t)
	bin := testchild.Build(t, "burner")
	for _, ingest := range []bool{false, true} {
		child := testchild.Start(t, bin, "-alpha", "1.0", "-beta", "1.0")
		cfg := createDefaultConfig()
		cfg.Targets.Pids = []int{child.Pid}
		cfg.ReportInterval = 500 * time.Millisecond
		cfg.Correlation.Window = 6 * time.Second
		if ingest {
			cfg.Protocols.GRPC.GetOrInsertDefault().NetAddr.Endpoint = freeAddr(t)
		}
		sink := new(consumertest.ProfilesSink)
		r := startReceiver(t, cfg, sink)
		start := time.Now() // after the programs are loaded and the child attached
		var first time.Duration
		for first == 0 && time.Since(start) < 10*time.Second {
			time.Sleep(50 * time.Millisecond)
			if len(flatten(t, sink.AllProfiles())) > 0 {
				first = time.Since(start)
			}
		}
		require.NoError(t, r.Shutdown(context.Background()))
		child.Cmd.Process.Kill()
		t.Logf("span ingest %v: first samples after %v", ingest, first)
		switch {
		case first == 0:
			t.Errorf("span ingest %v: no samples in 10 s", ingest)
		case !ingest && first > 3*time.Second:
			t.Errorf("without span ingest the first samples came after %v, want the first reports (500 ms apart)", first)
		case ingest && first < cfg.Correlation.Window-time.Second:
			// Less a second: samples taken while the receiver started
			// count their window from then.
			t.Errorf("with span ingest the first samples came after %v, before the %v window", first, cfg.Correlation.Window)
		}
	}
}
