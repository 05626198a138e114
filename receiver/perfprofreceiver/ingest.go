package perfprofreceiver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"sort"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.opentelemetry.io/collector/receiver/receiverhelper"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/profiler"
)

// Span flags of the OTLP data model (SpanFlags in trace.proto).
const (
	flagHasIsRemote = 0x100
	flagIsRemote    = 0x200
)

// maxResources bounds the distinct span resources remembered for the
// profiles; spans of further resources are still joined, without resource.
const maxResources = 4096

// tracesServer serves OTLP trace exports (gRPC and HTTP) for the receiver.
type tracesServer struct {
	ptraceotlp.UnimplementedGRPCServer
	r         *perfprofReceiver
	transport string
	obs       *receiverhelper.ObsReport
}

// Export indexes the spans for the join, then passes them on to the traces
// pipeline, if the component is in one. Status codes follow the standard
// otlp receiver: a retryable pipeline error is Unavailable (HTTP 503), a
// permanent one Internal (HTTP 500).
func (s *tracesServer) Export(ctx context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	td := req.Traces()
	n := td.SpanCount()
	if n == 0 {
		return ptraceotlp.NewExportResponse(), nil
	}
	s.r.indexSpans(td)
	next := s.r.traces
	if next == nil {
		return ptraceotlp.NewExportResponse(), nil
	}
	ctx = s.obs.StartTracesOp(ctx)
	err := next.ConsumeTraces(ctx, td)
	s.obs.EndTracesOp(ctx, "protobuf", n, err)
	if err != nil {
		return ptraceotlp.NewExportResponse(), grpcStatus(err)
	}
	return ptraceotlp.NewExportResponse(), nil
}

func grpcStatus(err error) error {
	if s, ok := status.FromError(err); ok {
		return s.Err()
	}
	code := codes.Unavailable
	if consumererror.IsPermanent(err) {
		code = codes.Internal
	}
	return status.New(code, err.Error()).Err()
}

// indexSpans hands every span that names its thread to the engine for the
// join, and counts the outcomes.
func (r *perfprofReceiver) indexSpans(td ptrace.Traces) {
	threadKey, workerKey := r.cfg.Correlation.ThreadIDAttribute, r.cfg.Correlation.WorkerIDAttribute
	var noThread int64
	spans := make([]profiler.Span, 0, td.SpanCount())
	for i := 0; i < td.ResourceSpans().Len(); i++ {
		rs := td.ResourceSpans().At(i)
		res := r.internResource(rs.Resource())
		// SDKs name their process (resource detector process.pid): its
		// profiles get this resource from now on.
		if pid, ok := intAttr(rs.Resource().Attributes(), convention.ProcessPid); ok && pid > 0 && pid <= math.MaxInt32 {
			r.prof.NameProcess(int(pid), res)
		}
		for j := 0; j < rs.ScopeSpans().Len(); j++ {
			ss := rs.ScopeSpans().At(j).Spans()
			for k := 0; k < ss.Len(); k++ {
				sp := ss.At(k)
				attrs := sp.Attributes()
				tid, ok := intAttr(attrs, threadKey)
				if !ok || tid <= 0 || tid > math.MaxUint32 {
					noThread++
					continue
				}
				worker := int64(-1)
				if w, ok := intAttr(attrs, workerKey); ok && w >= 0 {
					worker = w
				}
				flags := sp.Flags()
				kind := sp.Kind()
				parent := sp.ParentSpanID()
				remote := flags&(flagHasIsRemote|flagIsRemote) == flagHasIsRemote|flagIsRemote ||
					(flags&flagHasIsRemote == 0 && !parent.IsEmpty() && (kind == ptrace.SpanKindServer || kind == ptrace.SpanKindConsumer))
				spans = append(spans, profiler.Span{
					Tid:          uint32(tid),
					TraceID:      sp.TraceID(),
					SpanID:       sp.SpanID(),
					ParentSpanID: parent,
					ParentRemote: remote,
					Start:        uint64(sp.StartTimestamp()),
					End:          uint64(sp.EndTimestamp()),
					Name:         sp.Name(),
					WorkerID:     worker,
					Resource:     res,
				})
			}
		}
	}
	c := r.prof.AddSpans(spans)
	ctx := context.Background()
	for _, o := range []struct {
		n       int64
		outcome string
	}{{c.Indexed, "indexed"}, {noThread, "no_thread_id"}, {c.Late, "late"}, {c.OverLimit, "over_limit"}, {c.Invalid, "invalid"}} {
		if o.n > 0 {
			r.telemetry.ReceiverPerfprofSpans.Add(ctx, o.n, metric.WithAttributes(attribute.String("outcome", o.outcome)))
		}
	}
	if c.OverLimit > 0 {
		r.log.Warn("Spans not joined: correlation.max_spans reached", zap.Int64("spans", c.OverLimit), zap.Int("max_spans", r.cfg.Correlation.MaxSpans))
	}
}

// intAttr reads an integer attribute (see convention.Int).
func intAttr(m pcommon.Map, key string) (int64, bool) {
	if v, ok := m.Get(key); ok && key != "" {
		return convention.Int(v.AsRaw())
	}
	return 0, false
}

// internResource returns the handle of a span resource, remembering it for
// the profiles of its process; -1 past maxResources.
func (r *perfprofReceiver) internResource(res pcommon.Resource) int32 {
	attrs := res.Attributes()
	keys := make([]string, 0, attrs.Len())
	attrs.Range(func(k string, v pcommon.Value) bool {
		keys = append(keys, k+"="+v.AsString())
		return true
	})
	sort.Strings(keys)
	key := strings.Join(keys, "\x00")
	r.resMu.Lock()
	defer r.resMu.Unlock()
	if h, ok := r.resourceIdx[key]; ok {
		return h
	}
	if len(r.resources) >= maxResources {
		return -1
	}
	cp := pcommon.NewResource()
	res.CopyTo(cp)
	h := int32(len(r.resources))
	r.resources = append(r.resources, cp)
	r.resourceIdx[key] = h
	return h
}

// resource returns the span resource of handle h, and false for none.
func (r *perfprofReceiver) resource(h int32) (pcommon.Resource, bool) {
	r.resMu.Lock()
	defer r.resMu.Unlock()
	if h < 0 || int(h) >= len(r.resources) {
		return pcommon.Resource{}, false
	}
	return r.resources[h], true
}

// startServers starts the configured OTLP servers.
func (r *perfprofReceiver) startServers(ctx context.Context, host component.Host) error {
	var ext map[component.ID]component.Component
	if host != nil {
		ext = host.GetExtensions()
	}
	if g := r.cfg.Protocols.GRPC.Get(); g != nil {
		obs, err := r.obsReport("grpc")
		if err != nil {
			return err
		}
		srv, err := g.ToServer(ctx, ext, r.set.TelemetrySettings)
		if err != nil {
			return fmt.Errorf("create OTLP/gRPC server: %w", err)
		}
		ptraceotlp.RegisterGRPCServer(srv, &tracesServer{r: r, transport: "grpc", obs: obs})
		lis, err := g.NetAddr.Listen(ctx)
		if err != nil {
			return fmt.Errorf("listen for OTLP/gRPC on %s: %w", g.NetAddr.Endpoint, err)
		}
		r.grpcServer = srv
		r.grpcAddr = lis.Addr().String()
		r.log.Info("Receiving spans over OTLP/gRPC", zap.String("endpoint", lis.Addr().String()))
		r.serveWG.Add(1)
		go func() {
			defer r.serveWG.Done()
			if err := srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				r.log.Error("OTLP/gRPC server failed", zap.Error(err))
			}
		}()
	}
	if h := r.cfg.Protocols.HTTP.Get(); h != nil {
		obs, err := r.obsReport("http")
		if err != nil {
			return err
		}
		ts := &tracesServer{r: r, transport: "http", obs: obs}
		mux := http.NewServeMux()
		mux.HandleFunc(h.TracesURLPath, ts.serveHTTP)
		lis, err := h.ServerConfig.ToListener(ctx)
		if err != nil {
			return fmt.Errorf("listen for OTLP/HTTP on %s: %w", h.ServerConfig.NetAddr.Endpoint, err)
		}
		srv, err := h.ServerConfig.ToServer(ctx, ext, r.set.TelemetrySettings, mux)
		if err != nil {
			lis.Close()
			return fmt.Errorf("create OTLP/HTTP server: %w", err)
		}
		r.httpServer = srv
		r.httpAddr = lis.Addr().String()
		r.log.Info("Receiving spans over OTLP/HTTP", zap.String("endpoint", lis.Addr().String()), zap.String("path", h.TracesURLPath))
		r.serveWG.Add(1)
		go func() {
			defer r.serveWG.Done()
			if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				r.log.Error("OTLP/HTTP server failed", zap.Error(err))
			}
		}()
	}
	return nil
}

func (r *perfprofReceiver) obsReport(transport string) (*receiverhelper.ObsReport, error) {
	obs, err := receiverhelper.NewObsReport(receiverhelper.ObsReportSettings{
		ReceiverID:             r.set.ID,
		Transport:              transport,
		ReceiverCreateSettings: r.set,
	})
	if err != nil {
		return nil, fmt.Errorf("create receiver telemetry: %w", err)
	}
	return obs, nil
}

func (r *perfprofReceiver) stopServers(ctx context.Context) {
	if r.grpcServer != nil {
		r.grpcServer.GracefulStop()
	}
	if r.httpServer != nil {
		_ = r.httpServer.Shutdown(ctx)
	}
	r.serveWG.Wait()
}

const (
	contentTypeProto = "application/x-protobuf"
	contentTypeJSON  = "application/json"
)

// serveHTTP is the OTLP/HTTP traces endpoint: POST, protobuf or JSON.
// Errors come back as a google.rpc.Status in the request's encoding.
func (s *tracesServer) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeHTTP(w, "text/plain", http.StatusMethodNotAllowed, []byte("405 method not allowed, supported: [POST]"))
		return
	}
	ct, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
	if ct != contentTypeProto && ct != contentTypeJSON {
		writeHTTP(w, "text/plain", http.StatusUnsupportedMediaType,
			[]byte(fmt.Sprintf("415 unsupported media type, supported: [%s, %s]", contentTypeJSON, contentTypeProto)))
		return
	}
	body, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		writeHTTPStatus(w, ct, status.New(codes.InvalidArgument, "read request body: "+err.Error()))
		return
	}
	otlpReq := ptraceotlp.NewExportRequest()
	if ct == contentTypeProto {
		err = otlpReq.UnmarshalProto(body)
	} else {
		err = otlpReq.UnmarshalJSON(body)
	}
	if err != nil {
		writeHTTPStatus(w, ct, status.New(codes.InvalidArgument, "decode OTLP traces request: "+err.Error()))
		return
	}
	resp, err := s.Export(req.Context(), otlpReq)
	if err != nil {
		st, _ := status.FromError(err)
		writeHTTPStatus(w, ct, st)
		return
	}
	var msg []byte
	if ct == contentTypeProto {
		msg, err = resp.MarshalProto()
	} else {
		msg, err = resp.MarshalJSON()
	}
	if err != nil {
		writeHTTPStatus(w, ct, status.New(codes.Internal, "encode response: "+err.Error()))
		return
	}
	writeHTTP(w, ct, http.StatusOK, msg)
}

// httpCode maps a gRPC code to the OTLP/HTTP status code, as the OTLP
// specification's failure sections list them.
func httpCode(c codes.Code) int {
	switch c {
	case codes.Canceled, codes.DeadlineExceeded, codes.Aborted, codes.OutOfRange, codes.Unavailable, codes.DataLoss:
		return http.StatusServiceUnavailable
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.InvalidArgument:
		return http.StatusBadRequest
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unimplemented:
		return http.StatusNotFound
	}
	return http.StatusInternalServerError
}

func writeHTTPStatus(w http.ResponseWriter, ct string, st *status.Status) {
	// Decode errors quote the input, which need not be UTF-8; protobuf
	// strings must be.
	if m := st.Message(); !utf8.ValidString(m) {
		st = status.New(st.Code(), strings.ToValidUTF8(m, "\uFFFD"))
	}
	var msg []byte
	var err error
	if ct == contentTypeProto {
		msg, err = proto.Marshal(st.Proto())
	} else {
		msg, err = protojson.Marshal(st.Proto())
	}
	if err != nil {
		writeHTTP(w, contentTypeJSON, http.StatusInternalServerError, []byte(`{"code": 13, "message": "failed to marshal error message"}`))
		return
	}
	writeHTTP(w, ct, httpCode(st.Code()), msg)
}

func writeHTTP(w http.ResponseWriter, ct string, code int, msg []byte) {
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(code)
	_, _ = w.Write(msg)
}
