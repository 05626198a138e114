package sched

import (
	"strconv"

	"github.com/perfprof/perfprof/internal/convention"
)

// State is why a thread is off-CPU.
type State uint8

const (
	// Blocked: the thread left the CPU voluntarily (I/O, a lock, a sleep).
	Blocked State = iota + 1
	// Runnable: the thread was preempted and waits for a CPU
	// (PERF_RECORD_MISC_SWITCH_OUT_PREEMPT on its switch-out).
	Runnable
)

// String returns "blocked" or "runnable".
func (s State) String() string {
	switch s {
	case Blocked:
		return convention.ThreadStateBlocked
	case Runnable:
		return convention.ThreadStateRunnable
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Group is off-CPU time turned into samples: Count samples of the tracker's
// interval each, spread evenly over [Begin, End] (End-Begin ==
// (Count-1)*interval), all in State. The first sample is at Begin, the last at
// End. Count is at least 1.
type Group struct {
	Begin, End uint64
	Count      uint64
	State      State
}

// Duration is the off-CPU time the group stands for: Count*interval.
func (g Group) Duration(interval uint64) uint64 { return g.Count * interval }

// Index of a State's accumulator in thread.pending and thread.off.
func (s State) index() int { return int(s - Blocked) }

// thread is the state of one thread. A thread the tracker has no entry for is
// in the Unknown state; once a record has been seen it is either on-CPU or
// off-CPU since the time in since.
type thread struct {
	since    uint64 // start of the current period; also the thread's latest time
	first    uint64 // timestamp of the first record
	offCPU   bool   // off-CPU since since (else on-CPU)
	offState State  // when offCPU: the state of this off period
	cpuDelta uint64 // on-CPU ns not yet taken by TakeCPUDelta
	on       uint64 // cumulative on-CPU ns of closed on periods
	pending  [2]uint64
	consumed [2]uint64 // off-CPU ns emitted in groups, per state
}

// Tracker does the on/off-CPU accounting of many threads, keyed by tid. It is
// not safe for concurrent use.
type Tracker struct {
	interval uint64
	minBlock uint64
	short    uint64
	threads  map[uint32]*thread
	free     []*thread // entries of exited threads, reused for new ones
}

// SetMinBlock makes off periods shorter than d ns not off-CPU time: they
// count in no group and no total (Short counts them). Profilers offer it
// (offcputime's --min-block-time) to leave out the short waits of busy
// threads, which are many and say little.
func (t *Tracker) SetMinBlock(d uint64) { t.minBlock = d }

// Short returns the number of off periods left out by SetMinBlock.
func (t *Tracker) Short() uint64 { return t.short }

// New returns a tracker that turns off-CPU time into samples of interval ns
// each (typically the on-CPU sampling period, so that on- and off-CPU samples
// weigh the same). New panics if interval is 0.
func New(interval uint64) *Tracker {
	if interval == 0 {
		panic("sched: interval must be > 0")
	}
	return &Tracker{interval: interval, threads: make(map[uint32]*thread)}
}

// Interval returns the off-CPU sample interval in ns.
func (t *Tracker) Interval() uint64 { return t.interval }

// Threads returns the number of threads the tracker holds state for.
func (t *Tracker) Threads() int { return len(t.threads) }

// lookup returns the state of tid, or nil if it is Unknown.
func (t *Tracker) lookup(tid uint32) *thread { return t.threads[tid] }

// add makes a new entry for tid, first seen at ts.
func (t *Tracker) add(tid uint32, ts uint64) *thread {
	var th *thread
	if n := len(t.free); n > 0 {
		th = t.free[n-1]
		t.free = t.free[:n-1]
		*th = thread{}
	} else {
		th = new(thread)
	}
	th.first, th.since = ts, ts
	t.threads[tid] = th
	return th
}

// elapsed returns ts-since and moves since to ts, or returns 0 if ts is not
// after since: records of different CPUs can go slightly backwards in time,
// and the thread's time must not.
func (th *thread) elapsed(ts uint64) uint64 {
	if ts <= th.since {
		return 0
	}
	d := ts - th.since
	th.since = ts
	return d
}

// SwitchOut records that tid left the CPU at ts; preempted is
// PERF_RECORD_MISC_SWITCH_OUT_PREEMPT (the thread stays runnable). A second
// switch-out without a switch-in in between (duplicated records occur in real
// data) is ignored: the off period and its state began with the first.
func (t *Tracker) SwitchOut(tid uint32, ts uint64, preempted bool) {
	th := t.lookup(tid)
	switch {
	case th == nil:
		th = t.add(tid, ts)
	case th.offCPU:
		return
	default:
		d := th.elapsed(ts)
		th.on += d
		th.cpuDelta += d
	}
	th.offCPU = true
	th.offState = Blocked
	if preempted {
		th.offState = Runnable
	}
}

// SwitchIn records that tid got a CPU at ts. It returns a group if the off
// period that ends here made the accumulated off-CPU time of its state cross
// one or more multiples of the interval. A switch-in of a thread already
// on-CPU (its first sample came before the switch-in record) only extends
// its on-CPU time; one of an Unknown thread starts its accounting (where it
// slept before is not known, so there is no group).
func (t *Tracker) SwitchIn(tid uint32, ts uint64) (Group, bool) {
	th := t.lookup(tid)
	if th == nil {
		t.add(tid, ts)
		return Group{}, false
	}
	return t.run(th, ts)
}

// OnCPUSample records an on-CPU sample of tid at ts. The sample proves that
// the thread runs: if it was off-CPU it counts as a switch-in at ts and may
// return a group like [Tracker.SwitchIn]. The first record of a thread being
// a sample starts its accounting, so that sample's CPU delta is 0.
func (t *Tracker) OnCPUSample(tid uint32, ts uint64) (Group, bool) {
	return t.SwitchIn(tid, ts)
}

// run moves a known thread to on-CPU at ts, accounting the time since the
// previous record to on-CPU or to the off-CPU state of the period.
func (t *Tracker) run(th *thread, ts uint64) (Group, bool) {
	d := th.elapsed(ts)
	if !th.offCPU {
		th.on += d
		th.cpuDelta += d
		return Group{}, false
	}
	th.offCPU = false
	if d < t.minBlock {
		t.short++
		return Group{}, false
	}
	st := th.offState
	i := st.index()
	a := th.pending[i] + d
	if a < t.interval {
		th.pending[i] = a
		return Group{}, false
	}
	// Samples are spaced by the interval and the last one sits at ts minus
	// what stays accumulated, so that the next group of this state begins at
	// least one interval after this one ends. ts >= a: a is off time the
	// thread spent since its first record, and since never goes backwards.
	ts = th.since
	count := a / t.interval
	rem := a - count*t.interval
	th.pending[i] = rem
	th.consumed[i] += a - rem
	return Group{
		Begin: ts - (a - t.interval),
		End:   ts - rem,
		Count: count,
		State: st,
	}, true
}

// TakeCPUDelta returns the on-CPU ns of tid accounted since the previous call
// (up to its latest record) and resets it to 0. Called once per on-CPU
// sample, right after [Tracker.OnCPUSample], it is the CPU time the sample
// stands for.
func (t *Tracker) TakeCPUDelta(tid uint32) uint64 {
	th := t.lookup(tid)
	if th == nil {
		return 0
	}
	d := th.cpuDelta
	th.cpuDelta = 0
	return d
}

// Exit forgets tid (the kernel reuses tids). Off-CPU time still accumulated
// below one interval is dropped.
func (t *Tracker) Exit(tid uint32) {
	th := t.lookup(tid)
	if th == nil {
		return
	}
	delete(t.threads, tid)
	t.free = append(t.free, th)
}

// Totals returns the cumulative accounting of tid: on-CPU ns, blocked and
// runnable off-CPU ns (consumed into groups plus still accumulated), all up
// to its latest record, and the timestamp of the first record seen for it.
// The current period (on or off since the latest record) is not included, so
// on+blocked+runnable is the time from observedSince to the start of the
// current period. All are 0 for an Unknown thread.
func (t *Tracker) Totals(tid uint32) (on, blocked, runnable, observedSince uint64) {
	th := t.lookup(tid)
	if th == nil {
		return 0, 0, 0, 0
	}
	b, r := Blocked.index(), Runnable.index()
	return th.on, th.consumed[b] + th.pending[b], th.consumed[r] + th.pending[r], th.first
}

// Pending returns what tid has accounted but not yet handed out: the on-CPU
// ns that the next [Tracker.TakeCPUDelta] returns, and the blocked and
// runnable off-CPU ns accumulated below one interval.
func (t *Tracker) Pending(tid uint32) (cpuDelta, blocked, runnable uint64) {
	th := t.lookup(tid)
	if th == nil {
		return 0, 0, 0
	}
	return th.cpuDelta, th.pending[Blocked.index()], th.pending[Runnable.index()]
}
