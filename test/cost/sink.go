package main

import (
	"context"
	"net"
	"sync/atomic"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // the OTLP exporter compresses by default
)

// sink is a real OTLP/gRPC traces endpoint on loopback that counts the
// spans it is sent and drops them: what the collector's otlp_grpc exporter
// sends to in the span rows, and where the Go service's SDK sends its
// spans. It decompresses what it is sent (gzip, the exporter's default), as
// a backend does.
type sink struct {
	ptraceotlp.UnimplementedGRPCServer
	srv   *grpc.Server
	addr  string
	spans atomic.Uint64
}

func startSink() (*sink, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sink{srv: grpc.NewServer(grpc.MaxRecvMsgSize(64 << 20)), addr: lis.Addr().String()}
	ptraceotlp.RegisterGRPCServer(s.srv, s)
	go func() { _ = s.srv.Serve(lis) }()
	return s, nil
}

func (s *sink) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	s.spans.Add(uint64(req.Traces().SpanCount()))
	return ptraceotlp.NewExportResponse(), nil
}

func (s *sink) stop() { s.srv.Stop() }
