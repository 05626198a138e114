package spanlabels_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/perfprof/perfprof/pkg/spanlabels"
)

// profileMu serializes goroutineLabels: its caller is the one goroutine
// whose stack holds goroutineLabels and the profile's WriteTo.
var profileMu sync.Mutex

// goroutineLabels returns the calling goroutine's labels as the runtime
// holds them, read back from a goroutine profile (which records each
// goroutine's labels): the runtime has no other way to read them, and this
// is what a profiler sees. It reports failures with Errorf, not Fatal, as
// goroutines other than the test's call it; it returns a map no test
// expects then.
//
//go:noinline
func goroutineLabels(t testing.TB) map[string]string {
	t.Helper()
	profileMu.Lock()
	defer profileMu.Unlock()
	failed := map[string]string{"": "goroutineLabels failed"}
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 0); err != nil {
		t.Error(err)
		return failed
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Error(err)
		return failed
	}
	var found []map[string]string
	for _, s := range p.Sample {
		var self, writing bool
		for _, loc := range s.Location {
			for _, l := range loc.Line {
				self = self || strings.HasSuffix(l.Function.Name, "spanlabels_test.goroutineLabels")
				writing = writing || strings.HasSuffix(l.Function.Name, "pprof.(*Profile).WriteTo")
			}
		}
		if self && writing {
			m := map[string]string{}
			for k, v := range s.Label {
				m[k] = v[0]
			}
			for range s.Value[0] {
				found = append(found, m)
			}
		}
	}
	if len(found) != 1 {
		t.Errorf("%d goroutines in goroutineLabels writing the profile, want 1", len(found))
		return failed
	}
	return found[0]
}

// contextLabels returns the labels of ctx.
func contextLabels(ctx context.Context) map[string]string {
	m := map[string]string{}
	pprof.ForLabels(ctx, func(k, v string) bool {
		m[k] = v
		return true
	})
	return m
}

func ids(s trace.Span) map[string]string {
	sc := s.SpanContext()
	return map[string]string{"span_id": sc.SpanID().String(), "trace_id": sc.TraceID().String()}
}

func with(m map[string]string, kv ...string) map[string]string {
	m = maps.Clone(m)
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func wantLabels(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if !maps.Equal(got, want) {
		t.Errorf("%s: labels %v, want %v", what, got, want)
	}
}

func newSDK(opts ...sdktrace.TracerProviderOption) *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(append([]sdktrace.TracerProviderOption{sdktrace.WithSampler(sdktrace.AlwaysSample())}, opts...)...)
}

func newTracer(t *testing.T, opts ...spanlabels.Option) trace.Tracer {
	sdk := newSDK()
	t.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
	return spanlabels.NewTracerProvider(sdk, opts...).Tracer("test")
}

func TestStartLabelsEndRestores(t *testing.T) {
	tr := newTracer(t)
	wantLabels(t, "before", goroutineLabels(t), map[string]string{})
	ctx, s := tr.Start(context.Background(), "op")
	if len(s.SpanContext().SpanID().String()) != 16 || len(s.SpanContext().TraceID().String()) != 32 {
		t.Fatalf("span context %v", s.SpanContext())
	}
	wantLabels(t, "context", contextLabels(ctx), ids(s))
	wantLabels(t, "goroutine in span", goroutineLabels(t), ids(s))
	if v, ok := pprof.Label(ctx, "span_id"); !ok || v != s.SpanContext().SpanID().String() {
		t.Errorf("pprof.Label(span_id) = %q, %v", v, ok)
	}
	s.End()
	wantLabels(t, "after End", goroutineLabels(t), map[string]string{})
}

func TestKeepsContextLabels(t *testing.T) {
	tr := newTracer(t)
	base := pprof.WithLabels(context.Background(), pprof.Labels("tenant", "a"))
	pprof.SetGoroutineLabels(base)
	defer pprof.SetGoroutineLabels(context.Background())

	ctx, s := tr.Start(base, "op")
	inSpan := with(ids(s), "tenant", "a")
	wantLabels(t, "goroutine in span", goroutineLabels(t), inSpan)
	// Labels the application adds to the returned context keep the span's.
	pprof.Do(ctx, pprof.Labels("stage", "parse"), func(ctx context.Context) {
		wantLabels(t, "in pprof.Do", goroutineLabels(t), with(inSpan, "stage", "parse"))
		_, c := tr.Start(ctx, "child")
		wantLabels(t, "child in pprof.Do", goroutineLabels(t), with(ids(c), "tenant", "a", "stage", "parse"))
		c.End()
		wantLabels(t, "after child", goroutineLabels(t), with(inSpan, "stage", "parse"))
	})
	wantLabels(t, "after pprof.Do", goroutineLabels(t), inSpan)
	s.End()
	wantLabels(t, "after End", goroutineLabels(t), map[string]string{"tenant": "a"})
}

func TestNested(t *testing.T) {
	tr := newTracer(t)
	ctx, root := tr.Start(context.Background(), "root")
	cctx, child := tr.Start(ctx, "child")
	_, grand := tr.Start(cctx, "grandchild")
	if grand.SpanContext().TraceID() != root.SpanContext().TraceID() {
		t.Fatal("grandchild in another trace")
	}
	wantLabels(t, "grandchild", goroutineLabels(t), ids(grand))
	grand.End()
	wantLabels(t, "after grandchild", goroutineLabels(t), ids(child))
	// A sibling started from the root's context replaces the child's labels
	// and gives the root's back at its end.
	_, sib := tr.Start(ctx, "sibling")
	wantLabels(t, "sibling", goroutineLabels(t), ids(sib))
	sib.End()
	wantLabels(t, "after sibling", goroutineLabels(t), ids(root))
	child.End()
	wantLabels(t, "after child", goroutineLabels(t), ids(root))
	root.End()
	wantLabels(t, "after root", goroutineLabels(t), map[string]string{})
}

func TestKeys(t *testing.T) {
	for _, tc := range []struct {
		name       string
		opts       []spanlabels.Option
		span, trac string // keys; "" absent
	}{
		{"default", nil, "span_id", "trace_id"},
		{"renamed", []spanlabels.Option{spanlabels.WithSpanIDKey("otel.span"), spanlabels.WithTraceIDKey("otel.trace")}, "otel.span", "otel.trace"},
		{"span only", []spanlabels.Option{spanlabels.WithTraceIDKey("")}, "span_id", ""},
		{"trace only", []spanlabels.Option{spanlabels.WithSpanIDKey("")}, "", "trace_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, s := newTracer(t, tc.opts...).Start(context.Background(), "op")
			defer s.End()
			want := map[string]string{}
			if tc.span != "" {
				want[tc.span] = s.SpanContext().SpanID().String()
			}
			if tc.trac != "" {
				want[tc.trac] = s.SpanContext().TraceID().String()
			}
			wantLabels(t, "context", contextLabels(ctx), want)
			wantLabels(t, "goroutine", goroutineLabels(t), want)
		})
	}
}

// sampleByName samples the spans named "sampled" and records, unsampled,
// the spans named "record-only"; it drops the others.
type sampleByName struct{}

func (sampleByName) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	d := sdktrace.Drop
	switch p.Name {
	case "sampled":
		d = sdktrace.RecordAndSample
	case "record-only":
		d = sdktrace.RecordOnly
	}
	return sdktrace.SamplingResult{Decision: d, Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState()}
}

func (sampleByName) Description() string { return "sampleByName" }

func TestUnexportedSpansChangeNoLabels(t *testing.T) {
	sdk := newSDK(sdktrace.WithSampler(sampleByName{}))
	defer sdk.Shutdown(context.Background())
	tr := spanlabels.NewTracerProvider(sdk).Tracer("test")

	ctx, parent := tr.Start(context.Background(), "sampled")
	for _, name := range []string{"dropped", "record-only"} {
		cctx, c := tr.Start(ctx, name)
		if c.SpanContext().IsSampled() {
			t.Fatalf("%s is sampled", name)
		}
		// The parent's labels stay, on the goroutine and in the context.
		wantLabels(t, name+": goroutine", goroutineLabels(t), ids(parent))
		wantLabels(t, name+": context", contextLabels(cctx), ids(parent))
		c.End()
		wantLabels(t, name+": after End", goroutineLabels(t), ids(parent))
	}
	parent.End()

	// Not even a remote parent's ids: a no-op tracer's span carries its
	// parent's span context, and is not recording.
	remote := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true,
	})
	rctx := trace.ContextWithRemoteSpanContext(context.Background(), remote)
	_, n := spanlabels.NewTracerProvider(noop.NewTracerProvider()).Tracer("noop").Start(rctx, "op")
	wantLabels(t, "no-op provider", goroutineLabels(t), map[string]string{})
	n.End()
}

func TestSecondEndChangesNothing(t *testing.T) {
	tr := newTracer(t)
	_, a := tr.Start(context.Background(), "a")
	a.End()
	_, b := tr.Start(context.Background(), "b")
	a.End()
	wantLabels(t, "after a second End of a", goroutineLabels(t), ids(b))
	b.End()
}

func TestSpanFromContext(t *testing.T) {
	tr := newTracer(t)
	ctx, s := tr.Start(context.Background(), "op")
	got := trace.SpanFromContext(ctx)
	if got != s {
		t.Fatalf("SpanFromContext returns %T, not the span Start returned", got)
	}
	// Instrumentation that takes a tracer from the span in a context.
	_, c := got.TracerProvider().Tracer("lib").Start(ctx, "lib")
	wantLabels(t, "child through the span's provider", goroutineLabels(t), ids(c))
	c.End()
	trace.SpanFromContext(ctx).End()
	wantLabels(t, "after End through the context", goroutineLabels(t), map[string]string{})
}

// TestGoroutines: a goroutine inherits its creator's labels at the go
// statement, and keeps them after the span ends.
func TestGoroutines(t *testing.T) {
	tr := newTracer(t)
	ctx, s := tr.Start(context.Background(), "op")
	spanLabels := ids(s)
	ended := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		wantLabels(t, "child goroutine in span", goroutineLabels(t), spanLabels)
		<-ended
		wantLabels(t, "child goroutine after End", goroutineLabels(t), spanLabels)
		// Its own span nests under the inherited context's.
		_, c := tr.Start(ctx, "child")
		wantLabels(t, "child goroutine's span", goroutineLabels(t), ids(c))
		c.End()
		wantLabels(t, "child goroutine's span ended", goroutineLabels(t), spanLabels)
	}()
	s.End()
	close(ended)
	wg.Add(1)
	go func() {
		defer wg.Done()
		wantLabels(t, "goroutine started after End", goroutineLabels(t), map[string]string{})
	}()
	wg.Wait()
}

// TestEndOnAnotherGoroutine pins down the documented behaviour: the ending
// goroutine gets the parent's labels, the starting one keeps the span's.
func TestEndOnAnotherGoroutine(t *testing.T) {
	tr := newTracer(t)
	base := pprof.WithLabels(context.Background(), pprof.Labels("tenant", "a"))
	_, s := tr.Start(base, "op")
	done := make(chan map[string]string)
	go func() {
		pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("worker", "1")))
		s.End()
		done <- goroutineLabels(t)
	}()
	wantLabels(t, "ending goroutine", <-done, map[string]string{"tenant": "a"})
	wantLabels(t, "starting goroutine", goroutineLabels(t), with(ids(s), "tenant", "a"))
	pprof.SetGoroutineLabels(context.Background())
}

// TestConcurrent runs goroutines that start and end nested spans at once:
// each sees only its own.
func TestConcurrent(t *testing.T) {
	tr := newTracer(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				ctx, s := tr.Start(context.Background(), fmt.Sprintf("g%d-%d", g, i))
				wantLabels(t, "own span", goroutineLabels(t), ids(s))
				_, c := tr.Start(ctx, "child")
				wantLabels(t, "own child", goroutineLabels(t), ids(c))
				c.End()
				wantLabels(t, "own span after child", goroutineLabels(t), ids(s))
				s.End()
				wantLabels(t, "after", goroutineLabels(t), map[string]string{})
			}
		}()
	}
	wg.Wait()
}

var sink uint64

//go:noinline
func burnInSpan(d time.Duration) { burn(d) }

//go:noinline
func burnAfter(d time.Duration) { burn(d) }

func burn(d time.Duration) {
	x := uint64(1)
	for end := time.Now().Add(d); time.Now().Before(end); {
		for range 4096 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	sink += x
}

// TestCPUProfile checks the labels as Go's own sampling profiler records
// them: the samples of a function burning in a span carry its ids, those
// after End none.
func TestCPUProfile(t *testing.T) {
	if testing.Short() {
		t.Skip("burns 0.6 s of CPU")
	}
	tr := newTracer(t)
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		t.Skipf("a CPU profile is already running: %v", err)
	}
	_, s := tr.Start(context.Background(), "op")
	burnInSpan(300 * time.Millisecond)
	s.End()
	burnAfter(300 * time.Millisecond)
	pprof.StopCPUProfile()
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, smp := range p.Sample {
		fn := ""
		for _, loc := range smp.Location {
			for _, l := range loc.Line {
				if n := l.Function.Name; strings.HasSuffix(n, ".burnInSpan") || strings.HasSuffix(n, ".burnAfter") {
					fn = n[strings.LastIndexByte(n, '.')+1:]
				}
			}
		}
		if fn == "" {
			continue
		}
		got := map[string]string{}
		for k, v := range smp.Label {
			got[k] = v[0]
		}
		want := map[string]string{}
		if fn == "burnInSpan" {
			want = ids(s)
		}
		if !maps.Equal(got, want) {
			t.Errorf("a sample in %s has labels %v, want %v", fn, got, want)
		}
		counts[fn] += int(smp.Value[0])
	}
	t.Logf("samples: %v", counts)
	// 100 Hz for 0.3 s each; a loaded machine gives fewer.
	if counts["burnInSpan"] < 5 || counts["burnAfter"] < 5 {
		t.Errorf("too few samples to judge: %v", counts)
	}
}

// BenchmarkStartEnd compares a span's Start and End through the SDK alone
// and through the wrapper (recording and sampled spans, no processor), at
// the root and as a child.
func BenchmarkStartEnd(b *testing.B) {
	sdk := newSDK()
	defer sdk.Shutdown(context.Background())
	for _, p := range []struct {
		name string
		tp   trace.TracerProvider
	}{{"sdk", sdk}, {"spanlabels", spanlabels.NewTracerProvider(sdk)}} {
		tr := p.tp.Tracer("bench")
		b.Run(p.name+"/root", func(b *testing.B) {
			b.ReportAllocs()
			ctx := context.Background()
			for b.Loop() {
				_, s := tr.Start(ctx, "op")
				s.End()
			}
		})
		b.Run(p.name+"/child", func(b *testing.B) {
			b.ReportAllocs()
			ctx, parent := tr.Start(context.Background(), "parent")
			defer parent.End()
			for b.Loop() {
				_, s := tr.Start(ctx, "op")
				s.End()
			}
		})
	}
}
