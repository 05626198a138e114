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

// maxResources bounds the distinct span resources remembered for the
// profiles; spans of further resources are still joined, without resource.
const maxResources = 4096

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
	if err := r.initObs(); err != nil {
		return err
	}
	cfg := otlpserver.Config{Host: host, Telemetry: r.set.TelemetrySettings, Logger: r.log}
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
	for _, transport := range []string{"grpc", "http"} {
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

func (r *perfprofReceiver) stopServers(ctx context.Context) { r.server.Stop(ctx) }
