// Package otlpserver serves OTLP trace exports over gRPC and HTTP
// (protobuf and JSON), with the status semantics of the collector's otlp
// receiver, and hands each request's spans to a Handler. It is the
// collector's own server configuration (configgrpc, confighttp) around the
// OTLP wire protocol; what the spans are for is the handler's business.
package otlpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/configgrpc"
	"go.opentelemetry.io/collector/config/confighttp"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Handler takes the spans of one export request, received over transport
// ("grpc" or "http"). A retryable error answers Unavailable (HTTP 503), a
// permanent one (consumererror.NewPermanent) Internal (HTTP 500), as the
// otlp receiver does.
type Handler func(ctx context.Context, td ptrace.Traces, transport string) error

// Config says which servers to run; a nil server is not started.
type Config struct {
	GRPC          *configgrpc.ServerConfig
	HTTP          *confighttp.ServerConfig
	TracesURLPath string // HTTP path of trace exports, e.g. /v1/traces
	Host          component.Host
	Telemetry     component.TelemetrySettings
	Logger        *zap.Logger
	// Rejected, if set, is told of every request refused before its spans
	// reached the handler, with its transport and one of the Reject
	// reasons: the collector's receiver telemetry counts only spans it
	// could decode.
	Rejected func(transport, reason string)
}

// Why a request was refused before the handler saw it.
const (
	RejectMethod      = "method"       // not POST (HTTP)
	RejectContentType = "content_type" // neither protobuf nor JSON
	RejectEncoding    = "encoding"     // unsupported Content-Encoding, or a broken compression header
	RejectAuth        = "auth"         // refused by the configured authenticator
	RejectRead        = "read"         // the body could not be read whole: cut short, broken compression
	RejectTooLarge    = "too_large"    // over max_request_body_size (HTTP) or max_recv_msg_size_mib (gRPC)
	RejectDecode      = "decode"       // not an OTLP traces request
)

// Server is the running servers.
type Server struct {
	// GRPCAddr and HTTPAddr are where the servers listen ("" when off).
	GRPCAddr, HTTPAddr string

	grpc *grpc.Server
	http *http.Server
	log  *zap.Logger
	wg   sync.WaitGroup
}

// Start starts the configured servers. On error nothing is left running.
func Start(ctx context.Context, cfg Config, handle Handler) (_ *Server, err error) {
	s := &Server{log: cfg.Logger}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	defer func() {
		if err != nil {
			s.Stop(ctx)
		}
	}()
	var ext map[component.ID]component.Component
	if cfg.Host != nil {
		ext = cfg.Host.GetExtensions()
	}
	rejected := cfg.Rejected
	if rejected == nil {
		rejected = func(string, string) {}
	}
	if g := cfg.GRPC; g != nil {
		srv, err := g.ToServer(ctx, ext, cfg.Telemetry, configgrpc.WithGrpcServerOption(grpc.StatsHandler(rejectCounter{rejected})))
		if err != nil {
			return nil, fmt.Errorf("create OTLP/gRPC server: %w", err)
		}
		ptraceotlp.RegisterGRPCServer(srv, &grpcServer{handle: handle})
		lis, err := g.NetAddr.Listen(ctx)
		if err != nil {
			return nil, fmt.Errorf("listen for OTLP/gRPC on %s: %w", g.NetAddr.Endpoint, err)
		}
		s.grpc, s.GRPCAddr = srv, lis.Addr().String()
		s.log.Info("Receiving spans over OTLP/gRPC", zap.String("endpoint", s.GRPCAddr))
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				s.log.Error("OTLP/gRPC server failed", zap.Error(err))
			}
		}()
	}
	if h := cfg.HTTP; h != nil {
		mux := http.NewServeMux()
		mux.Handle(cfg.TracesURLPath, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			serveHTTP(handle, rejected, w, req)
		}))
		lis, err := h.ToListener(ctx)
		if err != nil {
			return nil, fmt.Errorf("listen for OTLP/HTTP on %s: %w", h.NetAddr.Endpoint, err)
		}
		// confighttp refuses bad encodings and failed authentication
		// before the mux; the otlp receiver answers those with a Status too.
		errorHandler := func(w http.ResponseWriter, req *http.Request, msg string, code int) {
			reason := RejectEncoding
			if code == http.StatusUnauthorized {
				reason = RejectAuth
			}
			rejected("http", reason)
			ct, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
			if ct != contentTypeProto {
				ct = contentTypeJSON
			}
			writeHTTPStatus(w, ct, status.New(grpcCode(code), msg))
		}
		srv, err := h.ToServer(ctx, ext, cfg.Telemetry, mux, confighttp.WithErrorHandler(errorHandler))
		if err != nil {
			lis.Close()
			return nil, fmt.Errorf("create OTLP/HTTP server: %w", err)
		}
		s.http, s.HTTPAddr = srv, lis.Addr().String()
		s.log.Info("Receiving spans over OTLP/HTTP", zap.String("endpoint", s.HTTPAddr), zap.String("path", cfg.TracesURLPath))
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("OTLP/HTTP server failed", zap.Error(err))
			}
		}()
	}
	return s, nil
}

// Stop stops the servers, letting requests in flight finish.
func (s *Server) Stop(ctx context.Context) {
	if s == nil {
		return
	}
	if s.grpc != nil {
		s.grpc.GracefulStop()
	}
	if s.http != nil {
		_ = s.http.Shutdown(ctx)
	}
	s.wg.Wait()
}

type grpcServer struct {
	ptraceotlp.UnimplementedGRPCServer
	handle Handler
}

// Export implements the OTLP trace service.
func (g *grpcServer) Export(ctx context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	if d, ok := ctx.Value(decodedKey{}).(*atomic.Bool); ok {
		d.Store(true)
	}
	return export(ctx, g.handle, req, "grpc")
}

// rejectCounter tells of the gRPC calls that ended in an error before
// Export ran: gRPC decodes (and size-checks) a request before the service
// sees it. Bytes that are not HTTP/2 never become a call; gRPC closes the
// connection, and nothing counts them; nor calls of unknown methods, which
// gRPC answers without telling its stats handlers, as HTTP requests to
// other paths are not counted.
type rejectCounter struct {
	rejected func(transport, reason string)
}

type decodedKey struct{}

func (rejectCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, decodedKey{}, new(atomic.Bool))
}

func (c rejectCounter) HandleRPC(ctx context.Context, s stats.RPCStats) {
	end, ok := s.(*stats.End)
	if !ok || end.Error == nil || end.IsClient() {
		return
	}
	if d, ok := ctx.Value(decodedKey{}).(*atomic.Bool); ok && d.Load() {
		return
	}
	reason := RejectRead
	switch status.Code(end.Error) {
	case codes.ResourceExhausted:
		reason = RejectTooLarge
	case codes.Internal:
		reason = RejectDecode
	case codes.Unauthenticated, codes.PermissionDenied:
		reason = RejectAuth
	}
	c.rejected("grpc", reason)
}

func (rejectCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (rejectCounter) HandleConn(context.Context, stats.ConnStats)                       {}

func export(ctx context.Context, handle Handler, req ptraceotlp.ExportRequest, transport string) (ptraceotlp.ExportResponse, error) {
	td := req.Traces()
	if td.SpanCount() == 0 {
		return ptraceotlp.NewExportResponse(), nil
	}
	if err := handle(ctx, td, transport); err != nil {
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

// HTTPHandler is the OTLP/HTTP traces endpoint: POST, protobuf or JSON.
// Errors come back as a google.rpc.Status in the request's encoding.
func HTTPHandler(handle Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		serveHTTP(handle, func(string, string) {}, w, req)
	})
}

const (
	contentTypeProto = "application/x-protobuf"
	contentTypeJSON  = "application/json"
)

func serveHTTP(handle Handler, rejected func(transport, reason string), w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		rejected("http", RejectMethod)
		w.Header().Set("Allow", http.MethodPost)
		writeHTTP(w, "text/plain", http.StatusMethodNotAllowed, []byte("405 method not allowed, supported: [POST]"))
		return
	}
	ct, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
	if ct != contentTypeProto && ct != contentTypeJSON {
		rejected("http", RejectContentType)
		writeHTTP(w, "text/plain", http.StatusUnsupportedMediaType,
			[]byte(fmt.Sprintf("415 unsupported media type, supported: [%s, %s]", contentTypeJSON, contentTypeProto)))
		return
	}
	body, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		// As the otlp receiver: 400 even over max_request_body_size.
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			rejected("http", RejectTooLarge)
		} else {
			rejected("http", RejectRead)
		}
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
		rejected("http", RejectDecode)
		writeHTTPStatus(w, ct, status.New(codes.InvalidArgument, "decode OTLP traces request: "+err.Error()))
		return
	}
	resp, err := export(req.Context(), handle, otlpReq, "http")
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

// grpcCode maps an HTTP status code to a gRPC code, as the otlp receiver
// does for the errors confighttp raises before the handler (after gRPC's
// HTTP mapping, but 400 is InvalidArgument and 429 ResourceExhausted).
func grpcCode(code int) codes.Code {
	switch code {
	case http.StatusBadRequest:
		return codes.InvalidArgument
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.Unimplemented
	case http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return codes.Unavailable
	}
	return codes.Unknown
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
	code := httpCode(st.Code())
	if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
		// Throttling, as the OTLP specification has it: the server may say
		// when to retry.
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				w.Header().Set("Retry-After", strconv.FormatInt(int64(ri.GetRetryDelay().AsDuration()/time.Second), 10))
				break
			}
		}
	}
	writeHTTP(w, ct, code, msg)
}

func writeHTTP(w http.ResponseWriter, ct string, code int, msg []byte) {
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(code)
	_, _ = w.Write(msg)
}
