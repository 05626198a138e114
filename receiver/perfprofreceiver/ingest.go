package perfprofreceiver

import (
	"context"
	"fmt"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/receiverhelper"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/perfprof/perfprof/pkg/otlpserver"
)

// consumeSpans indexes the spans of one export request for the join, then
// passes them on to the traces pipeline, if the component is in one.
func (r *perfprofReceiver) consumeSpans(ctx context.Context, td ptrace.Traces, transport string) error {
	r.indexSpans(td)
	if r.traces == nil {
		return nil
	}
	obs := r.obs[transport]
	ctx = obs.StartTracesOp(ctx)
	err := r.traces.ConsumeTraces(ctx, td)
	obs.EndTracesOp(ctx, "protobuf", td.SpanCount(), err)
	return err
}

// indexSpans hands every span that names its thread to the engine for the
// join, and counts the outcomes.
func (r *perfprofReceiver) indexSpans(td ptrace.Traces) {
	batch := r.spanConv.Convert(td)
	// The process's profiles get this resource from now on.
	for _, p := range batch.Processes {
		r.prof.NameProcess(p.Pid, p.ContainerID, p.PodUID, p.Resource)
	}
	// The engine counts the outcomes of the spans it was given.
	c := r.prof.AddSpans(batch.Spans)
	r.flushCounts()
	ctx := context.Background()
	if batch.NoThread > 0 {
		r.telemetry.ReceiverPerfprofSpans.Add(ctx, batch.NoThread, metric.WithAttributes(attribute.String("outcome", "no_thread_id")))
	}
	for _, b := range []struct {
		n    int64
		kind string
	}{{batch.LongNames, "span_name"}, {batch.BigResources, "resource"}} {
		if b.n > 0 {
			r.telemetry.ReceiverPerfprofSpanValuesBounded.Add(ctx, b.n, metric.WithAttributes(attribute.String("kind", b.kind)))
		}
	}
	if c.OverLimit > 0 {
		r.log.Warn("Spans not joined: correlation.max_spans reached", zap.Int64("spans", c.OverLimit), zap.Int("max_spans", r.cfg.Correlation.MaxSpans))
	}
}

// startServers starts the configured OTLP servers.
func (r *perfprofReceiver) startServers(ctx context.Context, host component.Host) error {
	if err := r.initObs(); err != nil {
		return err
	}
	cfg := otlpserver.Config{Host: host, Telemetry: r.set.TelemetrySettings, Logger: r.log, Rejected: r.rejected}
	if g := r.cfg.Protocols.GRPC.Get(); g != nil {
		cfg.GRPC = g
	}
	if h := r.cfg.Protocols.HTTP.Get(); h != nil {
		cfg.HTTP, cfg.TracesURLPath = &h.ServerConfig, h.TracesURLPath
	}
	srv, err := otlpserver.Start(ctx, cfg, r.consumeSpans)
	if err != nil {
		return err
	}
	r.server = srv
	return nil
}

// initObs creates the collector's receiver telemetry of each transport.
func (r *perfprofReceiver) initObs() error {
	r.obs = map[string]*receiverhelper.ObsReport{}
	// "perf_event" is the profiles' own transport: their samples count in
	// otelcol_receiver_accepted_profile_samples (or refused/failed), as
	// the spans of the other two do, so that every sample the receiver
	// hands on can be reconciled with what each exporter sent.
	for _, transport := range []string{"grpc", "http", "perf_event"} {
		obs, err := receiverhelper.NewObsReport(receiverhelper.ObsReportSettings{
			ReceiverID:             r.set.ID,
			Transport:              transport,
			ReceiverCreateSettings: r.set,
		})
		if err != nil {
			return fmt.Errorf("create receiver telemetry: %w", err)
		}
		r.obs[transport] = obs
	}
	return nil
}

// rejected counts a request refused before its spans could be read.
func (r *perfprofReceiver) rejected(transport, reason string) {
	r.telemetry.ReceiverPerfprofRejectedRequests.Add(context.Background(), 1,
		metric.WithAttributes(attribute.String("transport", transport), attribute.String("reason", reason)))
}

func (r *perfprofReceiver) stopServers(ctx context.Context) { r.server.Stop(ctx) }
