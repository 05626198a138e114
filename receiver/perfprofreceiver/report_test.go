package perfprofreceiver

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/receiver/perfprofreceiver/internal/metadatatest"
)

// joinReceiver is a receiver without perf session or servers, fed by hand:
// the join and emission logic on their own, with real clocks.
func joinReceiver(t *testing.T, tt *componenttest.Telemetry, window time.Duration, maxBuffered int) (*perfprofReceiver, *consumertest.ProfilesSink) {
	cfg := createDefaultConfig()
	cfg.Correlation.Window = window
	cfg.Correlation.MaxBufferedSamples = maxBuffered
	r, err := newReceiver(cfg, metadatatest.NewSettings(tt), nil)
	require.NoError(t, err)
	t.Cleanup(r.telemetry.Shutdown)
	sink := new(consumertest.ProfilesSink)
	r.profiles = sink
	r.procs[100] = &procState{info: perf.Process{Pid: 100, Comm: "app"}, threads: map[uint32]string{}, addrs: map[uint64]*loc{}, batch: newBatch(), resource: -1}
	r.session = &perf.Session{} // Stats only
	return r, sink
}

func sample(r *perfprofReceiver, tid uint32, mono uint64) {
	rec := perf.Record{Type: perf.RecordSample}
	rec.Sample = perf.Sample{Pid: 100, Tid: tid, Time: mono, Callchain: []uint64{perf.ContextUser, 0x401000, 0x402000}}
	r.handle(&rec)
}

func spanAt(r *perfprofReceiver, tid int64, name string, id byte, startMono, endMono uint64) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "app")
	sp := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	sp.SetName(name)
	sp.SetTraceID(pcommon.TraceID{id})
	sp.SetSpanID(pcommon.SpanID{id})
	sp.SetStartTimestamp(pcommon.Timestamp(r.clock.Unix(startMono)))
	sp.SetEndTimestamp(pcommon.Timestamp(r.clock.Unix(endMono)))
	sp.Attributes().PutInt("thread.id", tid)
	sp.Attributes().PutInt("worker.id", 3)
	return td
}

func TestReportWaitsForTheWindowAndCounts(t *testing.T) {
	tt := componenttest.NewTelemetry()
	defer func() { require.NoError(t, tt.Shutdown(context.Background())) }()
	r, sink := joinReceiver(t, tt, 5*time.Second, 1000)
	now := clock.Monotonic()
	s := uint64(time.Second)
	r.indexSpans(spanAt(r, 7, "GET /a", 1, now-30*s, now-20*s))
	sample(r, 7, now-25*s) // in the span
	sample(r, 7, now-15*s) // on its thread, after it: no span
	sample(r, 8, now-s)    // younger than the window: waits
	r.report(context.Background(), false)

	require.Len(t, sink.AllProfiles(), 1)
	got := joinedSamples(t, sink, 100)
	require.Len(t, got, 2)
	require.Equal(t, linkKey(pcommon.TraceID{1}, pcommon.SpanID{1}), got[0].link)
	require.Equal(t, "GET /a", got[0].root)
	require.Equal(t, int64(3), got[0].worker, "worker id from the span")
	require.Equal(t, [24]byte{}, got[1].link)
	require.Equal(t, int64(3), got[1].worker, "worker id of the thread, without a span")
	require.Equal(t, 1, r.buffered)

	// A span that ends before the watermark comes too late to be joined.
	r.indexSpans(spanAt(r, 7, "GET /late", 2, now-40*s, now-35*s))
	metadatatest.AssertEqualReceiverPerfprofSpans(t, tt, []metricdata.DataPoint[int64]{
		{Value: 1, Attributes: attrSet("outcome", "indexed")},
		{Value: 1, Attributes: attrSet("outcome", "late")},
	}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualReceiverPerfprofEmittedSamples(t, tt, []metricdata.DataPoint[int64]{
		{Value: 1, Attributes: attrSet("join", "span")},
		{Value: 1, Attributes: attrSet("join", "no_span")},
	}, metricdatatest.IgnoreTimestamp())

	// Shutdown's final report emits the waiting sample.
	r.report(context.Background(), true)
	require.Len(t, joinedSamples(t, sink, 100), 3)
	require.Zero(t, r.buffered)
}

func TestBufferBoundEmitsEarlyThenDrops(t *testing.T) {
	tt := componenttest.NewTelemetry()
	defer func() { require.NoError(t, tt.Shutdown(context.Background())) }()
	r, sink := joinReceiver(t, tt, 10*time.Second, 100)
	now := clock.Monotonic()
	for i := 0; i < 250; i++ {
		sample(r, 7, now-uint64(i)*uint64(time.Millisecond))
	}
	select {
	case <-r.flush:
	default:
		t.Fatal("reaching the bound did not ask for an early report")
	}
	require.Equal(t, 200, r.buffered, "accepted up to twice the bound")
	r.report(context.Background(), false)
	require.Equal(t, 50, r.buffered, "half the bound stays to wait for its spans")
	require.Len(t, joinedSamples(t, sink, 100), 150)
	r.countLosses()
	metadatatest.AssertEqualReceiverPerfprofEmittedSamples(t, tt, []metricdata.DataPoint[int64]{
		{Value: 150, Attributes: attrSet("join", "early")},
	}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualReceiverPerfprofDroppedSamples(t, tt, []metricdata.DataPoint[int64]{
		{Value: 50, Attributes: attrSet("reason", "buffer_full")},
	}, metricdatatest.IgnoreTimestamp())
}

// A process whose spans name it (process.pid in their resource) gets that
// resource on its profiles even when no sample of a report fell in a span.
func TestResourceFromSpansProcessPid(t *testing.T) {
	tt := componenttest.NewTelemetry()
	defer func() { require.NoError(t, tt.Shutdown(context.Background())) }()
	r, sink := joinReceiver(t, tt, time.Second, 1000)
	now := clock.Monotonic()
	s := uint64(time.Second)
	td := spanAt(r, 7, "GET /a", 1, now-30*s, now-29*s)
	td.ResourceSpans().At(0).Resource().Attributes().PutInt("process.pid", 100)
	r.indexSpans(td)
	sample(r, 8, now-10*s) // another thread, no span
	r.report(context.Background(), false)
	require.Len(t, sink.AllProfiles(), 1)
	attrs := sink.AllProfiles()[0].ResourceProfiles().At(0).Resource().Attributes()
	svc, ok := attrs.Get("service.name")
	require.True(t, ok, "resource %v", attrs.AsRaw())
	require.Equal(t, "app", svc.Str())
	pid, _ := attrs.Get("process.pid")
	require.Equal(t, int64(100), pid.Int(), "the kernel's pid wins over the span resource's")
}
