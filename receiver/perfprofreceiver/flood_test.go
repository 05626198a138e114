package perfprofreceiver

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/perfprof/perfprof/receiver/perfprofreceiver/internal/spanconv"
)

// spanCounter is a traces pipeline that keeps only the number of spans
// (and the longest span name) it was given, so that a flood's memory is
// the receiver's own.
type spanCounter struct {
	spans, longestName atomic.Int64
}

func (c *spanCounter) consumer(t *testing.T) consumer.Traces {
	next, err := consumer.NewTraces(func(_ context.Context, td ptrace.Traces) error {
		c.spans.Add(int64(td.SpanCount()))
		for i := 0; i < td.ResourceSpans().Len(); i++ {
			for j := 0; j < td.ResourceSpans().At(i).ScopeSpans().Len(); j++ {
				ss := td.ResourceSpans().At(i).ScopeSpans().At(j).Spans()
				for k := 0; k < ss.Len(); k++ {
					if n := int64(len(ss.At(k).Name())); n > c.longestName.Load() {
						c.longestName.Store(n)
					}
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	return next
}

// sumWhere is sumMetric for points whose attributes hold all of kv (key,
// value pairs; all points with none).
func sumWhere(t *testing.T, tt *componenttest.Telemetry, name string, kv ...string) int64 {
	t.Helper()
	m, err := tt.GetMetric(name)
	if err != nil {
		return 0
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is %T", name, m.Data)
	var n int64
points:
	for _, dp := range sum.DataPoints {
		for i := 0; i+1 < len(kv); i += 2 {
			if v, ok := dp.Attributes.Value(attribute.Key(kv[i])); !ok || v.AsString() != kv[i+1] {
				continue points
			}
		}
		n += dp.Value
	}
	return n
}

// heapInUse is the live heap after a full collection.
func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// sdkFlood sends n spans with thread ids through the OTel Go SDK's batch
// processor and OTLP/gRPC exporter as fast as they are made, and waits
// until every batch is exported.
func sdkFlood(t *testing.T, endpoint string, n int) {
	t.Helper()
	ctx := context.Background()
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithInsecure(), otlptracegrpc.WithEndpoint(endpoint))
	require.NoError(t, err)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		// Blocking: the SDK must not drop spans of its own, or the counts
		// below would measure the client.
		sdktrace.WithBatcher(exp, sdktrace.WithBlocking(), sdktrace.WithMaxExportBatchSize(2048), sdktrace.WithMaxQueueSize(8192)),
	)
	tr := tp.Tracer("flood")
	for i := 0; i < n; i++ {
		_, sp := tr.Start(ctx, "flood", trace.WithAttributes(attribute.Int("thread.id", 1000+i%16)))
		sp.End()
	}
	require.NoError(t, tp.Shutdown(ctx), "every batch exported")
}

// TestFloodBeyondMaxSpans sends 20× correlation.max_spans spans, twice,
// from the real SDK: the join index stays at max_spans, the rest is
// counted over_limit, every span is passed on, and the second flood (the
// index already full) does not grow the heap.
func TestFloodBeyondMaxSpans(t *testing.T) {
	const maxSpans, perFlood = 2000, 20 * 2000
	tt := componenttest.NewTelemetry()
	defer func() { require.NoError(t, tt.Shutdown(context.Background())) }()
	var next spanCounter
	cfg := createDefaultConfig()
	cfg.Correlation.MaxSpans = maxSpans
	r := ingestReceiverConfig(t, cfg, next.consumer(t), tt)

	base := heapInUse()
	start := time.Now()
	sdkFlood(t, r.server.GRPCAddr, perFlood)
	first := heapInUse()
	sdkFlood(t, r.server.GRPCAddr, perFlood)
	second := heapInUse()
	t.Logf("%d spans in %v; heap %+d KiB after the first flood, %+d KiB after the second",
		2*perFlood, time.Since(start).Round(time.Millisecond), (first-base)>>10, (second-first)>>10)

	sent := int64(2 * perFlood)
	require.Equal(t, maxSpans, r.prof.Stats().SpansHeld, "the index holds max_spans, no more")
	assert.Equal(t, sent, next.spans.Load(), "every span passed on")
	assert.Equal(t, sent, sumWhere(t, tt, "otelcol_receiver_accepted_spans"))
	assert.Zero(t, sumWhere(t, tt, "otelcol_receiver_refused_spans"))
	indexed := sumWhere(t, tt, "otelcol_receiver_perfprof_spans", "outcome", "indexed")
	overLimit := sumWhere(t, tt, "otelcol_receiver_perfprof_spans", "outcome", "over_limit")
	assert.Equal(t, int64(maxSpans), indexed)
	assert.Equal(t, sent-maxSpans, overLimit)
	assert.Equal(t, sent, sumWhere(t, tt, "otelcol_receiver_perfprof_spans"), "every span has one outcome")
	// 40 000 more spans held would be several MiB (a profiler.Span is
	// over 100 bytes before its name); the full index must not grow.
	assert.Less(t, second-first, int64(1<<20), "heap growth of the second flood")
	assert.Less(t, first-base, int64(16<<20), "heap growth of the first flood")
}

// otlpReference starts the collector's own otlp receiver on free loopback
// ports, the reference for status codes and messages.
func otlpReference(t *testing.T, next consumer.Traces, maxBody int64, maxRecvMiB int) (grpcAddr, httpAddr string) {
	t.Helper()
	f := otlpreceiver.NewFactory()
	cfg := f.CreateDefaultConfig().(*otlpreceiver.Config)
	grpcAddr, httpAddr = freeAddr(t), freeAddr(t)
	g := cfg.Protocols.GRPC.GetOrInsertDefault()
	g.NetAddr.Endpoint, g.MaxRecvMsgSizeMiB = grpcAddr, maxRecvMiB
	h := cfg.Protocols.HTTP.GetOrInsertDefault()
	h.ServerConfig.NetAddr.Endpoint, h.ServerConfig.MaxRequestBodySize = httpAddr, maxBody
	rcv, err := f.CreateTraces(context.Background(), receivertest.NewNopSettings(f.Type()), cfg, next)
	require.NoError(t, err)
	require.NoError(t, rcv.Start(context.Background(), componenttest.NewNopHost()))
	t.Cleanup(func() { require.NoError(t, rcv.Shutdown(context.Background())) })
	return grpcAddr, httpAddr
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// answer is what a server said to one request, reduced to what the
// comparison needs: the HTTP status and content type, and the Status of an
// error (its code and message), or the raw body when it is not one.
type answer struct {
	httpCode    int
	contentType string
	rpcCode     int32
	message     string
	raw         string
}

// rawHTTP writes req to addr on a fresh connection, half-closes it when
// closeWrite, and reads the answer.
func rawHTTP(t *testing.T, addr string, req []byte, closeWrite bool) answer {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	// Written while the answer is read: a server refusing a large body
	// answers and closes before it is all written.
	go func() {
		if _, err := conn.Write(req); err == nil && closeWrite {
			_ = conn.(*net.TCPConn).CloseWrite()
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	a := answer{httpCode: resp.StatusCode, contentType: resp.Header.Get("Content-Type")}
	var st spb.Status
	switch a.contentType {
	case "application/x-protobuf":
		require.NoError(t, proto.Unmarshal(body, &st))
	case "application/json":
		require.NoError(t, protojson.Unmarshal(body, &st))
	default:
		a.raw = string(body)
		return a
	}
	a.rpcCode, a.message = st.Code, st.Message
	return a
}

func httpRequest(contentType, encoding string, body []byte, contentLength int) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST /v1/traces HTTP/1.1\r\nHost: test\r\nContent-Length: %d\r\n", contentLength)
	if contentType != "" {
		fmt.Fprintf(&b, "Content-Type: %s\r\n", contentType)
	}
	if encoding != "" {
		fmt.Fprintf(&b, "Content-Encoding: %s\r\n", encoding)
	}
	b.WriteString("\r\n")
	b.Write(body)
	return b.Bytes()
}

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	_, err := w.Write(b)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	return buf.Bytes()
}

// rawCodec sends bytes as they are, to put garbage inside well-formed gRPC
// frames.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)   { return v.([]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error { *(v.(*[]byte)) = b; return nil }
func (rawCodec) Name() string                    { return "proto" }

var _ encoding.Codec = rawCodec{}

// TestGarbageAsOTLPReceiver sends the same bad input to the receiver and to
// the collector's otlp receiver: the answers match (the receiver's message
// may add context around the reference's), each refusal is counted by
// reason, the servers stay up and nothing accepted is lost.
func TestGarbageAsOTLPReceiver(t *testing.T) {
	const maxBody = 1 << 20
	tt := componenttest.NewTelemetry()
	defer func() { require.NoError(t, tt.Shutdown(context.Background())) }()
	var ours, theirs spanCounter
	cfg := createDefaultConfig()
	cfg.Protocols.HTTP.GetOrInsertDefault().ServerConfig.MaxRequestBodySize = maxBody
	cfg.Protocols.GRPC.GetOrInsertDefault().MaxRecvMsgSizeMiB = 1
	r := ingestReceiverConfig(t, cfg, ours.consumer(t), tt)
	refGRPC, refHTTP := otlpReference(t, theirs.consumer(t), maxBody, 1)

	rng := rand.New(rand.NewPCG(16, 1))
	garbage := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	valid, err := ptraceotlp.NewExportRequestFromTraces(testTraces()).MarshalProto()
	require.NoError(t, err)
	tooLarge := ptrace.NewTraces()
	tooLarge.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty().SetName(strings.Repeat("x", maxBody+1))
	tooLargePB, err := ptraceotlp.NewExportRequestFromTraces(tooLarge).MarshalProto()
	require.NoError(t, err)
	gz := gzipped(t, valid)

	rejected := map[string]int64{}
	for _, tc := range []struct {
		name       string
		req        []byte
		closeWrite bool
		reason     string // counted as, "" when Go's HTTP server refuses it before the receiver
	}{
		{"random protobuf", httpRequest("application/x-protobuf", "", garbage(512), 512), false, "decode"},
		{"random JSON", httpRequest("application/json", "", garbage(512), 512), false, "decode"},
		{"JSON of the wrong shape", httpRequest("application/json", "", []byte(`{"resourceSpans": 5}`), 20), false, "decode"},
		{"truncated protobuf", httpRequest("application/x-protobuf", "", valid[:len(valid)/2], len(valid)/2), false, "decode"},
		{"broken gzip header", httpRequest("application/x-protobuf", "gzip", garbage(64), 64), false, "encoding"},
		{"gzip stream cut short", httpRequest("application/x-protobuf", "gzip", gz[:len(gz)/2], len(gz)/2), false, "read"},
		{"gzip stream cut short, JSON", httpRequest("application/json", "gzip", gz[:len(gz)/2], len(gz)/2), false, "read"},
		{"unsupported encoding", httpRequest("application/x-protobuf", "br", valid, len(valid)), false, "encoding"},
		{"wrong content type", httpRequest("text/plain", "", valid, len(valid)), false, "content_type"},
		{"no content type", httpRequest("", "", valid, len(valid)), false, "content_type"},
		{"over max_request_body_size", httpRequest("application/x-protobuf", "", tooLargePB, len(tooLargePB)), false, "too_large"},
		{"Content-Length past the body", httpRequest("application/x-protobuf", "", valid, len(valid)+100), true, "read"},
		{"GET", []byte("GET /v1/traces HTTP/1.1\r\nHost: test\r\n\r\n"), false, "method"},
		{"not HTTP", append(garbage(200), "\r\n\r\n"...), false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := rawHTTP(t, refHTTP, tc.req, tc.closeWrite)
			got := rawHTTP(t, r.server.HTTPAddr, tc.req, tc.closeWrite)
			t.Logf("otlp receiver: %d %q %d %q; ours: %q", want.httpCode, want.contentType, want.rpcCode, want.message, got.message)
			// The otlp receiver cannot quote the invalid UTF-8 of random JSON
			// in its Status and answers 500 "failed to marshal error
			// message"; the receiver makes the quote valid and answers 400,
			// the OTLP specification's code for a request it cannot decode.
			if tc.name == "random JSON" {
				assert.Equal(t, answer{http.StatusInternalServerError, "application/json", 13, "failed to marshal error message", ""}, want)
				want = answer{http.StatusBadRequest, "application/json", 3, "ReadObject", ""}
			}
			assert.Equal(t, want.httpCode, got.httpCode)
			assert.Equal(t, want.contentType, got.contentType)
			assert.Equal(t, want.rpcCode, got.rpcCode)
			assert.Contains(t, got.message, want.message)
			assert.Equal(t, want.raw, got.raw)
			assert.NotEqual(t, http.StatusOK, got.httpCode)
			if tc.reason != "" {
				rejected["http/"+tc.reason]++
			}
		})
	}

	// A body cut by the client closing its connection has no answer to
	// compare; it is counted all the same.
	conn, err := net.Dial("tcp", r.server.HTTPAddr)
	require.NoError(t, err)
	_, err = conn.Write(httpRequest("application/x-protobuf", "", valid[:10], len(valid)))
	require.NoError(t, err)
	require.NoError(t, conn.Close())
	rejected["http/read"]++

	// gRPC: bytes that are not HTTP/2, garbage in a gRPC frame, a message
	// over max_recv_msg_size_mib, an unknown method.
	for _, in := range [][]byte{garbage(300), []byte("POST /v1/traces HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\n\r\n")} {
		want, got := rawConn(t, refGRPC, in), rawConn(t, r.server.GRPCAddr, in)
		assert.Equal(t, want, got, "answer to %q", in[:16])
	}
	for _, tc := range []struct {
		name, method string
		msg          []byte
		reason       string
	}{
		{"random message", "/opentelemetry.proto.collector.trace.v1.TraceService/Export", garbage(512), "decode"},
		{"truncated message", "/opentelemetry.proto.collector.trace.v1.TraceService/Export", valid[:len(valid)/2], "decode"},
		{"over max_recv_msg_size_mib", "/opentelemetry.proto.collector.trace.v1.TraceService/Export", tooLargePB, "too_large"},
		{"unknown method", "/opentelemetry.proto.collector.trace.v1.TraceService/Nope", valid, ""},
	} {
		t.Run("grpc "+tc.name, func(t *testing.T) {
			want, got := invokeRaw(t, refGRPC, tc.method, tc.msg), invokeRaw(t, r.server.GRPCAddr, tc.method, tc.msg)
			t.Logf("otlp receiver: %v; ours: %v", want, got)
			require.Error(t, got)
			assert.Equal(t, status.Code(want), status.Code(got))
			assert.Equal(t, status.Convert(want).Message(), status.Convert(got).Message())
			if tc.reason != "" {
				rejected["grpc/"+tc.reason]++
			}
		})
	}

	// Both still serve, and took every valid request.
	for _, addr := range []string{refHTTP, r.server.HTTPAddr} {
		a := rawHTTP(t, addr, httpRequest("application/x-protobuf", "", valid, len(valid)), false)
		assert.Equal(t, http.StatusOK, a.httpCode)
		a = rawHTTP(t, addr, httpRequest("application/x-protobuf", "gzip", gz, len(gz)), false)
		assert.Equal(t, http.StatusOK, a.httpCode)
	}
	for _, addr := range []string{refGRPC, r.server.GRPCAddr} {
		require.NoError(t, invokeRaw(t, addr, "/opentelemetry.proto.collector.trace.v1.TraceService/Export", valid))
	}
	assert.Equal(t, int64(9), ours.spans.Load(), "three valid requests of three spans")
	assert.Equal(t, theirs.spans.Load(), ours.spans.Load())
	assert.Equal(t, int64(9), sumWhere(t, tt, "otelcol_receiver_accepted_spans"))
	assert.Equal(t, 2, r.prof.Stats().SpansHeld)

	// The cut connection is read by the server in its own time.
	require.Eventually(t, func() bool {
		return sumWhere(t, tt, "otelcol_receiver_perfprof_rejected_requests", "transport", "http", "reason", "read") == rejected["http/read"]
	}, 10*time.Second, 10*time.Millisecond)
	var total int64
	for k, n := range rejected {
		transport, reason, _ := strings.Cut(k, "/")
		assert.Equal(t, n, sumWhere(t, tt, "otelcol_receiver_perfprof_rejected_requests", "transport", transport, "reason", reason), k)
		total += n
	}
	assert.Equal(t, total, sumWhere(t, tt, "otelcol_receiver_perfprof_rejected_requests"), "nothing else counted")
}

// rawConn writes b to addr and reads what comes back until the server
// closes the connection.
func rawConn(t *testing.T, addr string, b []byte) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	_, _ = conn.Write(b)
	got, _ := io.ReadAll(conn)
	return string(got)
}

// invokeRaw calls method with msg as the request's bytes.
func invokeRaw(t *testing.T, addr, method string, msg []byte) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}), grpc.MaxCallSendMsgSize(64<<20)))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []byte
	return conn.Invoke(ctx, method, msg, &out)
}

// TestHugeValues sends values of megabytes: what fits the size limits is
// accepted and passed on whole, as by the otlp receiver, while the join
// holds each span name cut to 1 KiB and forgets outsize resources, counted;
// what does not fit gets the otlp receiver's answer.
func TestHugeValues(t *testing.T) {
	tt := componenttest.NewTelemetry()
	defer func() { require.NoError(t, tt.Shutdown(context.Background())) }()
	var ours, theirs spanCounter
	r := ingestReceiverConfig(t, createDefaultConfig(), ours.consumer(t), tt)
	refGRPC, refHTTP := otlpReference(t, theirs.consumer(t), 0, 0) // both at the defaults: 20 MiB, 4 MiB

	const huge = 4 << 20
	big := strings.Repeat("v", huge)
	t0 := time.Now()
	build := func(i int) ptrace.Traces {
		td := ptrace.NewTraces()
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", "huge")
		rs.Resource().Attributes().PutStr("blob", big[:1<<20]) // over the 64 KiB a resource may take
		sp := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
		sp.SetTraceID(pcommon.TraceID{byte(i), 1})
		sp.SetSpanID(pcommon.SpanID{byte(i), 1})
		sp.SetStartTimestamp(pcommon.NewTimestampFromTime(t0))
		sp.SetEndTimestamp(pcommon.NewTimestampFromTime(t0.Add(time.Millisecond)))
		sp.SetName(big[:2<<20] + fmt.Sprint(i))
		attrs := sp.Attributes()
		attrs.PutInt("thread.id", int64(100+i))
		attrs.PutStr("payload", big)
		for j := 0; j < 1000; j++ {
			attrs.PutInt(fmt.Sprintf("a%d", j), int64(j))
		}
		m := attrs.PutEmptyMap("deep")
		for d := 0; d < 64; d++ {
			m = m.PutEmptyMap("d")
		}
		m.PutStr("bottom", "here")
		return td
	}

	const requests = 8
	base := heapInUse()
	for i := 0; i < requests; i++ {
		pb, err := ptraceotlp.NewExportRequestFromTraces(build(i)).MarshalProto()
		require.NoError(t, err)
		req := httpRequest("application/x-protobuf", "", pb, len(pb))
		want, got := rawHTTP(t, refHTTP, req, false), rawHTTP(t, r.server.HTTPAddr, req, false)
		require.Equal(t, http.StatusOK, want.httpCode, want.message)
		require.Equal(t, want, got)
	}
	grown := heapInUse() - base
	t.Logf("%d requests of %d MiB: heap %+d KiB", requests, (huge+3<<20)>>20, grown>>10)

	// gRPC's 4 MiB limit refuses the same request, on both.
	wantErr := invokeRaw(t, refGRPC, "/opentelemetry.proto.collector.trace.v1.TraceService/Export", mustProto(t, build(requests)))
	gotErr := invokeRaw(t, r.server.GRPCAddr, "/opentelemetry.proto.collector.trace.v1.TraceService/Export", mustProto(t, build(requests)))
	require.Error(t, gotErr)
	assert.Equal(t, status.Code(wantErr), status.Code(gotErr))
	assert.Equal(t, status.Convert(wantErr).Message(), status.Convert(gotErr).Message())
	// And a body over 20 MiB over HTTP.
	over := build(requests)
	over.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).Attributes().PutStr("more", strings.Repeat("w", 20<<20))
	pb := mustProto(t, over)
	want := rawHTTP(t, refHTTP, httpRequest("application/x-protobuf", "", pb, len(pb)), false)
	got := rawHTTP(t, r.server.HTTPAddr, httpRequest("application/x-protobuf", "", pb, len(pb)), false)
	assert.Equal(t, http.StatusBadRequest, got.httpCode)
	assert.Equal(t, want.httpCode, got.httpCode)
	assert.Contains(t, got.message, want.message)

	assert.Equal(t, int64(requests), ours.spans.Load(), "every accepted span passed on")
	assert.Equal(t, theirs.spans.Load(), ours.spans.Load())
	assert.Equal(t, int64(2<<20+1), ours.longestName.Load(), "passed on whole")
	assert.Equal(t, requests, r.prof.Stats().SpansHeld)
	assert.Equal(t, int64(requests), sumWhere(t, tt, "otelcol_receiver_perfprof_span_values_bounded", "kind", "span_name"))
	assert.Equal(t, int64(requests), sumWhere(t, tt, "otelcol_receiver_perfprof_span_values_bounded", "kind", "resource"))
	assert.Equal(t, int64(1), sumWhere(t, tt, "otelcol_receiver_perfprof_rejected_requests", "transport", "grpc", "reason", "too_large"))
	assert.Equal(t, int64(1), sumWhere(t, tt, "otelcol_receiver_perfprof_rejected_requests", "transport", "http", "reason", "too_large"))
	assert.Zero(t, r.spanConv.Resources(), "no outsize resource remembered")
	l, ok := linkAt(t, r, 100, uint64(t0.UnixNano())+1000)
	require.True(t, ok, "the span is joined")
	assert.Equal(t, big[:spanconv.MaxSpanName], l.Root, "held cut")
	// Held whole, the names alone would be 16 MiB.
	assert.Less(t, grown, int64(4<<20), "heap held after %d requests", requests)
}

func mustProto(t *testing.T, td ptrace.Traces) []byte {
	t.Helper()
	b, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	require.NoError(t, err)
	return b
}
