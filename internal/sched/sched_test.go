package sched

import "testing"

// op is one step of a scripted timeline for a single thread.
type op struct {
	kind     byte // 'i' switch-in, 'o' switch-out, 'p' preempted switch-out, 's' sample, 'd' TakeCPUDelta, 'x' exit
	ts       uint64
	group    *Group // for 'i' and 's': the expected group, nil for none
	cpuDelta uint64 // for 'd': the expected delta
}

func in(ts uint64, g *Group) op          { return op{kind: 'i', ts: ts, group: g} }
func out(ts uint64) op                   { return op{kind: 'o', ts: ts} }
func preempt(ts uint64) op               { return op{kind: 'p', ts: ts} }
func sample(ts uint64, g *Group) op      { return op{kind: 's', ts: ts, group: g} }
func delta(d uint64) op                  { return op{kind: 'd', cpuDelta: d} }
func exit() op                           { return op{kind: 'x'} }
func grp(b, e, n uint64, s State) *Group { return &Group{Begin: b, End: e, Count: n, State: s} }

// play runs ops on tid of tr, failing on the first mismatch.
func play(t *testing.T, tr *Tracker, tid uint32, ops []op) {
	t.Helper()
	for i, o := range ops {
		var g Group
		var ok bool
		switch o.kind {
		case 'i':
			g, ok = tr.SwitchIn(tid, o.ts)
		case 's':
			g, ok = tr.OnCPUSample(tid, o.ts)
		case 'o', 'p':
			tr.SwitchOut(tid, o.ts, o.kind == 'p')
			continue
		case 'd':
			if d := tr.TakeCPUDelta(tid); d != o.cpuDelta {
				t.Fatalf("step %d: cpu delta %d, want %d", i, d, o.cpuDelta)
			}
			continue
		case 'x':
			tr.Exit(tid)
			continue
		}
		switch {
		case o.group == nil && ok:
			t.Fatalf("step %d (%c at %d): got group %+v, want none", i, o.kind, o.ts, g)
		case o.group != nil && !ok:
			t.Fatalf("step %d (%c at %d): no group, want %+v", i, o.kind, o.ts, *o.group)
		case o.group != nil && g != *o.group:
			t.Fatalf("step %d (%c at %d): group %+v, want %+v", i, o.kind, o.ts, g, *o.group)
		}
	}
}

func checkTotals(t *testing.T, tr *Tracker, tid uint32, on, blocked, runnable, since uint64) {
	t.Helper()
	gotOn, gotB, gotR, gotSince := tr.Totals(tid)
	if gotOn != on || gotB != blocked || gotR != runnable || gotSince != since {
		t.Fatalf("Totals(%d) = on %d, blocked %d, runnable %d, since %d; want %d, %d, %d, %d",
			tid, gotOn, gotB, gotR, gotSince, on, blocked, runnable, since)
	}
}

// TestSamplyTimeline reproduces the unit test of samply's context-switch
// handler, interval 10, every switch-out blocked:
//
//	===__========__=_____==____===___________________=============
//	0         1         2         3         4         5         6
//	0123456789012345678901234567890123456789012345678901234567890123
//
// with on-CPU samples at 12, 51 and 61.
func TestSamplyTimeline(t *testing.T) {
	tr := New(10)
	play(t, tr, 1, []op{
		in(0, nil),
		out(3),
		in(5, nil),
		sample(12, nil), delta(10),
		out(13),
		in(15, nil),
		out(16),
		in(21, nil),
		out(23),
		in(27, grp(24, 24, 1, Blocked)), // 2+2+5+4 = 13: one sample, 3 left
		delta(4),
		out(30),
		in(48, grp(37, 47, 2, Blocked)), // 3+18 = 21: two samples, 1 left
		delta(3),
		sample(51, nil), delta(3),
		sample(61, nil), delta(10),
	})
	// On: 3+8+1+2+3+13 = 30; off: 2+2+5+4+18 = 31; 30+31 = 61.
	checkTotals(t, tr, 1, 30, 31, 0, 0)
	if d, b, r := tr.Pending(1); d != 0 || b != 1 || r != 0 {
		t.Fatalf("Pending = %d, %d, %d; want 0, 1, 0", d, b, r)
	}
}

// TestPreemptedTimeline is the samply timeline with the switch-outs at 13, 23
// and (added at the end) 62 preempted. Blocked and runnable time accumulate
// apart:
//
//	off period   state     blocked acc  runnable acc  group
//	[3, 5]       blocked   2            0
//	[13, 15]     runnable  2            2
//	[16, 21]     blocked   7            2
//	[23, 27]     runnable  7            6             none: 6 < 10 (all-blocked: 13 gave one)
//	[30, 48]     blocked   25 → 5       6             2 blocked: Begin 48-(25-10) = 33, End 48-5 = 43
//	[62, 67]     runnable  5            11 → 1        1 runnable: Begin = End = 67-1 = 66
//
// On-CPU time, and so every CPU delta, is the same as in the all-blocked
// timeline.
func TestPreemptedTimeline(t *testing.T) {
	tr := New(10)
	play(t, tr, 7, []op{
		in(0, nil),
		out(3),
		in(5, nil),
		sample(12, nil), delta(10),
		preempt(13),
		in(15, nil),
		out(16),
		in(21, nil),
		preempt(23),
		in(27, nil),
		delta(4),
		out(30),
		in(48, grp(33, 43, 2, Blocked)),
		delta(3),
		sample(51, nil), delta(3),
		sample(61, nil), delta(10),
		preempt(62),
		in(67, grp(66, 66, 1, Runnable)),
		delta(1),
	})
	checkTotals(t, tr, 7, 31, 25, 11, 0)
	if d, b, r := tr.Pending(7); d != 0 || b != 5 || r != 1 {
		t.Fatalf("Pending = %d, %d, %d; want 0, 5, 1", d, b, r)
	}
}

func TestEdgeCases(t *testing.T) {
	tests := []struct {
		name string
		ops  []op
		// Totals after the ops.
		on, blocked, runnable, since uint64
	}{
		{
			name: "first record switch-in: no group, where it slept is unknown",
			ops:  []op{in(100, nil), delta(0), out(105), in(140, grp(115, 135, 3, Blocked)), delta(5)},
			on:   5, blocked: 35, since: 100,
		},
		{
			name: "first record switch-out: off from there",
			ops:  []op{out(100), in(125, grp(110, 120, 2, Blocked)), sample(130, nil), delta(5)},
			on:   5, blocked: 25, since: 100,
		},
		{
			name:    "first record preempted switch-out",
			ops:     []op{preempt(100), in(112, grp(110, 110, 1, Runnable)), delta(0)},
			blocked: 0, runnable: 12, since: 100,
		},
		{
			name: "first record sample: its cpu delta is 0",
			ops:  []op{sample(100, nil), delta(0), sample(110, nil), delta(10), out(111), in(130, grp(121, 121, 1, Blocked))},
			on:   11, blocked: 19, since: 100,
		},
		{
			name: "duplicated switch-out: the first one counts, with its state",
			ops:  []op{in(0, nil), out(10), preempt(15), out(18), in(30, grp(20, 30, 2, Blocked)), delta(10)},
			on:   10, blocked: 20, since: 0,
		},
		{
			name: "duplicated preempted switch-out",
			ops:  []op{in(0, nil), preempt(10), out(15), in(30, grp(20, 30, 2, Runnable))},
			on:   10, runnable: 20, since: 0,
		},
		{
			name: "sample before its switch-in: the sample ends the off period",
			ops: []op{
				in(0, nil), out(10),
				sample(32, grp(20, 30, 2, Blocked)), // off 22: 2 samples, 2 left
				in(33, nil),                         // already on: 1 ns more on-CPU
				delta(11),
				sample(40, nil), delta(7),
			},
			on: 18, blocked: 22, since: 0,
		},
		{
			name: "backwards switch-in after a switch-out: no underflow",
			ops:  []op{in(100, nil), out(110), in(108, nil), delta(10), sample(115, nil), delta(5)},
			on:   15, since: 100,
		},
		{
			name:    "backwards switch-out: no on-CPU time, no underflow",
			ops:     []op{in(100, nil), out(95), in(120, grp(110, 120, 2, Blocked)), delta(0)},
			blocked: 20, since: 100,
		},
		{
			name: "backwards sample while on, then forward",
			ops:  []op{in(100, nil), sample(120, nil), delta(20), sample(118, nil), delta(0), sample(125, nil), delta(5)},
			on:   25, since: 100,
		},
		{
			name: "backwards switch-in while on (sample came first)",
			ops:  []op{out(0), sample(50, grp(10, 50, 5, Blocked)), in(48, nil), delta(0), out(60), in(61, nil), delta(10)},
			on:   10, blocked: 51, since: 0,
		},
		{
			name: "exit then tid reuse: a fresh thread",
			ops: []op{
				in(0, nil), out(10), in(19, nil), // 9 blocked pending
				exit(),
				delta(0),
				out(1000), in(1002, nil), // 2 pending, not 11: old pending is gone
				sample(1010, nil), delta(8),
			},
			on: 8, blocked: 2, since: 1000,
		},
		{
			name: "zero-length off periods",
			ops:  []op{in(0, nil), out(5), in(5, nil), preempt(5), in(5, nil), delta(5)},
			on:   5, since: 0,
		},
		{
			name:    "long sleep: many samples in one group",
			ops:     []op{out(0), in(1005, grp(10, 1000, 100, Blocked))},
			blocked: 1005, since: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := New(10)
			play(t, tr, 42, tt.ops)
			checkTotals(t, tr, 42, tt.on, tt.blocked, tt.runnable, tt.since)
		})
	}
}

func TestUnknownThread(t *testing.T) {
	tr := New(10)
	if d := tr.TakeCPUDelta(5); d != 0 {
		t.Fatalf("TakeCPUDelta of unknown thread = %d", d)
	}
	tr.Exit(5)
	checkTotals(t, tr, 5, 0, 0, 0, 0)
	if tr.Threads() != 0 {
		t.Fatalf("Threads = %d, want 0", tr.Threads())
	}
	tr.SwitchOut(1, 0, false)
	tr.SwitchIn(2, 0)
	tr.OnCPUSample(3, 0)
	if tr.Threads() != 3 {
		t.Fatalf("Threads = %d, want 3", tr.Threads())
	}
	tr.Exit(2)
	if tr.Threads() != 2 {
		t.Fatalf("Threads = %d, want 2", tr.Threads())
	}
}

func TestThreadsIndependent(t *testing.T) {
	tr := New(10)
	// Two threads interleaved: each one's accumulators are its own.
	tr.SwitchIn(1, 0)
	tr.SwitchIn(2, 0)
	tr.SwitchOut(1, 1, false)
	tr.SwitchOut(2, 2, false)
	if _, ok := tr.SwitchIn(1, 9); ok { // 8
		t.Fatal("thread 1: unexpected group")
	}
	if _, ok := tr.SwitchIn(2, 10); ok { // 8
		t.Fatal("thread 2: unexpected group")
	}
	checkTotals(t, tr, 1, 1, 8, 0, 0)
	checkTotals(t, tr, 2, 2, 8, 0, 0)
}

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{Blocked: "blocked", Runnable: "runnable", 0: "State(0)", 9: "State(9)"} {
		if got := s.String(); got != want {
			t.Errorf("State(%d).String() = %q, want %q", s, got, want)
		}
	}
	if d := (Group{Count: 3}).Duration(7); d != 21 {
		t.Errorf("Duration = %d, want 21", d)
	}
}

func TestNewZeroInterval(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New(0) did not panic")
		}
	}()
	New(0)
}
