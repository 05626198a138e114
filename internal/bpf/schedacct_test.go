//go:build amd64

package bpf

import (
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/perfprof/perfprof/internal/otelctx"
	"github.com/perfprof/perfprof/internal/sched"
	"github.com/perfprof/perfprof/internal/symbolize"
	"github.com/perfprof/perfprof/internal/testchild"
)

// acctDriver is the accounting's test driver loaded alone, with its maps.
type acctDriver struct {
	Test    *ebpf.Program `ebpf:"schedacct_test"`
	Threads *ebpf.Map     `ebpf:"acct_test_threads"`
	Events  *ebpf.Map     `ebpf:"acct_events"`
	Results *ebpf.Map     `ebpf:"acct_results"`
}

func loadAcctDriver(t *testing.T) *acctDriver {
	t.Helper()
	spec, err := loadSpanctx()
	if err != nil {
		t.Fatal(err)
	}
	var d acctDriver
	if err := spec.LoadAndAssign(&d, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			t.Logf("%+v", ve)
		}
		testchild.RequireKernel(t, "BPF", explainLoadError(err), ErrPermission, ErrNotSupported)
	}
	t.Cleanup(func() {
		d.Test.Close()
		d.Threads.Close()
		d.Events.Close()
		d.Results.Close()
	})
	return &d
}

// run feeds events to the kernel's accounting, ACCT_BATCH at a time, and
// returns what each produced.
func (d *acctDriver) run(t *testing.T, interval, minBlock uint64, evs []spanctxAcctEvent) []spanctxAcctResult {
	t.Helper()
	var out []spanctxAcctResult
	for len(evs) > 0 {
		n := min(len(evs), acctBatch)
		keys := make([]uint32, n)
		for i := range keys {
			keys[i] = uint32(i)
		}
		if _, err := d.Events.BatchUpdate(keys, evs[:n], nil); err != nil {
			t.Fatalf("write events: %v", err)
		}
		ret, err := d.Test.Run(&ebpf.RunOptions{Context: spanctxAcctBatch{Interval: interval, MinBlock: minBlock, N: uint32(n)}})
		if err != nil || ret != 0 {
			t.Fatalf("run schedacct_test: %d, %v", ret, err)
		}
		res := make([]spanctxAcctResult, n)
		for i := range res {
			if err := d.Results.Lookup(uint32(i), &res[i]); err != nil {
				t.Fatalf("read result %d: %v", i, err)
			}
		}
		out = append(out, res...)
		evs = evs[n:]
	}
	return out
}

// acctBatch is ACCT_BATCH of schedacct.h.
const acctBatch = 64

// Event kinds of schedacct.h.
const (
	acctOut    = 1
	acctIn     = 2
	acctSample = 3
	acctExit   = 4
)

// genAcct generates the records of a few threads interleaved as the
// kernel delivers them: alternating on and off periods of lengths from 0
// to several intervals, blocked or preempted; samples inside on periods,
// sometimes before their switch-in; duplicated switch-outs; timestamps
// that now and then go back a little (records of different CPUs); threads
// whose first record is any kind; exits, and tids reused after.
func genAcct(rng *rand.Rand, interval uint64) []spanctxAcctEvent {
	var evs []spanctxAcctEvent
	nthreads := 1 + rng.IntN(4)
	type th struct {
		tid uint32
		t   uint64
		on  bool
	}
	ths := make([]*th, nthreads)
	for i := range ths {
		ths[i] = &th{tid: uint32(100 + i), t: 1_000_000_000 + rng.Uint64N(interval), on: rng.IntN(2) == 0}
	}
	add := func(x *th, kind uint8, ts uint64, preempted bool) {
		e := spanctxAcctEvent{Ts: ts, Tid: x.tid, Kind: kind}
		if preempted {
			e.Preempted = 1
		}
		evs = append(evs, e)
	}
	span := func() uint64 {
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
	for steps := 10 + rng.IntN(200); steps > 0; steps-- {
		x := ths[rng.IntN(len(ths))]
		jitter := func(ts uint64) uint64 {
			if rng.IntN(20) == 0 {
				return ts - min(ts, rng.Uint64N(interval/10+1))
			}
			return ts
		}
		x.t += span()
		switch r := rng.IntN(100); {
		case r < 3:
			add(x, acctExit, x.t, false)
			x.on = rng.IntN(2) == 0
		case x.on && r < 40:
			add(x, acctSample, jitter(x.t), false)
		case x.on:
			add(x, acctOut, jitter(x.t), rng.IntN(3) == 0)
			if rng.IntN(15) == 0 {
				add(x, acctOut, jitter(x.t+rng.Uint64N(interval/4+1)), rng.IntN(2) == 0)
			}
			x.on = false
		default:
			if rng.IntN(8) == 0 {
				// The first sample of an on period read before its
				// switch-in.
				add(x, acctSample, jitter(x.t), false)
				x.t += rng.Uint64N(interval/20 + 1)
			}
			add(x, acctIn, jitter(x.t), false)
			x.on = true
		}
	}
	return evs
}

// TestSchedAcctMatchesTracker: the kernel's accounting (schedacct.h, run by
// BPF_PROG_TEST_RUN) and internal/sched's Tracker, fed the same generated
// record sequences, produce the same groups and CPU deltas, record for
// record.
func TestSchedAcctMatchesTracker(t *testing.T) {
	d := loadAcctDriver(t)
	rng := rand.New(rand.NewPCG(13, 7))
	const sequences = 3000
	events, groups, short := 0, 0, uint64(0)
	for seq := 0; seq < sequences; seq++ {
		interval := []uint64{10_000_000, 1_000_000, 100_000, 3}[rng.IntN(4)]
		// A minimum block time in one sequence of two.
		var minBlock uint64
		if rng.IntN(2) == 0 {
			minBlock = rng.Uint64N(2 * interval)
		}
		evs := genAcct(rng, interval)
		// Every sequence starts with no thread known.
		for _, tid := range []uint32{100, 101, 102, 103} {
			_ = d.Threads.Delete(tid)
		}
		got := d.run(t, interval, minBlock, evs)
		tr := sched.New(interval)
		tr.SetMinBlock(minBlock)
		for i, e := range evs {
			var g sched.Group
			var ok bool
			var delta uint64
			shortBefore := tr.Short()
			switch e.Kind {
			case acctOut:
				tr.SwitchOut(e.Tid, e.Ts, e.Preempted != 0)
			case acctIn:
				g, ok = tr.SwitchIn(e.Tid, e.Ts)
			case acctSample:
				g, ok = tr.OnCPUSample(e.Tid, e.Ts)
				delta = tr.TakeCPUDelta(e.Tid)
			case acctExit:
				tr.Exit(e.Tid)
			}
			r := got[i]
			kg := sched.Group{Begin: r.Group.Begin, End: r.Group.End, Count: r.Group.Count, State: sched.State(r.Group.State)}
			if (r.ShortOff != 0) != (tr.Short() > shortBefore) {
				t.Fatalf("sequence %d (interval %d, min block %d), record %d %+v: kernel short %v, Tracker %v",
					seq, interval, minBlock, i, e, r.ShortOff != 0, tr.Short() > shortBefore)
			}
			if (r.Grouped != 0) != ok || (ok && kg != g) || r.CpuDelta != delta {
				t.Fatalf("sequence %d (interval %d), record %d %+v: kernel group %v %+v, delta %d; Tracker group %v %+v, delta %d",
					seq, interval, i, e, r.Grouped != 0, kg, r.CpuDelta, ok, g, delta)
			}
			if ok {
				groups++
			}
		}
		events += len(evs)
		short += tr.Short()
	}
	t.Logf("%d sequences, %d records, %d groups, %d off periods below the minimum block time: the kernel's accounting and the Tracker agree on every one", sequences, events, groups, short)
	if short == 0 {
		t.Error("no off period below the minimum block time: the generator does not exercise it")
	}
	if groups < sequences {
		t.Errorf("only %d groups over %d sequences: the generator does not exercise the accounting", groups, sequences)
	}
}

// TestSchedSwitchGroups: the scheduler program on a real thread, the C
// publisher switching between two OTEP 4947 spans every millisecond and
// blocking 2 ms in block_in_span0 or block_in_span1 in every fifth period
// of each: its groups add up to the time it blocked, their stacks start in
// the function it blocked in, and their span is that function's.
func TestSchedSwitchGroups(t *testing.T) {
	const interval = time.Millisecond
	p, err := Load(Options{SchedInterval: interval, KernelStacks: true})
	testchild.RequireKernel(t, "BPF", err, ErrPermission, ErrNotSupported)
	defer p.Close()
	kernel, err := symbolize.LoadKernel()
	if err != nil {
		t.Fatal(err)
	}

	child := testchild.Start(t, testchild.OTelCtxPublisher(t), "work", "memfd", filepath.Join(t.TempDir(), "truth"))
	spans := map[string]string{} // span id hex → "0" or "1"
	for i := 0; i < 2; i++ {
		f := strings.Fields(child.Line(t, 5*time.Second))
		spans[f[3]] = f[1]
	}
	v, err := otelctx.LocateTLS(child.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AddThreadContextTarget(child.Pid, v); err != nil {
		t.Fatal(err)
	}
	if err := p.AttachSched(); err != nil {
		t.Fatal(err)
	}
	// The publisher has one thread: its CPU time is the process's.
	before := testchild.ThreadCPU(t, child.Pid)[child.Pid]
	start := time.Now()
	time.Sleep(2 * time.Second) // the measurement window: 2 s of the child's CPU and switches
	if err := p.RemoveTarget(child.Pid); err != nil {
		t.Fatal(err)
	}
	wall := time.Since(start)
	onCPU := time.Duration(testchild.ThreadCPU(t, child.Pid)[child.Pid] - before)

	cache := symbolize.NewCache(symbolize.Options{})
	defer cache.Close()
	proc, err := cache.Process(child.Pid)
	if err != nil {
		t.Fatal(err)
	}
	var blocked, runnable uint64
	var inBlock, right, stackless, outOfGroup, inSchedule int
	_, err = p.DrainSched(func(r *SchedRecord) {
		if r.Pid != uint32(child.Pid) || r.Tid != uint32(child.Pid) {
			t.Errorf("group of pid %d tid %d, want %d", r.Pid, r.Tid, child.Pid)
		}
		if r.OutTime > r.End {
			outOfGroup++
		}
		if r.State == sched.Runnable {
			runnable += r.Count * uint64(interval)
			return
		}
		blocked += r.Count * uint64(interval)
		// The kernel stack of a thread leaving the CPU runs through the
		// scheduler.
		for _, pc := range r.KernelStack {
			if f, ok := kernel.Lookup(pc); ok && strings.Contains(f.Function, "schedule") {
				inSchedule++
				break
			}
		}
		if len(r.Stack) == 0 {
			stackless++
			return
		}
		fn := ""
		for _, f := range proc.Lookup(r.Stack[0]).Frames {
			fn = f.Function
		}
		if !strings.HasPrefix(fn, "block_in_span") {
			return
		}
		inBlock++
		if r.HasSpan() && r.HasTrace() && r.Flags&FlagThreadContext != 0 && spans[hex.EncodeToString(r.SpanID[:])] == fn[len(fn)-1:] {
			right++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	offWant := wall - onCPU
	st, _ := p.Stats()
	t.Logf("over %v: on-CPU %v, off-CPU %v; groups: blocked %v, runnable %v; %d blocked groups with their stack in block_in_span*, %d with its span; %d without a stack; program %+v",
		wall.Round(time.Millisecond), onCPU.Round(time.Millisecond), offWant.Round(time.Millisecond),
		time.Duration(blocked).Round(time.Millisecond), time.Duration(runnable).Round(time.Millisecond), inBlock, right, stackless, st)
	if got := time.Duration(blocked + runnable); got < offWant*8/10 || got > offWant*11/10 {
		t.Errorf("groups add up to %v of off-CPU time, want about %v", got, offWant)
	}
	if inBlock < 100 || right < inBlock*99/100 {
		t.Errorf("%d blocked groups in block_in_span*, %d with the span of their function: want ≥ 100, ≥ 99%%", inBlock, right)
	}
	t.Logf("%d blocked groups with __schedule (or the like) on their kernel stack", inSchedule)
	if inSchedule < inBlock*99/100 {
		t.Errorf("%d blocked groups with the scheduler on their kernel stack, want ≥ 99%% of %d", inSchedule, inBlock)
	}
	if outOfGroup > 0 || st.SchedDropped > 0 {
		t.Errorf("%d groups whose switch-out is after their end; %d groups dropped", outOfGroup, st.SchedDropped)
	}
}

// TestSchedLossCounted: three scheduler programs on the same thread at
// once, so that they see the same switches: one with room for every group,
// one with a one-page ring that is read only at the end, one capped at 50
// groups a second. The small ring's groups and its counted losses add up
// to the reference's groups; the capped one writes fewer groups, counts
// the ones it held back, and loses no time but what is still held at the
// end (its time never exceeds the reference's).
func TestSchedLossCounted(t *testing.T) {
	const interval = time.Millisecond
	load := func(o Options) *Program {
		o.SchedInterval = interval
		p, err := Load(o)
		testchild.RequireKernel(t, "BPF", err, ErrPermission, ErrNotSupported)
		t.Cleanup(func() { p.Close() })
		return p
	}
	ref, small, capped := load(Options{}), load(Options{SchedRingBytes: 4096}), load(Options{MaxRate: 50})
	child := testchild.Start(t, testchild.OTelCtxPublisher(t), "work", "memfd", filepath.Join(t.TempDir(), "truth"))
	child.Line(t, 5*time.Second)
	// Attach all three while the child is stopped, so that their
	// accounting starts at the same switch.
	if err := syscall.Kill(child.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	testchild.WaitStopped(t, child.Pid)
	for _, p := range []*Program{ref, small, capped} {
		if err := p.AddPlainTarget(child.Pid); err != nil {
			t.Fatal(err)
		}
		if err := p.AttachSched(); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Kill(child.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var refN, cappedN int
	var refTime, cappedTime uint64
	drain := func(p *Program, n *int, total *uint64) {
		if _, err := p.DrainSched(func(r *SchedRecord) {
			if r.Pid == uint32(child.Pid) {
				*n++
				*total += r.Count * uint64(interval)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	// The measurement window, 3 s of the child's switches, drained as
	// the engine drains them.
	for time.Since(start) < 3*time.Second {
		time.Sleep(100 * time.Millisecond)
		drain(ref, &refN, &refTime)
		drain(capped, &cappedN, &cappedTime)
	}
	// And detach them while it is stopped again.
	if err := syscall.Kill(child.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(child.Pid, syscall.SIGCONT)
	testchild.WaitStopped(t, child.Pid)
	for _, p := range []*Program{ref, small, capped} {
		if err := p.RemoveTarget(child.Pid); err != nil {
			t.Fatal(err)
		}
	}
	wall := time.Since(start)
	drain(ref, &refN, &refTime)
	drain(capped, &cappedN, &cappedTime)
	var smallN int
	var smallTime uint64
	drain(small, &smallN, &smallTime)
	rs, _ := ref.Stats()
	ss, _ := small.Stats()
	cs, _ := capped.Stats()
	t.Logf("over %v: reference %d groups (%v), dropped %d; one-page ring %d groups + %d dropped; capped %d groups (%v), %d held back",
		wall.Round(time.Millisecond), refN, time.Duration(refTime), rs.SchedDropped, smallN, ss.SchedDropped, cappedN, time.Duration(cappedTime), cs.SchedDeferred)
	if refN < 300 || rs.SchedDropped != 0 {
		t.Fatalf("reference: %d groups, %d dropped: want ≥ 300 and none", refN, rs.SchedDropped)
	}
	// Each program reads the clock itself, some microseconds after the
	// one attached before it (the first records of the two rings differ
	// by 8.5 µs): at a switch-in close to a crossing of the interval one
	// may write a group that the other writes at the thread's next
	// switch-in: at the end of the run, or merged with its next group
	// into one, so the counts of groups may differ by one at every
	// crossing the two saw on either side of (4 of 485 in a CI run under
	// load). A loss that went uncounted would be one every time the ring
	// is full, hundreds here: 1% tells them apart.
	tol := max(1, refN/100)
	if d := smallN + int(ss.SchedDropped) - refN; ss.SchedDropped == 0 || d < -tol || d > tol {
		t.Errorf("one-page ring: %d groups + %d dropped, want some dropped and %d in all (± %d)", smallN, ss.SchedDropped, refN, tol)
	}
	secs := int(wall/time.Second) + 1
	if cappedN > 50*secs || cs.SchedDeferred == 0 || cappedTime > refTime || cappedTime < refTime/3 {
		t.Errorf("capped at 50/s: %d groups over %d windows, %d held back, %v of the reference's %v", cappedN, secs, cs.SchedDeferred, time.Duration(cappedTime), time.Duration(refTime))
	}
}

// TestSchedSwitchCost measures what the scheduler program costs a context
// switch, with the kernel's BPF run-time statistics, on a target that does
// little but switch (two threads handing a token through pipes) with the
// program's default capture credit: the README's figure, "about 0.3 µs a
// switch", held here to under 1 µs on average.
func TestSchedSwitchCost(t *testing.T) {
	// The receiver's defaults: groups of 10 ms, a stack read at most
	// once per millisecond per thread on average.
	p, err := Load(Options{SchedInterval: 10 * time.Millisecond, CaptureGap: time.Millisecond, CaptureEvery: 1, RunStats: true})
	testchild.RequireKernel(t, "BPF", err, ErrPermission, ErrNotSupported)
	defer p.Close()
	child := testchild.Start(t, testchild.Build(t, "spin"), "-pingpong", "100000", "-hop", "40")
	if err := p.AddPlainTarget(child.Pid); err != nil {
		t.Fatal(err)
	}
	if err := p.AttachSched(); err != nil {
		t.Fatal(err)
	}
	before, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	child.Send(t, "go")
	if err := child.Cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	after, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	runs, ns := after.RunCount-before.RunCount, after.RunTime-before.RunTime
	switches := after.SchedCaptured + after.SchedUncaptured - before.SchedCaptured - before.SchedUncaptured
	if runs == 0 {
		testchild.Unavailable(t, "the kernel's BPF run-time statistics counted no run (BPF_ENABLE_STATS needs CAP_SYS_ADMIN)")
	}
	per := ns / time.Duration(runs)
	t.Logf("%d runs of the scheduler program (%d switch-outs of the target, %d captured), %v a run", runs, switches, after.SchedCaptured-before.SchedCaptured, per)
	if switches < 100_000 {
		t.Errorf("%d switch-outs of a target that made 200 000", switches)
	}
	if per > time.Microsecond {
		t.Errorf("%v a run of the scheduler program, want under 1 µs", per)
	}
}
