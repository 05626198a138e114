package profiler

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/perfprof/perfprof/internal/bpf"
	"github.com/perfprof/perfprof/internal/goruntime"
)

// EBPFMode says whether the span a thread runs is read at each sample by
// an eBPF program on the sampling events.
type EBPFMode uint8

const (
	// EBPFAuto loads the programs when the kernel and the privileges
	// allow, and says why not otherwise: samples are then joined by
	// thread and time.
	EBPFAuto EBPFMode = iota
	// EBPFRequired fails Open when the programs cannot be loaded.
	EBPFRequired
	// EBPFOff joins by thread and time only.
	EBPFOff
)

// goLabelsPoll is how often the records of the golabels program are
// drained: the program does not wake readers (waking cost 1 µs a sample),
// and a report drains what is left before it joins. At 20 ms the wake-ups
// alone cost the collector ~7 ms of CPU a second; at 100 ms the ring
// (goLabelsRing) holds 2 s of 10 000 samples a second.
const (
	goLabelsPoll = 100 * time.Millisecond
	goLabelsRing = 1 << 20 // 20 000 records
)

// goLabels is Contexts over the golabels eBPF program: the span a Go
// target's running goroutine carries in its pprof labels.
type goLabels struct {
	prog *bpf.Program
	log  *zap.Logger
	stop chan struct{}
	once sync.Once

	mu sync.Mutex
	// labelled holds the processes that showed a goroutine with a span
	// label: in them, a goroutine without one ran no span.
	labelled map[uint32]bool
	deliver  func(*bpf.Record) // set by Read, for flush
}

// loadEBPF loads the programs per mode. It returns nil and the reason when
// they cannot be used; with EBPFRequired the caller fails on it.
func loadEBPF(opts Options) (*goLabels, error) {
	prog, err := bpf.Load(bpf.Options{SpanKey: opts.SpanLabelKey, TraceKey: opts.TraceLabelKey, RingBytes: goLabelsRing})
	if err != nil {
		return nil, fmt.Errorf("load the eBPF program that reads goroutine labels: %w", err)
	}
	return &goLabels{prog: prog, log: opts.Logger, stop: make(chan struct{}), labelled: map[uint32]bool{}}, nil
}

// Attach reads the labels of pid's goroutines, if pid is a Go program whose
// runtime layout is known.
func (g *goLabels) Attach(pid int) error {
	l, err := goruntime.ReadFile(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return err
	}
	if l.Labels == goruntime.LabelsMap {
		return fmt.Errorf("%s keeps pprof labels in a map, which is not read (Go 1.24 and later keep a list)", l.GoVersion)
	}
	return g.prog.AddTarget(pid, l)
}

func (g *goLabels) Detach(pid int) {
	_ = g.prog.RemoveTarget(pid)
	g.mu.Lock()
	delete(g.labelled, uint32(pid))
	g.mu.Unlock()
}

// Read drains the program's records until Close. A record that found no
// goroutine, or could not read one, says nothing of the span: its sample
// is joined by thread and time. So does a goroutine without a span label
// in a process that never showed one: it does not label its goroutines
// with spans (it may lock spans to threads instead); once it has, a
// goroutine without one ran no span.
func (g *goLabels) Read(fn func(SpanContext)) error {
	t := time.NewTicker(goLabelsPoll)
	defer t.Stop()
	deliver := func(r *bpf.Record) {
		if r.Flags&(bpf.FlagNoGoroutine|bpf.FlagFault) != 0 {
			return
		}
		sc := SpanContext{Pid: r.Pid, Tid: r.Tid, Time: r.Time, Source: SourceGoLabels}
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
	for {
		if _, err := g.prog.Drain(deliver); err != nil {
			return err
		}
		select {
		case <-g.stop:
			_, err := g.prog.Drain(deliver)
			return err
		case <-t.C:
		}
	}
}

// flush drains the records read so far, for a report about to join.
func (g *goLabels) flush() {
	g.mu.Lock()
	deliver := g.deliver
	g.mu.Unlock()
	if deliver != nil {
		_, _ = g.prog.Drain(deliver)
	}
}

// Close stops Read after a last drain and unloads the program.
func (g *goLabels) Close() error {
	g.once.Do(func() { close(g.stop) })
	return nil
}

// release unloads the program, after Read returned.
func (g *goLabels) release() error { return g.prog.Close() }

// stats returns the program's counters.
func (g *goLabels) stats() (bpf.Stats, error) { return g.prog.Stats() }

// errEBPFOff says the programs were not asked for.
var errEBPFOff = errors.New("ebpf: off")
