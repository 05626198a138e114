package perfprofreceiver

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/receiverhelper"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/pkg/otlpserver"
)

// Span flags of the OTLP data model (SpanFlags in trace.proto).
const (
	flagHasIsRemote = 0x100
	flagIsRemote    = 0x200
)

// Bounds on what a span may make the receiver hold: max_spans names and
// maxResources resources stay in memory, and one request may carry values
// of megabytes (up to max_request_body_size).
const (
	maxSpanName     = 1 << 10  // bytes of a span name held for the join
	maxResourceSize = 64 << 10 // bytes of a remembered resource's attributes
	maxContainerID  = 256      // bytes of a container.id looked at
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
	threadKey, workerKey := r.cfg.Correlation.ThreadIDAttribute, r.cfg.Correlation.WorkerIDAttribute
	var noThread, longNames, bigResources int64
	spans := make([]profiler.Span, 0, td.SpanCount())
	for i := 0; i < td.ResourceSpans().Len(); i++ {
		rs := td.ResourceSpans().At(i)
		res, ok := r.internResource(rs.Resource())
		if !ok {
			bigResources++
		}
		// SDKs name their process (resource detector process.pid), and
		// its spans link only its own samples.
		var spanPid uint32
		if pid, ok := intAttr(rs.Resource().Attributes(), convention.ProcessPid); ok && pid > 0 && pid <= math.MaxInt32 {
			spanPid = uint32(pid)
		}
		// An app in a container of its own names its process by its pid
		// there; the engine maps it (and the threads) to the collector's
		// ids, choosing the process by the container.
		containerID, podUID := strAttr(rs.Resource().Attributes(), convention.ContainerID), strAttr(rs.Resource().Attributes(), convention.K8sPodUID)
		service := strAttr(rs.Resource().Attributes(), convention.ServiceName)
		// The process's profiles get this resource from now on.
		if spanPid != 0 {
			r.prof.NameProcess(int(spanPid), containerID, podUID, res)
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
				worker := int64(convention.NoWorkerID)
				if w, ok := intAttr(attrs, workerKey); ok && w >= 0 {
					worker = w
				}
				flags := sp.Flags()
				kind := sp.Kind()
				parent := sp.ParentSpanID()
				remote := flags&(flagHasIsRemote|flagIsRemote) == flagHasIsRemote|flagIsRemote ||
					(flags&flagHasIsRemote == 0 && !parent.IsEmpty() && (kind == ptrace.SpanKindServer || kind == ptrace.SpanKindConsumer))
				name := sp.Name()
				if len(name) > maxSpanName {
					// Cloned: the cut must not keep the whole name alive.
					name = strings.Clone(strings.ToValidUTF8(name[:maxSpanName], ""))
					longNames++
				}
				spans = append(spans, profiler.Span{
					Tid:          uint32(tid),
					Pid:          spanPid,
					TraceID:      sp.TraceID(),
					SpanID:       sp.SpanID(),
					ParentSpanID: parent,
					ParentRemote: remote,
					Start:        uint64(sp.StartTimestamp()),
					End:          uint64(sp.EndTimestamp()),
					Name:         name,
					WorkerID:     worker,
					Resource:     res,
					ContainerID:  containerID,
					PodUID:       podUID,
					Service:      service,
				})
			}
		}
	}
	// The engine counts the outcomes of the spans it was given.
	c := r.prof.AddSpans(spans)
	r.flushCounts()
	ctx := context.Background()
	if noThread > 0 {
		r.telemetry.ReceiverPerfprofSpans.Add(ctx, noThread, metric.WithAttributes(attribute.String("outcome", "no_thread_id")))
	}
	for _, b := range []struct {
		n    int64
		kind string
	}{{longNames, "span_name"}, {bigResources, "resource"}} {
		if b.n > 0 {
			r.telemetry.ReceiverPerfprofSpanValuesBounded.Add(ctx, b.n, metric.WithAttributes(attribute.String("kind", b.kind)))
		}
	}
	if c.OverLimit > 0 {
		r.log.Warn("Spans not joined: correlation.max_spans reached", zap.Int64("spans", c.OverLimit), zap.Int("max_spans", r.cfg.Correlation.MaxSpans))
	}
}

// strAttr reads a string attribute that names a container, a pod or a
// service: "" when absent, not a string or too long to be one.
func strAttr(m pcommon.Map, key string) string {
	if v, ok := m.Get(key); ok && v.Type() == pcommon.ValueTypeStr && len(v.Str()) <= maxContainerID {
		return v.Str()
	}
	return ""
}

// intAttr reads an integer attribute (see convention.Int).
func intAttr(m pcommon.Map, key string) (int64, bool) {
	if v, ok := m.Get(key); ok && key != "" {
		return convention.Int(v.AsRaw())
	}
	return 0, false
}

// internResource returns the handle of a span resource, remembering it for
// the profiles of its process (see resourceTable); -1 and false for a
// resource over maxResourceSize.
func (r *perfprofReceiver) internResource(res pcommon.Resource) (int32, bool) {
	attrs := res.Attributes()
	keys := make([]string, 0, attrs.Len())
	size := 0
	attrs.Range(func(k string, v pcommon.Value) bool {
		kv := k + "=" + v.AsString()
		keys = append(keys, kv)
		size += len(kv)
		return size <= maxResourceSize
	})
	if size > maxResourceSize {
		return -1, false
	}
	sort.Strings(keys)
	return r.resources.intern(strings.Join(keys, "\x00"), res), true
}

// resource returns the span resource of handle h, and false for none.
func (r *perfprofReceiver) resource(h int32) (pcommon.Resource, bool) {
	return r.resources.get(h)
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
