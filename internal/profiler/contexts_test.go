package profiler_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/internal/profiler/profilertest"
)

// TestJoinByContext links the samples that have a span context read at
// the sample by it, whatever spans are open on the thread, and joins the
// others by thread and time.
func TestJoinByContext(t *testing.T) {
	ctxs := newContexts()
	p, src, _ := open(t, func(o *profiler.Options) { o.Contexts = ctxs })
	if !ctxs.Attached(app.Pid) {
		t.Fatal("the contexts reader was not attached to the target")
	}
	now := clock.Monotonic()
	// Two requests of other traces open on thread 7 at once: the
	// (thread, time) join cannot tell them apart.
	a := span{tid: 7, id: 1, name: "GET /a", start: 30 * s, end: 10 * s, worker: -1, resource: -1}.of(now)
	b := span{tid: 7, id: 2, name: "GET /b", start: 25 * s, end: 15 * s, worker: -1, resource: -1}.of(now)
	b.TraceID = [16]byte{2}
	p.AddSpans([]profiler.Span{a, b})
	at := func(ago uint64) uint64 { return now - ago }
	samples := []uint64{22 * s, 21 * s, 20 * s, 19 * s, 12 * s}
	for _, ago := range samples {
		src.Push(profilertest.Sample(app.Pid, 7, at(ago), 0x401000))
	}
	src.Sync()
	ctxs.Push(
		// B ran at 22 s, read from the goroutine's labels, a few µs off.
		profiler.SpanContext{Pid: uint32(app.Pid), Tid: 7, Time: at(22*s) + 3_000, Source: profiler.SourceGoLabels, TraceID: b.TraceID, SpanID: b.SpanID},
		// At 21 s the goroutine ran no span.
		profiler.SpanContext{Pid: uint32(app.Pid), Tid: 7, Time: at(21 * s), Source: profiler.SourceGoLabels},
		// At 20 s a span that never arrives, with its trace id.
		profiler.SpanContext{Pid: uint32(app.Pid), Tid: 7, Time: at(20 * s), Source: profiler.SourceThreadContext, TraceID: [16]byte{3}, SpanID: [8]byte{9}},
		// At 19 s by span id alone: the trace id comes from the index.
		profiler.SpanContext{Pid: uint32(app.Pid), Tid: 7, Time: at(19 * s), Source: profiler.SourceGoLabels, SpanID: a.SpanID},
		// A context of another thread at 12 s does not apply to thread 7.
		profiler.SpanContext{Pid: uint32(app.Pid), Tid: 8, Time: at(12 * s), Source: profiler.SourceGoLabels, TraceID: b.TraceID, SpanID: b.SpanID},
	)
	ctxs.Sync()
	snaps := p.Take(false)
	type got struct {
		span   byte
		trace  byte
		root   string
		source profiler.LinkSource
	}
	var links []got
	for _, sn := range snaps {
		for _, smp := range sortedSamples(sn) {
			l := smp.Link
			links = append(links, got{l.SpanID[0], l.TraceID[0], l.Root, l.Source})
		}
	}
	want := []got{
		{2, 2, "GET /b", profiler.SourceGoLabels},
		{0, 0, "", profiler.SourceThread},
		{9, 3, "", profiler.SourceThreadContext},
		{1, 1, "GET /a", profiler.SourceGoLabels},
		{1, 1, "GET /a", profiler.SourceThread}, // only A is open at 12 s
	}
	if len(links) != len(want) {
		t.Fatalf("got %d samples, want %d", len(links), len(want))
	}
	for i := range want {
		if links[i] != want[i] {
			t.Errorf("sample %d: got %+v, want %+v", i, links[i], want[i])
		}
	}
	st := p.Stats().Joins
	if st.Span != 4 || st.NoSpan != 1 || st.Read[profiler.SourceGoLabels] != 2 || st.Read[profiler.SourceThreadContext] != 1 {
		t.Errorf("counts %+v", st)
	}
}

// TestContextsRefused: a process whose context cannot be read is joined by
// thread and time, and the profiler says so without failing.
func TestContextsRefused(t *testing.T) {
	ctxs := newContexts()
	ctxs.Refuse(app.Pid, errors.New("not a Go program"))
	p, src, _ := open(t, func(o *profiler.Options) { o.Contexts = ctxs })
	now := clock.Monotonic()
	p.AddSpans([]profiler.Span{span{tid: 7, id: 1, name: "GET /a", start: 30 * s, end: 10 * s, worker: -1, resource: -1}.of(now)})
	src.Push(profilertest.Sample(app.Pid, 7, now-20*s, 0x401000))
	src.Sync()
	snaps := p.Take(false)
	if len(snaps) != 1 || !snaps[0].Samples[0].Link.Linked || snaps[0].Samples[0].Link.Source != profiler.SourceThread {
		t.Fatalf("snapshots %+v", snaps)
	}
}

// scriptedContexts is a profiler.Contexts whose span contexts the test
// pushes, as an eBPF reader would deliver them.
type scriptedContexts struct {
	mu        sync.Mutex
	cond      *sync.Cond
	queue     []profiler.SpanContext
	delivered int
	pushed    int
	attached  map[int]bool
	refuse    map[int]error
	closed    bool
}

// newContexts returns an empty source of span contexts.
func newContexts() *scriptedContexts {
	c := &scriptedContexts{attached: map[int]bool{}, refuse: map[int]error{}}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// Refuse makes Attach of pid fail with err, as for a process whose
// context cannot be read.
func (c *scriptedContexts) Refuse(pid int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refuse[pid] = err
}

// Attached reports whether pid is attached.
func (c *scriptedContexts) Attached(pid int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.attached[pid]
}

// Push queues contexts for delivery.
func (c *scriptedContexts) Push(scs ...profiler.SpanContext) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queue = append(c.queue, scs...)
	c.pushed += len(scs)
	c.cond.Broadcast()
}

// Sync waits until every pushed context was delivered.
func (c *scriptedContexts) Sync() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.delivered < c.pushed && !c.closed {
		c.cond.Wait()
	}
}

func (c *scriptedContexts) Attach(pid int, _ string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.refuse[pid]; err != nil {
		return err
	}
	c.attached[pid] = true
	return nil
}

func (c *scriptedContexts) Detach(pid int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.attached, pid)
}

func (c *scriptedContexts) Read(fn func(profiler.SpanContext)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		for len(c.queue) > 0 {
			sc := c.queue[0]
			c.queue = c.queue[1:]
			c.mu.Unlock()
			fn(sc)
			c.mu.Lock()
			c.delivered++
			c.cond.Broadcast()
		}
		if c.closed {
			return nil
		}
		c.cond.Wait()
	}
}

func (c *scriptedContexts) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.cond.Broadcast()
	return nil
}
