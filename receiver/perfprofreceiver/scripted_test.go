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

	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/internal/profiler/profilertest"
	"github.com/perfprof/perfprof/receiver/perfprofreceiver/internal/metadatatest"
)

// openScripted opens an engine over a scripted source, with no process.
func openScripted(tb testing.TB, opts profiler.Options) *profiler.Profiler {
	tb.Helper()
	if opts.Records == nil {
		opts.Records = profilertest.NewRecords()
	}
	if opts.Procs == nil {
		opts.Procs = profilertest.NewProcs()
	}
	p, err := profiler.Open(opts)
	require.NoError(tb, err)
	tb.Cleanup(func() { _, _ = p.Close() })
	return p
}

// scripted is a receiver started for real, without OTLP servers, whose
// engine samples process 100 ("app") from a scripted source: the join,
// emission and telemetry of the receiver, fed by hand, with real clocks.
type scripted struct {
	r    *perfprofReceiver
	src  *profilertest.Records
	sink *consumertest.ProfilesSink
}

func startScripted(t *testing.T, tt *componenttest.Telemetry, window time.Duration, maxBuffered int) *scripted {
	cfg := createDefaultConfig()
	cfg.Targets.Pids = []int{100}
	// Span ingest on (the tests hand spans to indexSpans), or samples
	// would not wait for the window; on a port of the system's choosing.
	cfg.Protocols.GRPC.GetOrInsertDefault().NetAddr.Endpoint = "127.0.0.1:0"
	cfg.Correlation.Window = window
	cfg.Correlation.MaxBufferedSamples = maxBuffered
	r, err := newReceiver(cfg, metadatatest.NewSettings(tt))
	require.NoError(t, err)
	s := &scripted{r: r, src: profilertest.NewRecords(), sink: new(consumertest.ProfilesSink)}
	r.profiles = s.sink
	r.source = s.src
	r.procs = profilertest.NewProcs(perf.Process{Pid: 100, StartTime: 1, Comm: "app"})
	require.NoError(t, r.start(context.Background(), nil))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = r.shutdown(context.Background(), true)
		}
	})
	return s
}

// stop shuts the receiver down: its final report goes to the sink.
func (s *scripted) stop(t *testing.T) {
	require.NoError(t, s.r.shutdown(context.Background(), true))
}

// sample makes app's thread tid take an on-CPU sample at mono.
func (s *scripted) sample(tid uint32, mono uint64) {
	s.src.Push(profilertest.Sample(100, int(tid), mono, 0x401000, 0x402000))
	s.src.Sync()
}

// spanAt is a span of service "app" on thread tid, worker 3, between two
// CLOCK_MONOTONIC times.
func spanAt(tid int64, name string, id byte, startMono, endMono uint64) ptrace.Traces {
	m := clock.NewMapper()
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr(convention.ServiceName, "app")
	sp := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	sp.SetName(name)
	sp.SetTraceID(pcommon.TraceID{id})
	sp.SetSpanID(pcommon.SpanID{id})
	sp.SetStartTimestamp(pcommon.Timestamp(m.Unix(startMono)))
	sp.SetEndTimestamp(pcommon.Timestamp(m.Unix(endMono)))
	sp.Attributes().PutInt(convention.ThreadID, tid)
	sp.Attributes().PutInt(convention.WorkerID, 3)
	return td
}
