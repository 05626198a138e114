package profiler

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/perfprof/perfprof/internal/bpf"
	"github.com/perfprof/perfprof/internal/goruntime"
	"github.com/perfprof/perfprof/internal/otelctx"
	"github.com/perfprof/perfprof/internal/perf"
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
// wake-ups alone ~3 ms.
//
// The ring's kernel memory is mapped twice into the collector (the
// ring buffer's data pages are, so that records never wrap), and all of
// it counts in its RSS: rings are sized for what they must hold. The
// records ring (spanRingBytes) holds 2 s of records at the sampling rate
// of every CPU, at least 256 KiB (4 000 records); a thread-context
// target's records, with the context's attributes, are three times as
// long, and the reader, polling at their fill rate, drains them as soon;
// where context switches
// write records too (perf's switch events, when the scheduler program
// cannot run) it is 1 MiB, 16 000 records. The scheduler program writes a
// group of off-CPU time (864 bytes, most of it the stacks) only when a
// thread's off-CPU time crosses off_cpu_interval, at its switch-in: its
// ring (schedReaderRing) holds 1 200, 12 000 a second at the shortest
// poll.
const (
	spanReaderPollMin = 100 * time.Millisecond
	spanReaderPollMax = time.Second
	schedReaderRing   = 1 << 20
	spanRecordBytes   = 64 // bpf.Record and the ring's header
)

// spanRingBytes sizes the records ring (see above) for sampling at
// frequency Hz on cpus CPUs, with a record at every context switch or not.
func spanRingBytes(frequency, cpus int, switches bool) int {
	const least, most = 256 << 10, 8 << 20
	n := least
	if switches {
		n = 1 << 20
	}
	for n < 2*frequency*cpus*spanRecordBytes && n < most {
		n *= 2
	}
	return n
}

// nextPoll returns when to look at a ring again, given that it held prev
// bytes d ago and holds now bytes, and is drained from drainAt bytes.
func nextPoll(prev, now int, d time.Duration, drainAt int) time.Duration {
	if now < prev || d <= 0 {
		return spanReaderPollMin // drained since: no rate
	}
	if now == prev {
		return spanReaderPollMax
	}
	left := drainAt - now
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
	prog      *bpf.Program
	ringBytes int // of the records ring, drained when a quarter full
	log       *zap.Logger
	stop      chan struct{}
	once      sync.Once

	mu sync.Mutex
	// labelled holds the processes that showed a span (a goroutine
	// with a span label, a thread with a context record): in them, a
	// goroutine or thread without one ran no span.
	labelled map[uint32]bool
	// targets holds the processes the programs read, by source.
	targets map[uint32]LinkSource
	last    bpf.Stats         // the programs' counters when last read
	deliver func(*bpf.Record) // set by Read, for flush

	// sched is set when the scheduler program runs (schedErr says why
	// not, when it was asked for): onSched takes its groups.
	sched    bool
	schedErr error
	onSched  func(*bpf.SchedRecord)

	attrs internTable // of the records' attrs-data
}

// loadEBPF loads the programs per mode. It returns nil and the reason when
// they cannot be used; with EBPFRequired the caller fails on it. With
// Perf.Sched it loads and attaches the scheduler program too; when that
// fails, the others are loaded alone and schedErr says why.
func loadEBPF(opts Options) (*spanReader, error) {
	cpus := runtime.NumCPU()
	bo := bpf.Options{SpanKey: opts.SpanLabelKey, TraceKey: opts.TraceLabelKey, DropOthers: true, RunStats: opts.EBPFRunStats,
		RingBytes: spanRingBytes(int(opts.Perf.Frequency), cpus, false)}
	var prog *bpf.Program
	var schedErr error
	if opts.Perf.Sched {
		so := bo
		so.SchedInterval, so.SchedRingBytes = opts.OffCPUInterval, schedReaderRing
		so.MinBlock, so.CaptureGap, so.CaptureEvery, so.MaxRate = opts.SchedMinBlock, opts.SchedCaptureGap, opts.SchedCaptureEvery, opts.SchedMaxRate
		so.KernelStacks = opts.Perf.KernelStacks
		p, err := bpf.Load(so)
		if err == nil {
			if err = p.AttachSched(); err != nil {
				p.Close()
			}
		}
		if err == nil {
			prog = p
		} else {
			schedErr = fmt.Errorf("load the eBPF scheduler program: %w", err)
		}
	}
	if prog == nil {
		// Without the scheduler program, perf's switch events run the
		// programs too, and write a record at every switch.
		bo.RingBytes = spanRingBytes(int(opts.Perf.Frequency), cpus, opts.Perf.Sched)
		p, err := bpf.Load(bo)
		if err != nil {
			return nil, fmt.Errorf("load the eBPF programs that read the running span: %w", err)
		}
		prog = p
	}
	return &spanReader{prog: prog, ringBytes: bo.RingBytes, log: opts.Logger, stop: make(chan struct{}), labelled: map[uint32]bool{}, targets: map[uint32]LinkSource{},
		sched: opts.Perf.Sched && schedErr == nil, schedErr: schedErr}, nil
}

// Attach reads the span pid's threads run: from the labels of its
// goroutines if it is a Go program whose runtime layout is known; from
// the thread context of its JavaScript if its process context names a
// Node.js schema (schema); else from its threads' OTEP 4947 context
// records if an object it has loaded defines otel_thread_ctx_v1.
// Attaching a process again (its process context announced thread
// contexts since) looks for the variable again.
func (g *spanReader) Attach(pid int, schema string) error {
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
		// A Go binary whose runtime types are forged (a typedef naming
		// itself, a chain too deep to read) is a bound reached: the
		// caller counts it, with every error of Attach.
		return err
	}
	if schema == otelctx.SchemaNodeDev || schema == otelctx.SchemaNode {
		v, terr := otelctx.LocateTLSSymbol(pid, otelctx.NodeTLSSymbol)
		if terr != nil {
			return fmt.Errorf("its process context names schema %s, but no object it has loaded defines %s: %w", schema, otelctx.NodeTLSSymbol, terr)
		}
		if err := g.prog.AddNodeTarget(pid, v); err != nil {
			return err
		}
		g.added(pid, SourceThreadContext)
		g.log.Info("Reading the span each thread runs from its Node.js thread context (schema "+schema+")",
			zap.Int("pid", pid), zap.String("object", v.Object), zap.Stringer("tls_model", v.Model))
		return nil
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

// Read drains the programs' records until Close: a context per record that
// tells the span its thread ran (spanRead) or the CPU time its sample
// stands for; the samples of the others are joined by thread and time.
func (g *spanReader) Read(fn func(SpanContext)) error {
	t := time.NewTimer(spanReaderPollMin)
	defer t.Stop()
	deliver := func(r *bpf.Record) {
		sc := SpanContext{Pid: r.Pid, Tid: r.Tid, Time: r.Time, Source: SourceGoLabels, Switch: r.Flags&bpf.FlagSwitch != 0, CPUOnly: !g.spanRead(r)}
		if r.Flags&bpf.FlagCPUDelta != 0 {
			sc.CPUDelta = r.CPUDelta
		}
		if sc.CPUOnly && sc.CPUDelta == 0 {
			return
		}
		if r.Flags&bpf.FlagThreadContext != 0 {
			sc.Source = SourceThreadContext
		}
		if !sc.CPUOnly && r.HasSpan() {
			sc.SpanID = r.SpanID
			if r.HasTrace() {
				sc.TraceID = r.TraceID
			}
		}
		if !sc.CPUOnly && r.Flags&bpf.FlagAttrs != 0 {
			sc.Attrs, sc.AttrsCut = g.attrs.intern(r.Attrs.Bytes()), r.Attrs.Truncated()
		}
		fn(sc)
	}
	g.mu.Lock()
	g.deliver = deliver
	g.mu.Unlock()
	prev, sprev, prevAt := 0, 0, time.Now()
	for {
		select {
		case <-g.stop:
			return g.drain(deliver)
		case <-t.C:
		}
		n, now := g.prog.Buffered(), time.Now()
		if n >= g.ringBytes/4 {
			if _, err := g.prog.Drain(deliver); err != nil {
				return err
			}
			n = 0
		}
		next := nextPoll(prev, n, now.Sub(prevAt), g.ringBytes/4)
		if g.sched {
			sn := g.prog.SchedBuffered()
			if sn >= schedReaderRing/4 {
				if err := g.drainSched(deliver); err != nil {
					return err
				}
				sn = 0
			}
			next = min(next, nextPoll(sprev, sn, now.Sub(prevAt), schedReaderRing/4))
			sprev = sn
		}
		t.Reset(next)
		prev, prevAt = n, now
	}
}

// spanRead says whether r tells the span its thread ran. A record that
// found no g on the thread, could not read one, or found the thread's
// record being written does not; nor a Go thread with no g at all, which
// may be a thread of C code (cgo), whose spans only the thread join knows
// (a Go thread between goroutines runs no span). Nor does a goroutine or
// thread without a span in a process that never showed one: it does not
// label its goroutines with spans (it may lock spans to threads instead);
// once it has, they ran no span.
func (g *spanReader) spanRead(r *bpf.Record) bool {
	if r.Flags&(bpf.FlagFault|bpf.FlagNotValid|bpf.FlagNoRead) != 0 {
		return false
	}
	if r.Flags&bpf.FlagNoGoroutine != 0 && r.Flags&bpf.FlagIdle == 0 {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if r.HasSpan() {
		g.labelled[r.Pid] = true
	}
	return g.labelled[r.Pid]
}

// drain drains both rings: the span records first, so that the contexts
// of the switch-outs the groups name are in before them.
func (g *spanReader) drain(deliver func(*bpf.Record)) error {
	if _, err := g.prog.Drain(deliver); err != nil {
		return err
	}
	if g.sched {
		return g.drainSched(deliver)
	}
	return nil
}

// drainSched passes the scheduler program's groups to onSched, and the
// span read at each one's switch-out, when it was captured, to deliver, as
// the context of the switch-out's off-CPU sample.
func (g *spanReader) drainSched(deliver func(*bpf.Record)) error {
	g.mu.Lock()
	on := g.onSched
	g.mu.Unlock()
	var rec bpf.Record
	_, err := g.prog.DrainSched(func(r *bpf.SchedRecord) {
		if on != nil {
			on(r)
		}
		if r.Captured() {
			rec = bpf.Record{Time: offCPUTime(r), Pid: r.Pid, Tid: r.Tid, Flags: r.Flags | bpf.FlagSwitch, SpanID: r.SpanID, TraceID: r.TraceID, Attrs: r.Attrs}
			deliver(&rec)
		}
	})
	return err
}

// offCPUTime is the time of the off-CPU sample of a group: the switch-out
// that began the off period that completed it, where the span that blocked
// is looked up (within the group, always, but for a clock gone wrong).
func offCPUTime(r *bpf.SchedRecord) uint64 {
	if r.OutTime != 0 && r.OutTime <= r.End {
		return r.OutTime
	}
	return r.Begin
}

// flush drains the records read so far, for a report about to join.
func (g *spanReader) flush() {
	g.mu.Lock()
	deliver := g.deliver
	g.mu.Unlock()
	if deliver != nil {
		_ = g.drain(deliver)
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

// strings interns the attrs-data of thread context records: the samples
// of one span, hundreds a second, carry the same bytes, and a context
// kept for its join then holds a shared string, not a copy of its own.
type internTable struct {
	mu sync.Mutex
	m  map[string]string
}

// internMax bounds the strings kept: past it the table starts over (a
// process writing a new value per request, an id, gains nothing from it).
const internMax = 4096

func (s *internTable) intern(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.m[string(b)]; ok {
		return v
	}
	if s.m == nil || len(s.m) >= internMax {
		s.m = make(map[string]string)
	}
	v := string(b)
	s.m[v] = v
	return v
}

// errNotKept says the programs cannot keep a process's samples (their
// target map is full): with per-CPU events it cannot be sampled.
var errNotKept = errors.New("the eBPF programs cannot keep its samples")

// errEBPFOff says the programs were not asked for.
var errEBPFOff = errors.New("ebpf: off")

// addSchedGroup buffers the off-CPU sample of a group the scheduler
// program wrote. Its stack is the user stack of the switch-out captured
// last; when that is not the switch-out that began the off period
// (bpf.Options.CaptureGap), the stack is an earlier one of the thread and
// no span was read for it: the join goes by thread and time.
func (e *engine) addSchedGroup(r *bpf.SchedRecord) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.live[int(r.Pid)]
	if st == nil {
		st = e.lastGone(int(r.Pid))
	}
	if st == nil {
		e.tel.Add(cOffCPUUnattach, 1)
		return
	}
	e.seeThread(st, r.Tid)
	t := offCPUTime(r)
	stack := int32(-1)
	if len(r.Stack) > 0 || len(r.KernelStack) > 0 {
		// As perf writes a callchain: the kernel's frames, then the user's.
		chain := e.chain[:0]
		if len(r.KernelStack) > 0 {
			chain = append(chain, perf.ContextKernel)
			chain = append(chain, r.KernelStack...)
		}
		if len(r.Stack) > 0 {
			chain = append(chain, perf.ContextUser)
			chain = append(chain, r.Stack...)
		}
		e.chain = chain
		stack = st.batch.intern(chain, 0, st.genAt(r.CaptureTime))
	}
	st.batch.samples = append(st.batch.samples, rawSample{
		time:   t,
		weight: r.Count * uint64(e.opts.OffCPUInterval),
		tid:    r.Tid,
		stack:  stack,
		state:  uint8(r.State),
	})
	e.buffered++
	if r.Captured() {
		e.tel.Add(cOffCPU, 1)
	} else {
		e.tel.Add(cOffCPUEarlier, 1)
	}
}
