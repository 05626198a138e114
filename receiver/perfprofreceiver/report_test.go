package perfprofreceiver

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/receiver/perfprofreceiver/internal/metadatatest"
)

func TestReportWaitsForTheWindowAndCounts(t *testing.T) {
	tt := componenttest.NewTelemetry()
	defer func() { require.NoError(t, tt.Shutdown(context.Background())) }()
	sc := startScripted(t, tt, 5*time.Second, 1000)
	r, sink := sc.r, sc.sink
	now := clock.Monotonic()
	s := uint64(time.Second)
	r.indexSpans(spanAt(7, "GET /a", 1, now-30*s, now-20*s))
	sc.sample(7, now-25*s) // in the span
	sc.sample(7, now-15*s) // on its thread, after it: no span
	sc.sample(8, now-s)    // younger than the window: waits
	r.report(context.Background())

	require.Len(t, sink.AllProfiles(), 1)
	got := joinedSamples(t, sink, 100)
	require.Len(t, got, 2)
	require.Equal(t, linkKey(pcommon.TraceID{1}, pcommon.SpanID{1}), got[0].link)
	require.Equal(t, "GET /a", got[0].root)
	require.Equal(t, int64(3), got[0].worker, "worker id from the span")
	require.Equal(t, [24]byte{}, got[1].link)
	require.Equal(t, int64(3), got[1].worker, "worker id of the thread, without a span")

	// A span that ends before the watermark comes too late to be joined.
	r.indexSpans(spanAt(7, "GET /late", 2, now-40*s, now-35*s))
	// One that ends an hour from now is not held either.
	r.indexSpans(spanAt(7, "GET /future", 3, now-s, now+3600*s))
	metadatatest.AssertEqualReceiverPerfprofSpans(t, tt, []metricdata.DataPoint[int64]{
		{Value: 1, Attributes: attrSet("outcome", "indexed")},
		{Value: 1, Attributes: attrSet("outcome", "late")},
		{Value: 1, Attributes: attrSet("outcome", "future")},
	}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualReceiverPerfprofEmittedSamples(t, tt, []metricdata.DataPoint[int64]{
		{Value: 1, Attributes: attrSet("join", "span", "source", "thread")},
		{Value: 1, Attributes: attrSet("join", "no_span")},
	}, metricdatatest.IgnoreTimestamp())

	// Shutdown's final report emits the waiting sample.
	sc.stop(t)
	require.Len(t, joinedSamples(t, sink, 100), 3)
}

// The exact counts of the bound (200 accepted, 150 taken early, 50 dropped)
// are the engine's (internal/profiler); here the receiver's loop reports
// early on its own, and every sample is accounted for in its telemetry.
func TestBufferBoundEmitsEarlyThenDrops(t *testing.T) {
	tt := componenttest.NewTelemetry()
	defer func() { require.NoError(t, tt.Shutdown(context.Background())) }()
	sc := startScripted(t, tt, 10*time.Second, 100)
	now := clock.Monotonic()
	for i := 0; i < 250; i++ {
		sc.sample(7, now-uint64(i)*uint64(time.Millisecond))
	}
	require.Eventually(t, func() bool { return len(joinedSamples(t, sc.sink, 100)) > 0 }, 5*time.Second, 10*time.Millisecond,
		"reaching the bound did not make the loop report early")
	sc.stop(t)
	emitted := len(joinedSamples(t, sc.sink, 100))
	early, dropped := sumMetric(t, tt, "otelcol_receiver_perfprof_emitted_samples", "join", "early"),
		sumMetric(t, tt, "otelcol_receiver_perfprof_dropped_samples", "reason", "buffer_full")
	require.Positive(t, early, "samples taken early are counted")
	require.Equal(t, int64(250), int64(emitted)+dropped, "emitted %d + dropped %d", emitted, dropped)
	require.Equal(t, int64(250)-dropped, sumMetric(t, tt, "otelcol_receiver_perfprof_samples", "", ""))
}

// sumMetric adds up the data points of a counter whose attribute key has
// value (all points with key "").
func sumMetric(t *testing.T, tt *componenttest.Telemetry, name, key, value string) int64 {
	t.Helper()
	m, err := tt.GetMetric(name)
	if err != nil {
		return 0
	}
	var n int64
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		if v, ok := dp.Attributes.Value(attribute.Key(key)); key == "" || ok && v.AsString() == value {
			n += dp.Value
		}
	}
	return n
}

// A process whose spans name it (process.pid in their resource) gets that
// resource on its profiles even when no sample of a report fell in a span.
func TestResourceFromSpansProcessPid(t *testing.T) {
	tt := componenttest.NewTelemetry()
	defer func() { require.NoError(t, tt.Shutdown(context.Background())) }()
	sc := startScripted(t, tt, time.Second, 1000)
	r, sink := sc.r, sc.sink
	now := clock.Monotonic()
	s := uint64(time.Second)
	td := spanAt(7, "GET /a", 1, now-30*s, now-29*s)
	td.ResourceSpans().At(0).Resource().Attributes().PutInt("process.pid", 100)
	r.indexSpans(td)
	sc.sample(8, now-10*s) // another thread, no span
	r.report(context.Background())
	require.Len(t, sink.AllProfiles(), 1)
	attrs := sink.AllProfiles()[0].ResourceProfiles().At(0).Resource().Attributes()
	svc, ok := attrs.Get("service.name")
	require.True(t, ok, "resource %v", attrs.AsRaw())
	require.Equal(t, "app", svc.Str())
	pid, _ := attrs.Get("process.pid")
	require.Equal(t, int64(100), pid.Int(), "the kernel's pid wins over the span resource's")
}
