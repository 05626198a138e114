package profiler

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/perfprof/perfprof/internal/bpf"
	"github.com/perfprof/perfprof/internal/goruntime"
	"github.com/perfprof/perfprof/internal/otelctx"
)

// EBPFMode says whether eBPF programs run on the sampling events: they read
// the span a thread runs at each sample, and drop the samples of other
// processes, so that targets are sampled by per-CPU events (which, unlike
// per-thread ones, are not switched in and out with their thread).
type EBPFMode uint8

const (
	// EBPFAuto loads the programs when the kernel and the privileges
	// allow, and says why not otherwise: samples are then joined by
	// thread and time, and ScopeProcess opens per-thread events.
	EBPFAuto EBPFMode = iota
	// EBPFRequired fails Open when the programs cannot be loaded.
	EBPFRequired
	// EBPFOff joins by thread and time only.
	EBPFOff
)

// The programs do not wake readers (a wake-up cost 1 µs a sample), and
// records wait for the report that joins them anyway (it drains the ring
// first), so the reader only keeps the ring from filling: it looks at the
// fill (an atomic load), drains it when a quarter full (spanReaderDrainAt),
// and looks again when, at the rate it filled since the last look, it
// would reach that: between spanReaderPollMin and spanReaderPollMax.
// Draining every 100 ms cost the collector ~7 ms of CPU a second, its
// wake-ups alone ~3 ms. The ring (spanReaderRing) holds 18 700 records:
// 9 s of 999 Hz on 2 CPUs, 0.37 s of a target switching 50 000 times a
// second (its switch-outs are read too).
const (
	spanReaderPollMin = 100 * time.Millisecond
	spanReaderPollMax = time.Second
	spanReaderRing    = 1 << 20
	spanReaderDrainAt = spanReaderRing / 4
)

// nextPoll returns when to look at the ring again, given that it held
// prev bytes d ago and holds now bytes.
func nextPoll(prev, now int, d time.Duration) time.Duration {
	if now < prev || d <= 0 {
		return spanReaderPollMin // drained since: no rate
	}
	if now == prev {
		return spanReaderPollMax
	}
	left := spanReaderDrainAt - now
	if left <= 0 {
		return spanReaderPollMin
	}
	next := time.Duration(float64(d) * float64(left) / float64(now-prev))
	return min(max(next, spanReaderPollMin), spanReaderPollMax)
}

// spanReader is Contexts over the spanctx eBPF programs: the span a Go
// target's running goroutine carries in its pprof labels, or the one a
// native target's thread publishes in its OTEP 4947 context record.
type spanReader struct {
	prog *bpf.Program
	log  *zap.Logger
	stop chan struct{}
	once sync.Once

	mu sync.Mutex
	// labelled holds the processes that showed a span (a goroutine
	// with a span label, a thread with a context record): in them, a
	// goroutine or thread without one ran no span.
	labelled map[uint32]bool
	// targets holds the processes the programs read, by source.
	targets map[uint32]LinkSource
	last    bpf.Stats         // the programs' counters when last read
	deliver func(*bpf.Record) // set by Read, for flush
}

// loadEBPF loads the programs per mode. It returns nil and the reason when
// they cannot be used; with EBPFRequired the caller fails on it.
func loadEBPF(opts Options) (*spanReader, error) {
	prog, err := bpf.Load(bpf.Options{SpanKey: opts.SpanLabelKey, TraceKey: opts.TraceLabelKey, RingBytes: spanReaderRing, DropOthers: true})
	if err != nil {
		return nil, fmt.Errorf("load the eBPF programs that read the running span: %w", err)
	}
	return &spanReader{prog: prog, log: opts.Logger, stop: make(chan struct{}), labelled: map[uint32]bool{}, targets: map[uint32]LinkSource{}}, nil
}

// Attach reads the span pid's threads run: from the labels of its
// goroutines if it is a Go program whose runtime layout is known, else
// from its threads' OTEP 4947 context records if an object it has loaded
// defines otel_thread_ctx_v1. Attaching a process again (its process
// context announced thread contexts since) looks for the variable again.
func (g *spanReader) Attach(pid int) error {
	g.mu.Lock()
	_, done := g.targets[uint32(pid)]
	g.mu.Unlock()
	if done {
		return nil
	}
	// First keep its samples: the sampling events are per CPU and drop
	// those of processes that are not targets.
	if err := g.prog.AddPlainTarget(pid); err != nil {
		return fmt.Errorf("%w: %v", errNotKept, err)
	}
	l, err := goruntime.ReadFile(fmt.Sprintf("/proc/%d/exe", pid))
	if err == nil {
		if l.Labels == goruntime.LabelsMap {
			return fmt.Errorf("%s keeps pprof labels in a map, which is not read (Go 1.24 and later keep a list)", l.GoVersion)
		}
		if err := g.prog.AddTarget(pid, l); err != nil {
			return err
		}
		g.added(pid, SourceGoLabels)
		return nil
	}
	if !errors.Is(err, goruntime.ErrNotGo) {
		return err
	}
	v, terr := otelctx.LocateTLS(pid)
	if terr != nil {
		return fmt.Errorf("neither Go (%v) nor a publisher of OpenTelemetry thread contexts: %w", err, terr)
	}
	if err := g.prog.AddThreadContextTarget(pid, v); err != nil {
		return err
	}
	g.added(pid, SourceThreadContext)
	g.log.Info("Reading the span each thread runs from its OpenTelemetry thread context (OTEP 4947)",
		zap.Int("pid", pid), zap.String("object", v.Object), zap.Stringer("tls_model", v.Model))
	return nil
}

func (g *spanReader) added(pid int, src LinkSource) {
	g.mu.Lock()
	g.targets[uint32(pid)] = src
	g.mu.Unlock()
}

func (g *spanReader) Detach(pid int) {
	_ = g.prog.RemoveTarget(pid)
	g.mu.Lock()
	delete(g.labelled, uint32(pid))
	delete(g.targets, uint32(pid))
	g.mu.Unlock()
}

// Read drains the programs' records until Close. A record that found no g
// on the thread, could not read one, or found the thread's record being
// written says nothing of the span: its sample is joined by thread and
// time. So does a goroutine (thread) without a span, or a Go thread
// between goroutines, in a process that never showed a span: it does not
// label its goroutines with spans (it may lock spans to threads instead);
// once it has, they ran no span.
func (g *spanReader) Read(fn func(SpanContext)) error {
	t := time.NewTimer(spanReaderPollMin)
	defer t.Stop()
	deliver := func(r *bpf.Record) {
		if r.Flags&(bpf.FlagFault|bpf.FlagNotValid) != 0 {
			return
		}
		// A Go thread between goroutines runs no span; one with no g
		// at all may be a thread of C code (cgo), whose spans only the
		// thread join knows.
		if r.Flags&bpf.FlagNoGoroutine != 0 && r.Flags&bpf.FlagIdle == 0 {
			return
		}
		sc := SpanContext{Pid: r.Pid, Tid: r.Tid, Time: r.Time, Source: SourceGoLabels, Switch: r.Flags&bpf.FlagSwitch != 0}
		if r.Flags&bpf.FlagThreadContext != 0 {
			sc.Source = SourceThreadContext
		}
		g.mu.Lock()
		if r.HasSpan() {
			g.labelled[r.Pid] = true
		}
		labelled := g.labelled[r.Pid]
		g.mu.Unlock()
		if r.HasSpan() {
			sc.SpanID = r.SpanID
			if r.HasTrace() {
				sc.TraceID = r.TraceID
			}
		} else if !labelled {
			return
		}
		fn(sc)
	}
	g.mu.Lock()
	g.deliver = deliver
	g.mu.Unlock()
	prev, prevAt := 0, time.Now()
	for {
		select {
		case <-g.stop:
			_, err := g.prog.Drain(deliver)
			return err
		case <-t.C:
		}
		n, now := g.prog.Buffered(), time.Now()
		if n >= spanReaderDrainAt {
			if _, err := g.prog.Drain(deliver); err != nil {
				return err
			}
			n = 0
		}
		t.Reset(nextPoll(prev, n, now.Sub(prevAt)))
		prev, prevAt = n, now
	}
}

// flush drains the records read so far, for a report about to join.
func (g *spanReader) flush() {
	g.mu.Lock()
	deliver := g.deliver
	g.mu.Unlock()
	if deliver != nil {
		_, _ = g.prog.Drain(deliver)
	}
}

// Close stops Read after a last drain and unloads the program.
func (g *spanReader) Close() error {
	g.once.Do(func() { close(g.stop) })
	return nil
}

// release unloads the programs, after Read returned; their counters as
// they ended stay for stats.
func (g *spanReader) release() error {
	g.stats()
	return g.prog.Close()
}

// stats returns the programs' counters; once they are unloaded, the last
// ones read.
func (g *spanReader) stats() bpf.Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s, err := g.prog.Stats(); err == nil {
		g.last = s
	}
	return g.last
}

// errNotKept says the programs cannot keep a process's samples (their
// target map is full): with per-CPU events it cannot be sampled.
var errNotKept = errors.New("the eBPF programs cannot keep its samples")

// errEBPFOff says the programs were not asked for.
var errEBPFOff = errors.New("ebpf: off")
