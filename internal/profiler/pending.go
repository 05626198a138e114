package profiler

import (
	"slices"
	"unsafe"

	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/unwind"
)

// The pending queue. A process's unwinder exists only once the symbol
// worker has read its memory map and its binaries' unwind tables, a
// fraction of a second after the process is attached or execs (more with
// cold caches, or many processes at once). The samples taken before would
// keep the kernel's frame-pointer chain, which in code without frame
// pointers does not reach main: every new process would start with cut
// stacks. They are buffered as any sample, with the kernel's chain, and
// queued with copies of their stack and registers (the ring's memory is
// reused); once the tables are read they are unwound and their stack
// replaced, before their report:
//
//   - the symbol worker unwinds a process's queue as soon as it has stored
//     its unwinder (readTables);
//   - before a report, the symbol worker reads the tables of the processes
//     that mapped code since it last read them, and the report waits for
//     it (Profiler.catchUp, up to tablesWait), then unwinds what they
//     queued before it splits the samples off (unwindQueued): no queued
//     sample goes out with the kernel's chain while its tables are being
//     read, and the report itself reads none;
//   - an exec moves the samples the old image queued after it to the new
//     image (moveQueued), and settles the rest at once: the old image's
//     tables are no longer readable (/proc/PID/maps is the new image's).
//
// Samples whose tables cannot be read (the process exited or exec'd
// first, its memory map is unreadable) keep the kernel's chain, counted as
// UnwindStats.PendingUnread, and so do the samples that find the queue
// full (PendingOverflow). Queueing a sample costs the read loop a copy of
// its stack (4-7 µs for 16 KiB on the 2-CPU VM, page faults included:
// BenchmarkQueuePendingSample), only while a process's tables are being
// read. Unwinding a queued sample costs what it costs on the read loop
// and an interned stack (1-3 µs there: BenchmarkUnwindPendingSample); it
// runs under the engine's lock in chunks of pendingChunk, so that the
// read loop never waits for more than a chunk.

const (
	// DefaultMaxPendingUnwindBytes bounds the queue across processes
	// (Options.MaxPendingUnwindBytes): the stack copies of the samples
	// taken before their tables were read, and their bookkeeping. A
	// queued sample holds its stack from SP to the top of the stack, up
	// to Options.UnwindStackBytes: 10-11 KiB on average in the test
	// programs' threads (TestUnwindPendingAfterExec), 16 KiB at most by
	// default. A process's share, 8 MiB, holds 500-800 samples: half a
	// second or more of a process on two CPUs at 499 Hz, where a cold
	// read of libstdc++'s tables left 328 samples waiting; five seconds
	// of a process on one CPU at the receiver's 99 Hz. The memory is
	// held only until the tables are read.
	DefaultMaxPendingUnwindBytes = 32 << 20
	// pendingShare: one process holds at most 1/pendingShare of the
	// bound, so that a busy process leaves room for those attached with
	// it (discovery attaches every running target at once, and the
	// symbol worker reads their tables one after the other).
	pendingShare = 4
	// pendingChunk is how many queued samples are unwound per hold of
	// the engine's lock: 0.1-0.2 ms.
	pendingChunk = 64
)

// pendingSample is a buffered on-CPU sample waiting for its process's
// unwinder, with what unwinding it takes.
type pendingSample struct {
	// b holds the sample, at idx: the process's batch, until a report
	// splits it (pendingQueue.rebase).
	b     *batch
	idx   int32
	regs  unwind.Regs
	stack []byte // the sample's user stack, copied out of the ring
}

// pendingEntryBytes is what a queued sample holds besides its stack copy.
const pendingEntryBytes = int64(unsafe.Sizeof(pendingSample{}))

// pendingQueue is one process image's samples waiting for its unwinder,
// guarded by engine.mu.
type pendingQueue struct {
	samples []pendingSample
	bytes   int64 // stack copies and entries
	// unread: the image's tables could not be read, and never will: its
	// samples keep the kernel's chain without waiting.
	unread bool
}

// pendingRoom says whether a sample of st with a stack copy of n bytes may
// wait for st's unwinder, and counts why not. Called with mu held.
func (e *engine) pendingRoom(st *procState, n int) bool {
	c := &e.counts.unwind
	if st.pending.unread {
		c.PendingUnread++
		return false
	}
	cost := int64(n) + pendingEntryBytes
	bound := e.opts.MaxPendingUnwindBytes
	if e.pendingBytes+cost > bound || st.pending.bytes+cost > bound/pendingShare {
		c.PendingOverflow++
		return false
	}
	return true
}

// queuePending queues the sample s, which handle has just buffered in
// st.batch, after pendingRoom agreed. Called with mu held.
func (e *engine) queuePending(st *procState, s *perf.SampleRecord) {
	ip, _ := s.UserIP()
	sp, _ := s.UserSP()
	bp, _ := s.UserBP()
	q := &st.pending
	q.samples = append(q.samples, pendingSample{
		b:     st.batch,
		idx:   int32(len(st.batch.samples) - 1),
		regs:  unwind.Regs{IP: ip, SP: sp, BP: bp},
		stack: slices.Clone(s.StackUser),
	})
	cost := int64(len(s.StackUser)) + pendingEntryBytes
	q.bytes += cost
	e.pendingBytes += cost
	c := &e.counts.unwind
	c.PendingPeakBytes = max(c.PendingPeakBytes, e.pendingBytes)
}

// settle gives a queued sample of st its stack: unwound with u, or the
// kernel's chain it has when u is nil; and frees its bytes. The caller
// removes it from the queue. Called with mu held.
func (e *engine) settle(st *procState, p *pendingSample, u *unwind.Unwinder) {
	c := &e.counts.unwind
	cost := int64(len(p.stack)) + pendingEntryBytes
	st.pending.bytes -= cost
	e.pendingBytes -= cost
	// The sample is in st's batch, where its new stack is interned: a
	// report rebases the queue when it splits the batch.
	if u == nil || p.b != st.batch || int(p.idx) >= len(p.b.samples) {
		c.PendingUnread++
		return
	}
	b := p.b
	smp := &b.samples[p.idx]
	raw := b.stacks[smp.stack]
	chain, leaf := e.unw.Unwind(u, raw.chain, p.regs, p.stack)
	smp.stack = b.intern(chain, leaf, raw.gen)
	c.PendingUnwound++
}

// settleSome settles up to n queued samples of st, once its unwinder is
// stored or its tables are known unreadable, and reports whether more are
// queued. Called with mu held.
func (e *engine) settleSome(st *procState, n int) bool {
	q := &st.pending
	u := st.unwinder.Load()
	if len(q.samples) == 0 || (u == nil && !q.unread) {
		return false
	}
	k := len(q.samples) - min(n, len(q.samples))
	for i := k; i < len(q.samples); i++ {
		e.settle(st, &q.samples[i], u)
	}
	clear(q.samples[k:]) // the stack copies go now
	q.samples = q.samples[:k]
	if k == 0 {
		q.samples = nil
	}
	return k > 0
}

// settleBefore settles the queued samples of st taken before cut, which a
// report is about to split off: unwound if st's unwinder came since
// unwindQueued, else with the kernel's chain. Called with mu held.
func (e *engine) settleBefore(st *procState, cut uint64) {
	q := &st.pending
	u := st.unwinder.Load()
	kept := q.samples[:0]
	for i := range q.samples {
		p := &q.samples[i]
		if p.b == st.batch && int(p.idx) < len(p.b.samples) && p.b.samples[p.idx].time >= cut {
			kept = append(kept, *p)
			continue
		}
		e.settle(st, p, u)
	}
	clear(q.samples[len(kept):])
	q.samples = kept
	if len(kept) == 0 {
		q.samples = nil
	}
}

// rebase points the queued samples at their places in keep after a report
// split old (batch.takeBefore); those taken are settled already.
func (q *pendingQueue) rebase(old, keep *batch, moved map[int32]int32) {
	for i := range q.samples {
		p := &q.samples[i]
		if p.b != old {
			continue
		}
		if j, ok := moved[p.idx]; ok {
			p.b, p.idx = keep, j
		}
	}
}

// drainPending settles the queued samples of sts whose unwinders are
// stored or whose tables are unreadable, a chunk per hold of mu.
func (e *engine) drainPending(sts []*procState) {
	for _, st := range sts {
		for more := true; more; {
			e.mu.Lock()
			more = e.settleSome(st, pendingChunk)
			e.mu.Unlock()
		}
	}
}

// readTables re-reads the memory maps of the processes pick returns and,
// with unwinding, gives them unwinders over their binaries' tables; then
// it settles the samples they queued meanwhile. pick runs with symbols.mu
// held, and the maps are read before it is released: whoever takes
// symbols.mu next finds the tables of the processes picked read.
func (e *engine) readTables(pick func() []*procState) {
	e.syms.mu.Lock()
	sts := pick()
	e.syms.refreshLocked(sts, true)
	e.syms.mu.Unlock()
	if !e.syms.unwind || len(sts) == 0 {
		return
	}
	e.mu.Lock()
	for _, st := range sts {
		// Gone (its pid is another's, or nobody's) or its map
		// unreadable: it will not be read later either.
		if st.unwinder.Load() == nil {
			st.pending.unread = true
		}
	}
	e.mu.Unlock()
	e.drainPending(sts)
}

// unwindQueued settles the queued samples before a report splits them
// off, with the unwinders the symbol worker stored. Samples queued after
// it began are settled by the split (settleBefore).
func (e *engine) unwindQueued() {
	e.mu.Lock()
	var waiting []*procState
	if e.pendingBytes > 0 {
		for _, st := range e.all {
			if len(st.pending.samples) > 0 {
				waiting = append(waiting, st)
			}
		}
	}
	e.mu.Unlock()
	e.drainPending(waiting)
}

// moveQueued moves the queued samples of old taken at or after t, when it
// exec'd, to st, the new image, whose tables unwind them: the read loop
// reads the rings one CPU after the other, so samples of the new image can
// come before the record of the exec, and are queued in the old image (25
// of them in TestUnwindPendingAfterExec). Their copies in old's batch are
// dropped when taken (dropMoved). Samples that were unwound with the old
// image's tables when they came are not told apart: their copy is gone.
// Called with mu held, before settleExec.
func (e *engine) moveQueued(old, st *procState, t uint64) {
	q := &old.pending
	if t == 0 || len(q.samples) == 0 {
		return
	}
	kept := q.samples[:0]
	for _, p := range q.samples {
		if p.b != old.batch || int(p.idx) >= len(p.b.samples) || p.b.samples[p.idx].time < t {
			kept = append(kept, p)
			continue
		}
		smp := &p.b.samples[p.idx]
		raw := p.b.stacks[smp.stack]
		copied := *smp
		copied.stack = st.batch.intern(raw.chain, raw.leafCall, st.genAt(smp.time))
		st.batch.samples = append(st.batch.samples, copied)
		smp.moved = true
		old.movedOut++
		e.buffered++
		cost := int64(len(p.stack)) + pendingEntryBytes
		q.bytes -= cost
		st.pending.bytes += cost
		p.b, p.idx = st.batch, int32(len(st.batch.samples)-1)
		st.pending.samples = append(st.pending.samples, p)
	}
	clear(q.samples[len(kept):])
	q.samples = kept
}

// dropMoved returns the samples of b that moveQueued did not move to
// another image, nil when none. b is left as it is (the sched state may
// refer to it). Called with mu held.
func dropMoved(st *procState, b *batch) *batch {
	n := 0
	for _, s := range b.samples {
		if !s.moved {
			n++
		}
	}
	st.movedOut -= len(b.samples) - n
	switch n {
	case len(b.samples):
		return b
	case 0:
		return nil
	}
	out := &batch{samples: make([]rawSample, 0, n), stacks: b.stacks}
	for _, s := range b.samples {
		if !s.moved {
			out.samples = append(out.samples, s)
		}
	}
	return out
}

// settleExec settles the queue of a process image replaced by an exec:
// its tables can no longer be read, /proc/PID/maps being the new image's.
// Unwound if they were read, else with the kernel's chain. Called with mu
// held, on the read loop: the samples are few unless nothing was read.
func (e *engine) settleExec(old *procState) {
	if old.unwinder.Load() == nil {
		old.pending.unread = true
	}
	e.settleSome(old, len(old.pending.samples))
}
