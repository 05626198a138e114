package sched

import "testing"

// checker feeds a Tracker and checks, after every call, what must hold
// whatever the records: the accounting adds up, and every group is well
// formed, of the state of the off period it ends, inside the time observed
// for its thread, and after the previous group of its state.
type checker struct {
	tb testing.TB
	tr *Tracker
	m  map[uint32]*model
}

// model is the little that the checker keeps per thread to check against.
type model struct {
	first, since uint64 // first record; start of the current period (the thread's latest time)
	off          bool
	st           State
	taken        uint64    // sum of TakeCPUDelta
	grouped      [2]uint64 // sum of group durations per state
	lastEnd      [2]uint64
	haveGroup    [2]bool
	groups       int
}

func newChecker(tb testing.TB, interval uint64) *checker {
	return &checker{tb: tb, tr: New(interval), m: make(map[uint32]*model)}
}

func stateOf(preempted bool) State {
	if preempted {
		return Runnable
	}
	return Blocked
}

func (c *checker) switchOut(tid uint32, ts uint64, preempted bool) {
	c.tr.SwitchOut(tid, ts, preempted)
	m := c.m[tid]
	switch {
	case m == nil:
		m = &model{first: ts, since: ts}
		c.m[tid] = m
	case m.off:
		c.check(tid)
		return
	default:
		m.since = max(m.since, ts)
	}
	m.off, m.st = true, stateOf(preempted)
	c.check(tid)
}

// run feeds a switch-in, or an on-CPU sample if sample is set.
func (c *checker) run(tid uint32, ts uint64, sample bool) {
	var g Group
	var ok bool
	if sample {
		g, ok = c.tr.OnCPUSample(tid, ts)
	} else {
		g, ok = c.tr.SwitchIn(tid, ts)
	}
	m := c.m[tid]
	if m == nil {
		if ok {
			c.tb.Fatalf("tid %d: group %+v from the first record", tid, g)
		}
		c.m[tid] = &model{first: ts, since: ts}
		c.check(tid)
		return
	}
	wasOff, st := m.off, m.st
	m.since = max(m.since, ts)
	m.off = false
	if ok {
		I := c.tr.Interval()
		i := g.State.index()
		switch {
		case !wasOff:
			c.tb.Fatalf("tid %d at %d: group %+v while on-CPU", tid, ts, g)
		case g.State != st:
			c.tb.Fatalf("tid %d at %d: group %+v, off period was %v", tid, ts, g, st)
		case g.Count == 0 || g.Begin > g.End || g.End-g.Begin != (g.Count-1)*I:
			c.tb.Fatalf("tid %d at %d: malformed group %+v (interval %d)", tid, ts, g, I)
		case g.Begin < m.first || g.End > m.since:
			c.tb.Fatalf("tid %d at %d: group %+v outside observed [%d, %d]", tid, ts, g, m.first, m.since)
		case m.haveGroup[i] && g.Begin < m.lastEnd[i]+I:
			c.tb.Fatalf("tid %d at %d: group %+v overlaps the previous %v group ending at %d", tid, ts, g, g.State, m.lastEnd[i])
		}
		m.grouped[i] += g.Duration(I)
		m.lastEnd[i], m.haveGroup[i] = g.End, true
		m.groups++
	}
	c.check(tid)
}

func (c *checker) take(tid uint32) {
	d := c.tr.TakeCPUDelta(tid)
	m := c.m[tid]
	if m == nil {
		if d != 0 {
			c.tb.Fatalf("tid %d: cpu delta %d of an unknown thread", tid, d)
		}
		return
	}
	m.taken += d
	c.check(tid)
}

func (c *checker) exit(tid uint32) {
	c.tr.Exit(tid)
	delete(c.m, tid)
	if on, b, r, first := c.tr.Totals(tid); on|b|r|first != 0 {
		c.tb.Fatalf("tid %d: totals after Exit %d, %d, %d, %d", tid, on, b, r, first)
	}
	c.checkCount()
}

func (c *checker) checkCount() {
	if c.tr.Threads() != len(c.m) {
		c.tb.Fatalf("Threads() = %d, want %d", c.tr.Threads(), len(c.m))
	}
}

// check checks the accounting of tid: what was handed out plus what is
// pending is what the totals say, per kind of time, and the totals cover the
// time from the first record to the start of the current period exactly.
func (c *checker) check(tid uint32) {
	c.tb.Helper()
	c.checkCount()
	m := c.m[tid]
	I := c.tr.Interval()
	on, b, r, first := c.tr.Totals(tid)
	cd, pb, pr := c.tr.Pending(tid)
	switch {
	case first != m.first:
		c.tb.Fatalf("tid %d: observedSince %d, want %d", tid, first, m.first)
	case on != m.taken+cd:
		c.tb.Fatalf("tid %d: on %d != taken %d + pending %d", tid, on, m.taken, cd)
	case b != m.grouped[0]+pb:
		c.tb.Fatalf("tid %d: blocked %d != grouped %d + pending %d", tid, b, m.grouped[0], pb)
	case r != m.grouped[1]+pr:
		c.tb.Fatalf("tid %d: runnable %d != grouped %d + pending %d", tid, r, m.grouped[1], pr)
	case pb >= I || pr >= I:
		c.tb.Fatalf("tid %d: pending off-CPU %d, %d not below the interval %d", tid, pb, pr, I)
	case on+b+r != m.since-m.first:
		c.tb.Fatalf("tid %d: on %d + blocked %d + runnable %d != %d - %d", tid, on, b, r, m.since, m.first)
	}
}
