package perfprofreceiver

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/perfprof/perfprof/receiver/perfprofreceiver/internal/metadata"

	"github.com/perfprof/perfprof/internal/profiler"
)

// BenchmarkIngestSpans hands batches of 512 spans, as an SDK's batch span
// processor exports them (one resource with its process.pid, spans with
// thread.id on 8 threads), to the receiver's OTLP path: indexed for the
// join and passed on to a traces consumer. ns/span is what perfprof adds
// per span to a collector that only forwards spans.
func BenchmarkIngestSpans(b *testing.B) {
	const batch = 512
	cfg := createDefaultConfig()
	r, err := newReceiver(cfg, receivertest.NewNopSettings(metadata.Type))
	if err != nil {
		b.Fatal(err)
	}
	r.traces = consumertest.NewNop()
	if err := r.initObs(); err != nil {
		b.Fatal(err)
	}
	r.prof = openScripted(b, profiler.Options{MaxSpans: 1 << 22})
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "checkout")
	rs.Resource().Attributes().PutInt("process.pid", 4242)
	spans := rs.ScopeSpans().AppendEmpty().Spans()
	now := time.Now()
	for i := range batch {
		sp := spans.AppendEmpty()
		sp.SetName("GET /cart")
		sp.SetTraceID(pcommon.TraceID{byte(i), 2, 3})
		sp.SetParentSpanID(pcommon.SpanID{byte(i), 7})
		sp.SetStartTimestamp(pcommon.NewTimestampFromTime(now.Add(time.Duration(i) * time.Millisecond)))
		sp.SetEndTimestamp(pcommon.NewTimestampFromTime(now.Add(time.Duration(i+1) * time.Millisecond)))
		sp.Attributes().PutInt("thread.id", int64(4243+i%8))
		sp.Attributes().PutStr("http.route", "/cart")
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		for i := range batch {
			spans.At(i).SetSpanID(pcommon.SpanID{byte(i), byte(i >> 8), byte(n), byte(n >> 8), byte(n >> 16), 1})
		}
		if err := r.consumeSpans(ctx, td, "grpc"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/span")
}
