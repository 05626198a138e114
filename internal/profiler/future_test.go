package profiler_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/limits"
	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/internal/profiler/profilertest"
)

// TestFutureSpansDoNotPinTheIndex: spans that end an hour from now, as a
// client with a broken clock or a hostile one sends them, are refused and
// counted. Indexed, they would hold every slot of MaxSpans until their
// end, and the one without a pid would be the span of every later sample
// of its thread.
func TestFutureSpansDoNotPinTheIndex(t *testing.T) {
	var logged []string
	rec := limits.NewRecorder(func(_ limits.Kind, subject string, _ error) { logged = append(logged, subject) })
	p, src, _ := open(t, func(o *profiler.Options) { o.Limits = rec })
	now := clock.Monotonic()
	const n = 100_000 // the default MaxSpans
	future := make([]profiler.Span, n)
	for i := range future {
		sp := span{tid: uint32(1000 + i%500), name: "future", start: 30 * s, worker: -1, resource: -1}.of(now)
		binary.LittleEndian.PutUint64(sp.SpanID[:], uint64(i)+1000) // not the ids below
		sp.End = unix(now + uint64(time.Hour))
		sp.Pid, sp.Service = uint32(app.Pid), "clock-ahead"
		future[i] = sp
	}
	// Without a pid, on the thread of the later samples.
	future[0].Tid, future[0].Pid, future[0].Service = 7, 0, ""
	if c := p.AddSpans(future); c.Future != n || c.Indexed != 0 {
		t.Errorf("far-future spans: %+v, want all %d refused as future", c, n)
	}
	// A span that ends within the clock skew the window absorbs is not
	// refused.
	skewed := span{tid: 9, id: 2, name: "skewed", start: 30 * s, worker: -1, resource: -1}.of(now)
	skewed.End = unix(now + uint64(10*time.Second))
	normal := span{tid: 8, id: 1, name: "normal", start: 30 * s, end: 20 * s, worker: -1, resource: -1}.of(now)
	if c := p.AddSpans([]profiler.Span{normal, skewed}); c.Indexed != 2 {
		t.Errorf("spans after the future ones: %+v, want both indexed", c)
	}
	src.Push(profilertest.Sample(app.Pid, 7, now-25*s, 0x401000), profilertest.Sample(app.Pid, 8, now-25*s, 0x401000))
	src.Sync()
	for _, sn := range p.Take(false) {
		for _, smp := range sn.Samples {
			if want := smp.Tid == 8; smp.Link.Linked != want {
				t.Errorf("sample of tid %d: linked %v (%x), want %v", smp.Tid, smp.Link.Linked, smp.Link.SpanID, want)
			}
		}
	}
	st := p.Stats()
	if st.Spans.Future != n || st.Limits[limits.SpanFuture] != n || st.SpansHeld != 1 {
		t.Errorf("stats: spans %+v, %d span_future bounds, %d held; want %d future, 1 held (the skewed span)", st.Spans, st.Limits[limits.SpanFuture], st.SpansHeld, n)
	}
	if len(logged) != 2 || logged[0] != "a sender naming neither service.name nor process.pid" || logged[1] != "clock-ahead" {
		t.Errorf("logged subjects %q; want the pid-less sender's and clock-ahead, once each", logged)
	}
}
