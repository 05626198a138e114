package sched

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// record is one generated input record.
type record struct {
	tid       uint32
	ts        uint64
	kind      byte // 'i' switch-in, 'o' switch-out, 's' on-CPU sample
	preempted bool
}

// truth is what a generated thread really did between its first and its
// last record.
type truth struct {
	first, last       uint64
	on                uint64
	blocked, runnable uint64
}

// genThread generates the records of one thread: alternating on and off
// periods, off periods blocked or preempted and of lengths from 0 to several
// intervals (most shorter than one), on-CPU samples at random times inside on
// periods, the sample sometimes before the switch-in record (the switch-in
// then comes later in the same on period), and occasional duplicated
// switch-outs inside off periods. The last record closes the last period, so
// the truth is exact up to it.
func genThread(rng *rand.Rand, tid uint32, start, interval uint64) ([]record, truth) {
	var recs []record
	t := start
	tr := truth{first: start}
	add := func(kind byte, ts uint64, preempted bool) {
		recs = append(recs, record{tid: tid, ts: ts, kind: kind, preempted: preempted})
	}
	offLen := func() uint64 {
		switch n := rng.IntN(10); {
		case n < 2:
			return 0
		case n < 6:
			return rng.Uint64N(interval/2 + 1)
		case n < 8:
			return rng.Uint64N(interval + 1)
		default:
			return rng.Uint64N(5 * interval)
		}
	}
	periods := 1 + rng.IntN(40)
	on := rng.IntN(2) == 0
	for p := 0; p < periods; p++ {
		last := p == periods-1
		if on {
			l := rng.Uint64N(3 * interval)
			end := t + l
			// The record that starts the period.
			switch {
			case p == 0 && rng.IntN(2) == 0:
				add('s', t, false) // first record a sample: Unknown → On
			case p > 0 && rng.IntN(3) == 0:
				// Sample first, its switch-in later in the same period.
				add('s', t, false)
				add('i', t+rng.Uint64N(min(l, interval/4)+1), false)
			default:
				add('i', t, false)
			}
			lastTs := recs[len(recs)-1].ts
			for n := rng.IntN(4); n > 0; n-- {
				lastTs = lastTs + rng.Uint64N(end-lastTs+1)
				add('s', lastTs, false)
			}
			if last {
				tr.on += lastTs - t
				tr.last = lastTs
				break
			}
			tr.on += l
			t = end
			on = false
			continue
		}
		// Off period: starts with its switch-out.
		preempted := rng.IntN(3) == 0
		add('o', t, preempted)
		if last {
			tr.last = t
			break
		}
		l := offLen()
		if rng.IntN(10) == 0 {
			add('o', t+rng.Uint64N(l+1), rng.IntN(2) == 0) // duplicate, ignored
		}
		if preempted {
			tr.runnable += l
		} else {
			tr.blocked += l
		}
		t += l
		on = true
	}
	return recs, tr
}

// TestProperty feeds thousands of random multi-thread timelines and checks the
// accounting against the generated truth, exactly: on-CPU time (the sum of
// the CPU deltas taken plus what is still pending), blocked and runnable
// off-CPU time (the sum of group durations plus what is still accumulated),
// and their sum against the wall time from each thread's first record to its
// last. The checker checks the groups on the way (well formed, inside the
// observed time, no overlap within a state, one interval apart at least).
func TestProperty(t *testing.T) {
	timelines := 3000
	if testing.Short() {
		timelines = 300
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var recs []record
	var groups, nrecs int
	for n := 0; n < timelines; n++ {
		interval := 1 + rng.Uint64N(2000)
		c := newChecker(t, interval)
		nthreads := 1 + rng.IntN(6)
		truths := make(map[uint32]truth, nthreads)
		recs = recs[:0]
		for i := 0; i < nthreads; i++ {
			tid := uint32(100 + i)
			r, tr := genThread(rng, tid, 1_000_000+rng.Uint64N(10*interval), interval)
			recs = append(recs, r...)
			truths[tid] = tr
		}
		// Merge the threads in time order; each thread's records are already
		// in order, and the stable sort keeps equal timestamps in that order.
		slices.SortStableFunc(recs, func(a, b record) int {
			switch {
			case a.ts < b.ts:
				return -1
			case a.ts > b.ts:
				return 1
			}
			return 0
		})
		for _, r := range recs {
			switch r.kind {
			case 'o':
				c.switchOut(r.tid, r.ts, r.preempted)
			case 'i':
				c.run(r.tid, r.ts, false)
			case 's':
				c.run(r.tid, r.ts, true)
				c.take(r.tid) // the CPU delta of this sample
			}
			if rng.IntN(8) == 0 {
				c.take(r.tid)
			}
		}
		nrecs += len(recs)
		for tid, want := range truths {
			c.take(tid)
			m := c.m[tid]
			groups += m.groups
			on, b, r, first := c.tr.Totals(tid)
			_, pb, pr := c.tr.Pending(tid)
			if first != want.first || m.taken != want.on || on != want.on ||
				m.grouped[0]+pb != want.blocked || b != want.blocked ||
				m.grouped[1]+pr != want.runnable || r != want.runnable {
				t.Fatalf("timeline %d tid %d (interval %d): got first %d, on %d (taken %d), blocked %d (grouped %d), runnable %d (grouped %d); want %+v",
					n, tid, interval, first, on, m.taken, b, m.grouped[0], r, m.grouped[1], want)
			}
			// Exact above; the ±1 interval bound of the brief holds a fortiori.
			wall := want.last - want.first
			if sum := on + b + r; sum+interval < wall || sum > wall+interval {
				t.Fatalf("timeline %d tid %d: on+off %d, wall %d", n, tid, sum, wall)
			}
		}
	}
	t.Logf("%d timelines, %d records, %d groups", timelines, nrecs, groups)
}
