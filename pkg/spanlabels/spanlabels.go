package spanlabels

import (
	"context"
	"encoding/hex"
	"runtime/pprof"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"

	"github.com/perfprof/perfprof/internal/convention"
)

// The default label keys, those perfprof reads.
const (
	DefaultSpanIDKey  = convention.GoLabelSpanID
	DefaultTraceIDKey = convention.GoLabelTraceID
)

type config struct {
	spanIDKey, traceIDKey string
}

// An Option configures NewTracerProvider.
type Option func(*config)

// WithSpanIDKey names the label that holds the span id (default span_id);
// "" leaves it out.
func WithSpanIDKey(key string) Option { return func(c *config) { c.spanIDKey = key } }

// WithTraceIDKey names the label that holds the trace id (default
// trace_id); "" leaves it out.
func WithTraceIDKey(key string) Option { return func(c *config) { c.traceIDKey = key } }

// NewTracerProvider returns a TracerProvider whose tracers start their
// spans with tp and label the goroutine with each exported span while it
// runs (see the package documentation for the contract).
func NewTracerProvider(tp trace.TracerProvider, opts ...Option) trace.TracerProvider {
	c := config{spanIDKey: DefaultSpanIDKey, traceIDKey: DefaultTraceIDKey}
	for _, o := range opts {
		o(&c)
	}
	return &provider{tp: tp, cfg: c}
}

type provider struct {
	embedded.TracerProvider
	tp  trace.TracerProvider
	cfg config
}

// Tracer wraps tp's tracer. It keeps no cache: the wrapped provider has
// its own, and a wrapper tracer is two words.
func (p *provider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return &tracer{tr: p.tp.Tracer(name, opts...), p: p}
}

// labels returns the label set of a span.
func (p *provider) labels(sc trace.SpanContext) pprof.LabelSet {
	spanID, traceID := hexIDs(sc)
	switch {
	case p.cfg.spanIDKey != "" && p.cfg.traceIDKey != "":
		return pprof.Labels(p.cfg.spanIDKey, spanID, p.cfg.traceIDKey, traceID)
	case p.cfg.spanIDKey != "":
		return pprof.Labels(p.cfg.spanIDKey, spanID)
	case p.cfg.traceIDKey != "":
		return pprof.Labels(p.cfg.traceIDKey, traceID)
	}
	return pprof.LabelSet{}
}

// hexIDs spells the span and trace ids as SpanID.String and TraceID.String
// do, in one allocation instead of two.
func hexIDs(sc trace.SpanContext) (spanID, traceID string) {
	sid, tid := sc.SpanID(), sc.TraceID()
	var b [2*len(sid) + 2*len(tid)]byte
	hex.Encode(b[:2*len(sid)], sid[:])
	hex.Encode(b[2*len(sid):], tid[:])
	s := string(b[:])
	return s[:2*len(sid)], s[2*len(sid):]
}

type tracer struct {
	embedded.Tracer
	tr trace.Tracer
	p  *provider
}

func (t *tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if ctx == nil {
		// As the SDK does: trace.ContextWithSpan panics on nil.
		ctx = context.Background()
	}
	parent := ctx
	ctx, inner := t.tr.Start(ctx, name, opts...)
	s := &span{Span: inner, p: t.p}
	// The wrapper, not the inner span, goes in the context: ending the
	// span found there must restore labels, and a child started through
	// its TracerProvider must be labelled.
	ctx = trace.ContextWithSpan(ctx, s)
	// A span that will not be exported would give samples an id that no
	// exported span has: leave the parent's labels on.
	if sc := inner.SpanContext(); inner.IsRecording() && sc.IsSampled() {
		ctx = pprof.WithLabels(ctx, t.p.labels(sc))
		pprof.SetGoroutineLabels(ctx)
		s.restore = parent
	}
	return ctx, s
}

// span is a started span: the inner span with the context whose labels End
// puts back.
type span struct {
	trace.Span
	p *provider
	// restore is the context given to Start, nil if Start set no labels.
	restore context.Context
	ended   atomic.Bool
}

// End puts the parent's labels back before it ends the inner span, so that
// labels are on only within the span's [start, end) (the SDK takes the end
// time when End is called).
func (s *span) End(opts ...trace.SpanEndOption) {
	if s.restore != nil && s.ended.CompareAndSwap(false, true) {
		pprof.SetGoroutineLabels(s.restore)
	}
	s.Span.End(opts...)
}

// TracerProvider returns the wrapper, so that tracers taken from a span
// (otelhttp does when a request's context holds one) label their spans.
func (s *span) TracerProvider() trace.TracerProvider { return s.p }
