package perfprofreceiver

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/internal/profiler/profilertest"
	"github.com/perfprof/perfprof/pkg/otlpserver"
	"github.com/perfprof/perfprof/receiver/perfprofreceiver/internal/metadata"
	"github.com/perfprof/perfprof/receiver/perfprofreceiver/internal/metadatatest"
)

// ingestReceiver starts only the OTLP servers of a receiver (no perf
// session), on free loopback ports.
func ingestReceiver(t *testing.T, next consumer.Traces, tt *componenttest.Telemetry) *perfprofReceiver {
	t.Helper()
	return ingestReceiverConfig(t, createDefaultConfig(), next, tt)
}

// ingestReceiverConfig is ingestReceiver with a configuration of its own
// (its endpoints are replaced; correlation.max_spans is the engine's).
func ingestReceiverConfig(t *testing.T, cfg *Config, next consumer.Traces, tt *componenttest.Telemetry) *perfprofReceiver {
	t.Helper()
	cfg.Protocols.GRPC.GetOrInsertDefault().NetAddr.Endpoint = "127.0.0.1:0"
	cfg.Protocols.HTTP.GetOrInsertDefault().ServerConfig.NetAddr.Endpoint = "127.0.0.1:0"
	set := receivertest.NewNopSettings(metadata.Type)
	if tt != nil {
		set = metadatatest.NewSettings(tt)
	}
	r, err := newReceiver(cfg, set)
	require.NoError(t, err)
	r.traces = next
	src := profilertest.NewRecords()
	r.prof = openScripted(t, profiler.Options{MaxSpans: cfg.Correlation.MaxSpans, Pids: []int{ingestApp.Pid}, Records: src,
		Procs: profilertest.NewProcs(ingestApp)})
	ingestRecords.Store(r, src)
	t.Cleanup(func() { ingestRecords.Delete(r) })
	require.NoError(t, r.startServers(context.Background(), nil))
	t.Cleanup(func() { r.stopServers(context.Background()); r.telemetry.Shutdown() })
	return r
}

// ingestApp is the process the ingest tests' spans name (process.pid 4242),
// which their engine samples from scripted records (ingestRecords).
var ingestApp = perf.Process{Pid: 4242, StartTime: 1, Comm: "checkout"}

// ingestRecords holds the scripted records of each ingest receiver's
// engine.
var ingestRecords sync.Map // *perfprofReceiver → *profilertest.Records

// linkAt returns what the engine of r links a sample of ingestApp's thread
// tid at Unix time t to, and whether a span covers it: the sample goes
// through the engine's records and a final report, as samples do.
func linkAt(t *testing.T, r *perfprofReceiver, tid uint32, unix uint64) (profiler.Link, bool) {
	t.Helper()
	v, ok := ingestRecords.Load(r)
	require.True(t, ok, "not an ingest receiver")
	src := v.(*profilertest.Records)
	src.Push(profilertest.Sample(ingestApp.Pid, int(tid), clock.NewMapper().Mono(unix), 0x401000))
	src.Sync()
	for _, sn := range r.prof.Take(true) {
		for _, s := range sn.Samples {
			if s.Tid == tid {
				return s.Link, s.Link.Linked
			}
		}
	}
	t.Fatalf("the sample of thread %d was not reported", tid)
	return profiler.Link{}, false
}

// testTraces builds spans as an instrumented runtime sends them: two with
// thread ids (a parent and its child), one without.
func testTraces() ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "checkout")
	rs.Resource().Attributes().PutInt("process.pid", 4242)
	spans := rs.ScopeSpans().AppendEmpty().Spans()
	now := time.Now()
	parent := spans.AppendEmpty()
	parent.SetName("GET /cart")
	parent.SetTraceID(pcommon.TraceID{1, 2, 3})
	parent.SetSpanID(pcommon.SpanID{1})
	parent.SetStartTimestamp(pcommon.NewTimestampFromTime(now))
	parent.SetEndTimestamp(pcommon.NewTimestampFromTime(now.Add(10 * time.Millisecond)))
	parent.Attributes().PutInt("thread.id", 4243)
	parent.Attributes().PutInt("worker.id", 1)
	child := spans.AppendEmpty()
	child.SetName("price")
	child.SetTraceID(pcommon.TraceID{1, 2, 3})
	child.SetSpanID(pcommon.SpanID{2})
	child.SetParentSpanID(pcommon.SpanID{1})
	child.SetStartTimestamp(pcommon.NewTimestampFromTime(now.Add(time.Millisecond)))
	child.SetEndTimestamp(pcommon.NewTimestampFromTime(now.Add(5 * time.Millisecond)))
	child.Attributes().PutStr("thread.id", "4243") // some SDKs send strings
	other := spans.AppendEmpty()
	other.SetName("no thread")
	other.SetTraceID(pcommon.TraceID{9})
	other.SetSpanID(pcommon.SpanID{9})
	return td
}

func post(t *testing.T, url, contentType string, body []byte) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(url, contentType, bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

func TestIngestHTTPProtoAndJSON(t *testing.T) {
	tt := componenttest.NewTelemetry()
	defer func() { require.NoError(t, tt.Shutdown(context.Background())) }()
	sink := new(consumertest.TracesSink)
	r := ingestReceiver(t, sink, tt)
	td := testTraces()
	req := ptraceotlp.NewExportRequestFromTraces(td)
	pb, err := req.MarshalProto()
	require.NoError(t, err)
	js, err := req.MarshalJSON()
	require.NoError(t, err)

	resp, body := post(t, "http://"+r.server.HTTPAddr+"/v1/traces", "application/x-protobuf", pb)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, "application/x-protobuf", resp.Header.Get("Content-Type"))
	resp, body = post(t, "http://"+r.server.HTTPAddr+"/v1/traces", "application/json", js)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))

	// Passed on untouched, both times.
	require.Len(t, sink.AllTraces(), 2)
	for _, got := range sink.AllTraces() {
		require.Equal(t, td, got)
	}
	// The same two spans twice: retries must not double the index.
	child := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(1)
	l, ok := linkAt(t, r, 4243, uint64(child.StartTimestamp())+1000)
	require.True(t, ok)
	require.Equal(t, [8]byte(child.SpanID()), l.SpanID, "the child is innermost")
	require.Equal(t, "GET /cart", l.Root)
	require.Equal(t, 2, r.prof.Stats().SpansHeld)
	require.Equal(t, int64(1), l.Worker)

	metadatatest.AssertEqualReceiverPerfprofSpans(t, tt, []metricdata.DataPoint[int64]{
		{Value: 4, Attributes: attrSet("outcome", "indexed")},
		{Value: 2, Attributes: attrSet("outcome", "no_thread_id")},
	}, metricdatatest.IgnoreTimestamp())
}

func TestIngestHTTPRejectsBadRequests(t *testing.T) {
	sink := new(consumertest.TracesSink)
	r := ingestReceiver(t, sink, nil)
	url := "http://" + r.server.HTTPAddr + "/v1/traces"

	resp, body := post(t, url, "application/x-protobuf", []byte{0x0a, 0xff, 0xff, 0xff})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	var st spb.Status
	require.NoError(t, proto.Unmarshal(body, &st))
	require.Equal(t, int32(codes.InvalidArgument), st.Code)
	require.Contains(t, st.Message, "decode OTLP traces request")

	resp, body = post(t, url, "application/json", []byte(`{"resourceSpans": [`))
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, string(body), "decode OTLP traces request")

	resp, _ = post(t, url, "text/plain", []byte("hello"))
	require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode)

	get, err := http.Get(url)
	require.NoError(t, err)
	get.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, get.StatusCode)

	require.Empty(t, sink.AllTraces(), "nothing passed on")
	require.Zero(t, r.prof.Stats().SpansHeld, "nothing indexed")
}

func TestIngestPipelineErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		httpCode int
		grpcCode codes.Code
	}{
		{"retryable", errors.New("queue full"), http.StatusServiceUnavailable, codes.Unavailable},
		{"permanent", consumererror.NewPermanent(errors.New("bad data")), http.StatusInternalServerError, codes.Internal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ingestReceiver(t, consumertest.NewErr(tc.err), nil)
			req := ptraceotlp.NewExportRequestFromTraces(testTraces())
			pb, err := req.MarshalProto()
			require.NoError(t, err)
			resp, _ := post(t, "http://"+r.server.HTTPAddr+"/v1/traces", "application/x-protobuf", pb)
			require.Equal(t, tc.httpCode, resp.StatusCode)
			// The otlp receiver answers the same error alike.
			refGRPC, refHTTP := otlpReference(t, consumertest.NewErr(tc.err), 0, 0)
			ref, _ := post(t, "http://"+refHTTP+"/v1/traces", "application/x-protobuf", pb)
			require.Equal(t, ref.StatusCode, resp.StatusCode)
			require.Equal(t, ref.Header.Get("Retry-After"), resp.Header.Get("Retry-After"))
			require.Equal(t, status.Code(invokeRaw(t, refGRPC, "/opentelemetry.proto.collector.trace.v1.TraceService/Export", pb)), tc.grpcCode)

			conn, err := grpc.NewClient(r.server.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			require.NoError(t, err)
			defer conn.Close()
			_, err = ptraceotlp.NewGRPCClient(conn).Export(context.Background(), req)
			require.Equal(t, tc.grpcCode, status.Code(err), "%v", err)
		})
	}
}

func TestIngestGRPC(t *testing.T) {
	sink := new(consumertest.TracesSink)
	r := ingestReceiver(t, sink, nil)
	conn, err := grpc.NewClient(r.server.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	td := testTraces()
	_, err = ptraceotlp.NewGRPCClient(conn).Export(context.Background(), ptraceotlp.NewExportRequestFromTraces(td))
	require.NoError(t, err)
	require.Len(t, sink.AllTraces(), 1)
	assert.Equal(t, td, sink.AllTraces()[0])
	require.Equal(t, 2, r.prof.Stats().SpansHeld)
}

// FuzzIngestHTTP feeds arbitrary bodies to the OTLP/HTTP handler, as
// protobuf and as JSON: it must answer 200 or 400, never panic, and keep
// the index consistent.
func FuzzIngestHTTP(f *testing.F) {
	req := ptraceotlp.NewExportRequestFromTraces(testTraces())
	pb, _ := req.MarshalProto()
	js, _ := req.MarshalJSON()
	f.Add(pb, false)
	f.Add(js, true)
	f.Add([]byte{}, false)
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"attributes":[{"key":"thread.id","value":{"intValue":"-1"}}]}]}]}]}`), true)
	r, err := newReceiver(createDefaultConfig(), receivertest.NewNopSettings(metadata.Type))
	if err != nil {
		f.Fatal(err)
	}
	r.traces = consumertest.NewNop()
	r.prof = openScripted(f, profiler.Options{})
	require.NoError(f, r.initObs())
	ts := otlpserver.HTTPHandler(r.consumeSpans)
	f.Fuzz(func(t *testing.T, body []byte, asJSON bool) {
		ct := "application/x-protobuf"
		if asJSON {
			ct = "application/json"
		}
		hr := httptest.NewRequest(http.MethodPost, "/v1/traces", bytes.NewReader(body))
		hr.Header.Set("Content-Type", ct)
		w := httptest.NewRecorder()
		ts.ServeHTTP(w, hr)
		if w.Code != http.StatusOK && w.Code != http.StatusBadRequest {
			t.Fatalf("status %d for %d bytes", w.Code, len(body))
		}
		if r.prof.Stats().SpansHeld > r.cfg.Correlation.MaxSpans {
			t.Fatalf("index over its bound")
		}
	})
}

// attrSet makes an attribute set of key, value pairs.
func attrSet(kv ...string) attribute.Set {
	attrs := make([]attribute.KeyValue, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		attrs = append(attrs, attribute.String(kv[i], kv[i+1]))
	}
	return attribute.NewSet(attrs...)
}
