package profiler

import (
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/sched"
)

// reorderDelay is how long context-switch records wait before they are
// accounted. Rings are read one CPU at a time, so the records of a thread
// that moved between CPUs arrive out of time order; the read loop drains
// every ring at least every readWake, so records older than this are
// complete.
const reorderDelay = 500_000_000 // ns

// Kinds of schedEvent.
const (
	evSample = iota // an on-CPU sample: accounts on-CPU time, gets its CPU delta
	evStack         // the switch-out sample: where the thread left the CPU
	evOut           // a switch-out record
	evIn            // a switch-in record
	evExit          // the thread exited
)

// schedEvent is one record of the context-switch stream, in the reorder
// queue.
type schedEvent struct {
	time    uint64
	st      *procState
	tid     uint32
	kind    uint8
	preempt bool
	b       *batch // evSample: batch holding the sample; evStack: batch holding the stack
	idx     int32  // evSample: index into b.samples; evStack: index into b.stacks
}

// schedQueue is a min-heap of events by time. The heap itself holds only
// (time, slot) pairs, free of pointers, so that sifting writes no GC
// barriers and moves 16 bytes; the events stay put in their slots. It is
// typed rather than a container/heap, whose interface boxing would allocate
// per record.
type schedQueue struct {
	heap  []queued
	slots []schedEvent
	free  []uint32
}

type queued struct {
	time uint64
	slot uint32
}

func (q *schedQueue) len() int { return len(q.heap) }

// next returns the time of the earliest event; the queue must not be empty.
func (q *schedQueue) next() uint64 { return q.heap[0].time }

func (q *schedQueue) push(e schedEvent) {
	var slot uint32
	if n := len(q.free); n > 0 {
		slot = q.free[n-1]
		q.free = q.free[:n-1]
		q.slots[slot] = e
	} else {
		slot = uint32(len(q.slots))
		q.slots = append(q.slots, e)
	}
	q.heap = append(q.heap, queued{e.time, slot})
	h := q.heap
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if h[p].time <= h[i].time {
			break
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
}

func (q *schedQueue) pop() schedEvent {
	h := q.heap
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && h[l].time < h[m].time {
			m = l
		}
		if l+1 < n && h[l+1].time < h[m].time {
			m = l + 1
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	q.heap = h
	e := q.slots[top.slot]
	q.slots[top.slot] = schedEvent{} // drop the references
	q.free = append(q.free, top.slot)
	return e
}

// each calls fn for every queued event, in no order.
func (q *schedQueue) each(fn func(*schedEvent)) {
	for _, it := range q.heap {
		fn(&q.slots[it.slot])
	}
}

// offState is what the engine remembers of a thread's last switch-out: the
// record's time, and the switch-out sample's stack and time. The two belong
// together when their times are close; their order varies.
type offState struct {
	time      uint64
	stackTime uint64
	b         *batch
	idx       int32
}

// pairSlack is how far apart a switch-out record and its sample may be.
const pairSlack = 1_000_000 // ns

func (o offState) stack() (*batch, int32, bool) {
	if o.b == nil || o.time == 0 {
		return nil, 0, false
	}
	d := o.time - o.stackTime
	if o.stackTime > o.time {
		d = o.stackTime - o.time
	}
	return o.b, o.idx, d <= pairSlack
}

// schedState is the engine's context-switch accounting, guarded by
// engine.mu.
type schedState struct {
	tracker *sched.Tracker
	queue   schedQueue
	latest  uint64 // latest record time seen
	lastOut map[uint32]offState
}

func newSchedState(interval uint64) *schedState {
	return &schedState{tracker: sched.New(interval), lastOut: map[uint32]offState{}}
}

// queueSched adds an event and accounts every event older than the reorder
// delay.
func (e *engine) queueSched(ev schedEvent) {
	ss := e.sched
	ss.queue.push(ev)
	if ev.time > ss.latest {
		ss.latest = ev.time
	}
	if ss.latest > reorderDelay {
		e.drainSched(ss.latest - reorderDelay)
	}
}

// drainSched accounts the queued events older than before, in time order.
func (e *engine) drainSched(before uint64) {
	ss := e.sched
	for ss.queue.len() > 0 && ss.queue.next() < before {
		ev := ss.queue.pop()
		st := ev.st
		switch ev.kind {
		case evSample:
			if g, ok := ss.tracker.OnCPUSample(ev.tid, ev.time); ok {
				e.emitOffCPU(st, ev.tid, g)
			}
			delta := ss.tracker.TakeCPUDelta(ev.tid)
			if ev.b == st.batch && int(ev.idx) < len(st.batch.samples) {
				st.batch.samples[ev.idx].weight = delta
			}
		case evStack:
			o := ss.lastOut[ev.tid]
			o.b, o.idx, o.stackTime = ev.b, ev.idx, ev.time
			ss.lastOut[ev.tid] = o
		case evOut:
			ss.tracker.SwitchOut(ev.tid, ev.time, ev.preempt)
			o := ss.lastOut[ev.tid]
			o.time = ev.time
			ss.lastOut[ev.tid] = o
		case evIn:
			if g, ok := ss.tracker.SwitchIn(ev.tid, ev.time); ok {
				e.emitOffCPU(st, ev.tid, g)
			}
		case evExit:
			ss.tracker.Exit(ev.tid)
			delete(ss.lastOut, ev.tid)
		}
	}
}

// emitOffCPU buffers an off-CPU sample for a group of off-CPU time, with
// the stack of the thread's last switch-out. Its time is that switch-out,
// the start of the off period that completed the group: the moment the
// join looks up the span that blocked.
func (e *engine) emitOffCPU(st *procState, tid uint32, g sched.Group) {
	o := e.sched.lastOut[tid]
	t := g.Begin
	if o.time != 0 && o.time <= g.End {
		t = o.time
	}
	stack := int32(-1)
	if b, idx, ok := o.stack(); ok {
		if b == st.batch {
			stack = idx
		} else {
			// The batch was reported since: copy the stack over.
			stack = st.batch.internFrom(b, idx)
			o.b, o.idx = st.batch, stack
			e.sched.lastOut[tid] = o
		}
	}
	st.batch.samples = append(st.batch.samples, rawSample{
		time:   t,
		weight: g.Duration(e.sched.tracker.Interval()),
		tid:    tid,
		stack:  stack,
		state:  uint8(g.State),
	})
	e.buffered++
}

// handleSched queues the context-switch side of a record, after handle has
// buffered the record's sample, if any.
func (e *engine) handleSched(rec *perf.Record, st *procState) {
	switch rec.Type {
	case perf.RecordSample:
		s := &rec.Sample
		if s.Kind == perf.EventSwitch {
			idx := st.batch.intern(s.Callchain, 0, st.genAt(s.Time))
			e.queueSched(schedEvent{time: s.Time, st: st, tid: s.Tid, kind: evStack, b: st.batch, idx: idx})
			return
		}
		e.queueSched(schedEvent{time: s.Time, st: st, tid: s.Tid, kind: evSample, b: st.batch, idx: int32(len(st.batch.samples) - 1)})
	case perf.RecordSwitch, perf.RecordSwitchCPU:
		ev := schedEvent{time: rec.ID.Time, st: st, tid: rec.ID.Tid, kind: evIn}
		if rec.Misc&perf.MiscSwitchOut != 0 {
			ev.kind = evOut
			ev.preempt = rec.Misc&perf.MiscSwitchOutPreempt != 0
		}
		e.queueSched(ev)
	case perf.RecordExit:
		e.queueSched(schedEvent{time: rec.Task.Time, st: st, tid: rec.Task.Tid, kind: evExit})
	}
}

// rebase points the queued on-CPU sample events of a batch that a report
// split at the kept samples' new places.
func (ss *schedState) rebase(old, keep *batch, moved map[int32]int32) {
	ss.queue.each(func(ev *schedEvent) {
		if ev.kind == evSample && ev.b == old {
			if j, ok := moved[ev.idx]; ok {
				ev.b, ev.idx = keep, j
			}
		}
	})
}
