package profiler

import (
	"math"
	"os"
	"slices"
	"testing"

	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/profiler/profilertest"
)

// The synthetic samples of these tests are of code without frame pointers
// as the kernel sees it: its chain stops at the leaf. Their stack copies
// hold one frame-pointer frame, which the Unwinder steps as it steps JIT
// code (the addresses are in no mapping): unwound, a sample's stack is its
// leaf and its caller. Sample i has leaf pendingLeaf+i and caller
// pendingCaller+i, so that a sample given another's stack is seen.
const (
	pendingLeaf   = 0x1000
	pendingCaller = 0x2000
	pendingSP     = 0x7f00_0000_0000
)

// pendingRecord returns sample i of pid at time t with a stack copy of n
// bytes (at least 0x50).
func pendingRecord(pid, i int, t uint64, n int) perf.Record {
	stack := make([]byte, n)
	// The leaf's frame pointer points at its caller's frame: the saved
	// frame pointer and return address, then the caller's frame, which
	// ends the stack (a zero return address).
	ne.PutUint64(stack[0x20:], pendingSP+0x40)
	ne.PutUint64(stack[0x28:], uint64(pendingCaller+i))
	rec := profilertest.Sample(pid, 1, t, uint64(pendingLeaf+i))
	rec.Sample.RegsABI = 2 // PERF_SAMPLE_REGS_ABI_64
	// In the kernel's order (perf_event_x86_regs): BP, SP, IP.
	rec.Sample.RegsUser = []uint64{pendingSP + 0x20, pendingSP, uint64(pendingLeaf + i)}
	rec.Sample.StackUser = stack
	return rec
}

// pendingEngine is an engine unwinding the stacks of this test process
// (whose tables are read for real when asked), not read yet, with the
// pending queue bounded at bound.
func pendingEngine(t testing.TB, bound int64) (*engine, *procState) {
	e, st := selfEngine(t, Options{Unwind: UnwindAuto, MaxPendingUnwindBytes: bound, MaxBufferedSamples: 1 << 30})
	p := st.info
	if r := pendingRecord(p.Pid, 0, 0, 0x50); r.Sample.RegsUser[2] != must(r.Sample.UserIP()) || r.Sample.RegsUser[1] != must(r.Sample.UserSP()) {
		t.Fatal("the registers are not in perf's order")
	}
	return e, st
}

// selfEngine is an engine of opts (defaults set) with this test process
// added as its target.
func selfEngine(t testing.TB, opts Options) (*engine, *procState) {
	opts.setDefaults()
	e := newEngine(opts, newPlan(opts))
	t.Cleanup(func() { _ = e.syms.close() })
	p, err := perf.ReadProcess(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	st, _ := e.addProcess(p, Identity{})
	return e, st
}

func must(v uint64, ok bool) uint64 {
	if !ok {
		panic("no register")
	}
	return v
}

// userStacks returns, by sample time, the user addresses of the stacks of
// snaps.
func userStacks(snaps []Snapshot) map[uint64][]uint64 {
	out := map[uint64][]uint64{}
	for _, sn := range snaps {
		for _, s := range sn.Samples {
			var addrs []uint64
			for _, l := range sn.Stacks[s.Stack] {
				addrs = append(addrs, l.Addr)
			}
			out[s.Time] = addrs
		}
	}
	return out
}

// checkStacks checks that the samples i (taken at times[i-from]) for
// which unwound is true have their leaf and caller, and the others their
// leaf only (the kernel's chain).
func checkStacks(t *testing.T, e *engine, got map[uint64][]uint64, from int, times []uint64, unwound func(i int) bool) {
	t.Helper()
	for k, tm := range times {
		i := from + k
		want := []uint64{uint64(pendingLeaf + i)}
		if unwound(i) {
			want = append(want, uint64(pendingCaller+i))
		}
		if s, ok := got[e.clock.Unix(tm)]; !ok || !slices.Equal(s, want) {
			t.Errorf("sample %d: stack %x, want %x", i, s, want)
		}
	}
}

// A process's queue holds at most its share of the bound: the samples
// beyond keep the kernel's chain, counted as overflow, and the others are
// unwound once the tables are read (here by the symbol worker's pass that
// a report waits for).
func TestPendingQueueBound(t *testing.T) {
	const n = 1024
	cost := n + pendingEntryBytes
	e, st := pendingEngine(t, pendingShare*3*cost)
	times := []uint64{10, 20, 30, 40, 50}
	for i, tm := range times {
		rec := pendingRecord(st.info.Pid, i, tm, n)
		e.handle(&rec)
	}
	c := e.counts.unwind
	if c.Pending != 5 || c.PendingOverflow != 2 || len(st.pending.samples) != 3 || e.pendingBytes != 3*cost || c.PendingPeakBytes != 3*cost {
		t.Fatalf("queued %d samples (%d bytes); counted %+v", len(st.pending.samples), e.pendingBytes, c)
	}
	st.mapsDirty = true            // as attach leaves it for the symbol worker
	e.readTables(e.dirtyProcesses) // the symbol worker's pass a report waits for (catchUp)
	snaps := e.take(math.MaxUint64, math.MaxUint64, true)
	checkStacks(t, e, userStacks(snaps), 0, times, func(i int) bool { return i < 3 })
	c = e.counts.unwind
	if c.PendingUnwound != 3 || c.PendingUnread != 0 || c.Unwound != 3 || c.Complete != 3 || e.pendingBytes != 0 || st.pending.samples != nil {
		t.Errorf("after the report: %d bytes queued; counted %+v", e.pendingBytes, c)
	}
}

// The bound holds across processes: the fifth process to fill its share
// finds the queue full. Processes whose tables are never read (these do
// not exist) have their samples reported with the kernel's chain.
func TestPendingQueueBoundAcrossProcesses(t *testing.T) {
	const n = 512
	cost := n + pendingEntryBytes
	e, _ := pendingEngine(t, pendingShare*2*cost)
	var times []uint64
	for k := range pendingShare + 1 {
		// Above pid_max (4 194 304 at most): nobody's.
		p := perf.Process{Pid: 1<<22 + 1 + k, StartTime: 1, Comm: "gone"}
		e.addProcess(p, Identity{})
		for j := range 2 {
			tm := uint64(100*k + j + 1)
			rec := pendingRecord(p.Pid, 0, tm, n)
			e.handle(&rec)
			times = append(times, tm)
		}
	}
	c := e.counts.unwind
	if c.Pending != 10 || c.PendingOverflow != 2 || e.pendingBytes != 8*cost {
		t.Fatalf("%d bytes queued; counted %+v", e.pendingBytes, c)
	}
	got := userStacks(e.take(math.MaxUint64, math.MaxUint64, true))
	for _, tm := range times {
		if s := got[e.clock.Unix(tm)]; !slices.Equal(s, []uint64{pendingLeaf}) {
			t.Errorf("sample at %d: stack %x, want the kernel's", tm, s)
		}
	}
	c = e.counts.unwind
	if c.PendingUnread != 8 || c.PendingUnwound != 0 || e.pendingBytes != 0 {
		t.Errorf("after the report: %d bytes queued; counted %+v", e.pendingBytes, c)
	}
}

// A report that splits a process's samples before its tables are read
// sends the older with the kernel's chain, and keeps the younger queued at
// their new places: they are unwound, each with its own stack, when the
// symbol worker reads the tables.
func TestPendingQueueSplitByReport(t *testing.T) {
	e, st := pendingEngine(t, 0)
	var times []uint64
	for i := range 8 {
		tm := uint64(i+1) * 1000
		rec := pendingRecord(st.info.Pid, i, tm, 256)
		e.handle(&rec)
		times = append(times, tm)
	}
	// The window has passed the first three only; their tables have not
	// been read, and nobody reads them (the process is not dirty).
	first := userStacks(e.take(math.MaxUint64, 3500, false))
	if len(first) != 3 || len(st.pending.samples) != 5 {
		t.Fatalf("reported %d samples, %d still queued", len(first), len(st.pending.samples))
	}
	checkStacks(t, e, first, 0, times[:3], func(int) bool { return false })

	// The symbol worker reads the tables, and unwinds what waits.
	st.mapsDirty = true
	e.readTables(e.dirtyProcesses)
	if st.unwinder.Load() == nil || st.pending.samples != nil || e.pendingBytes != 0 {
		t.Fatalf("after the tables were read: unwinder %v, %d samples queued", st.unwinder.Load(), len(st.pending.samples))
	}
	rest := userStacks(e.take(math.MaxUint64, math.MaxUint64, true))
	checkStacks(t, e, rest, 3, times[3:], func(int) bool { return true })
	if c := e.counts.unwind; c.Pending != 8 || c.PendingUnread != 3 || c.PendingUnwound != 5 {
		t.Errorf("counted %+v", c)
	}
}

// An exec settles the old image's queue, whose tables can no longer be
// read: with the kernel's chain, or unwound when its unwinder was stored
// and the symbol worker had not yet unwound what waited. The new image's
// samples wait for its own tables, those read before the exec's record
// included: they are moved from the old image's queue, by their time.
func TestPendingQueueExec(t *testing.T) {
	for _, stored := range []bool{false, true} {
		e, old := pendingEngine(t, 0)
		old.attachedAt = 0 // the records' times are of a clock that starts at 0
		pid := old.info.Pid
		var times []uint64
		handle := func(i int) {
			tm := uint64(i+1) * 1000
			rec := pendingRecord(pid, i, tm, 256)
			e.handle(&rec)
			times = append(times, tm)
		}
		// Two samples of the old image, then one of the new image
		// (3000) read before the record of the exec (2500).
		for i := range 3 {
			handle(i)
		}
		if stored {
			e.syms.refresh([]*procState{old}, true) // the worker, up to its store
		}
		exec := profilertest.Exec(pid, 2500, "next")
		e.handle(&exec)
		cur := e.live[pid]
		if cur == old || old.pending.samples != nil || !cur.mapsDirty || len(cur.pending.samples) != 1 || old.movedOut != 1 {
			t.Fatalf("stored %v: after the exec, the old image holds %d queued samples, the new %d", stored, len(old.pending.samples), len(cur.pending.samples))
		}
		for i := 3; i < 6; i++ {
			handle(i)
		}
		if len(cur.pending.samples) != 4 {
			t.Fatalf("stored %v: the new image queued %d samples", stored, len(cur.pending.samples))
		}
		e.readTables(e.dirtyProcesses) // the symbol worker's pass a report waits for (catchUp)
		snaps := e.take(math.MaxUint64, math.MaxUint64, true)
		perImage := map[string]int{}
		for _, sn := range snaps {
			perImage[sn.Comm] += len(sn.Samples)
		}
		if perImage[old.info.Comm] != 2 || perImage["next"] != 4 || old.movedOut != 0 {
			t.Errorf("stored %v: samples reported by image %v, want 2 of the old one and 4 of next", stored, perImage)
		}
		checkStacks(t, e, userStacks(snaps), 0, times, func(i int) bool { return i >= 2 || stored })
		c := e.counts.unwind
		if unread := map[bool]int64{false: 2, true: 0}[stored]; c.PendingUnread != unread || c.PendingUnwound != 6-unread || e.pendingBytes != 0 {
			t.Errorf("stored %v: counted %+v, %d bytes queued", stored, c, e.pendingBytes)
		}
	}
}

// A process whose tables cannot be read (it exited before the symbol
// worker got to it) has its queue settled at once, with the kernel's
// chain, and its later samples are not queued.
func TestPendingQueueUnreadable(t *testing.T) {
	e, _ := pendingEngine(t, 0)
	p := perf.Process{Pid: 1<<22 + 1, StartTime: 1, Comm: "gone"}
	st, _ := e.addProcess(p, Identity{})
	st.mapsDirty = true
	rec := pendingRecord(p.Pid, 0, 1000, 256)
	e.handle(&rec)
	e.readTables(e.dirtyProcesses)
	rec = pendingRecord(p.Pid, 1, 2000, 256)
	e.handle(&rec)
	if c := e.counts.unwind; c.Pending != 2 || c.PendingUnread != 2 || st.pending.samples != nil || e.pendingBytes != 0 {
		t.Errorf("counted %+v, %d samples queued", c, len(st.pending.samples))
	}
}
