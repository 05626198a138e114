package perfprofreceiver

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/xreceiver"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/perfprof/perfprof/internal/testchild"
	"github.com/perfprof/perfprof/receiver/perfprofreceiver/internal/metadatatest"
)

// TestReceiverKernelStacksAndTelemetry samples a thread that lives in
// read(2): its stacks must show named kernel frames above the Go frames,
// and the receiver's telemetry must count exactly the samples it emitted.
func TestReceiverKernelStacksAndTelemetry(t *testing.T) {
	requirePerf(t)
	bin := testchild.Build(t, "burner")
	child := testchild.Start(t, bin, "-kernel", "-alpha", "1", "-beta", "0")

	tt := componenttest.NewTelemetry()
	defer func() { require.NoError(t, tt.Shutdown(context.Background())) }()
	cfg := createDefaultConfig()
	cfg.Targets.Pids = []int{child.Pid}
	cfg.Frequency = 499
	cfg.KernelStacks = true
	cfg.ReportInterval = 500 * time.Millisecond
	sink := new(consumertest.ProfilesSink)
	f := NewFactory().(xreceiver.Factory)
	r, err := f.CreateProfiles(context.Background(), metadatatest.NewSettings(tt), cfg, sink)
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background(), nil))
	// The samples of the reader thread to judge; a report that emitted
	// them has moved the engine's counters into telemetry first.
	readerSamples := func() int {
		n := 0
		for _, s := range flatten(t, sink.AllProfiles()) {
			if s.tid == int64(child.Ready[1]) {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return readerSamples() > 150 }, 20*time.Second, 100*time.Millisecond, "samples of the reader thread")
	metadatatest.AssertEqualReceiverPerfprofProcesses(t, tt, []metricdata.DataPoint[int64]{{Value: 1}}, metricdatatest.IgnoreTimestamp())
	require.NoError(t, r.Shutdown(context.Background()))

	samples := flatten(t, sink.AllProfiles())
	var reader, withSyscall, withGo int
	for _, s := range samples {
		if s.tid != int64(child.Ready[1]) {
			continue
		}
		reader++
		if has(s.functions, "ksys_read") || has(s.functions, "vfs_read") {
			withSyscall++
			if has(s.functions, "main.readZero") {
				withGo++
			}
		}
	}
	t.Logf("%d samples of the reader thread, %d in ksys_read/vfs_read, %d of those under main.readZero", reader, withSyscall, withGo)
	require.Greater(t, reader, 100)
	require.Greater(t, withSyscall, reader/2, "kernel frames named from kallsyms")
	require.Greater(t, withGo, withSyscall*9/10, "user frames below the kernel frames")

	metadatatest.AssertEqualReceiverPerfprofSamples(t, tt, []metricdata.DataPoint[int64]{{Value: int64(len(samples))}}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualReceiverPerfprofProcesses(t, tt, []metricdata.DataPoint[int64]{{Value: 0}}, metricdatatest.IgnoreTimestamp())

	// Every sample has one unwinding result (unwind: auto), those that
	// waited for their process's unwind tables included.
	m, err := tt.GetMetric("otelcol_receiver_perfprof_unwound_samples")
	require.NoError(t, err)
	results := map[string]int64{}
	var unwound int64
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		result, _ := dp.Attributes.Value("result")
		results[result.AsString()] += dp.Value
		unwound += dp.Value
	}
	t.Logf("unwound_samples by result: %v", results)
	require.Equal(t, int64(len(samples)), unwound, "unwinding results")
}
