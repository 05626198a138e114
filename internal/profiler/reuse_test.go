package profiler_test

import (
	"testing"
	"time"

	xunix "golang.org/x/sys/unix"

	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/internal/profiler/profilertest"
)

// TestSpanOfAnotherProcess: a span whose process is known links only the
// samples of that process; one of unknown process links by thread alone.
func TestSpanOfAnotherProcess(t *testing.T) {
	p, src, _ := open(t, nil)
	now := clock.Monotonic()
	spans := []profiler.Span{
		span{tid: 100, id: 1, name: "own", start: 30 * s, end: 20 * s, worker: -1, resource: -1}.of(now),
		span{tid: 101, id: 2, name: "other", start: 30 * s, end: 20 * s, worker: -1, resource: -1}.of(now),
		span{tid: 102, id: 3, name: "unknown", start: 30 * s, end: 20 * s, worker: -1, resource: -1}.of(now),
	}
	spans[0].Pid = uint32(app.Pid)
	spans[1].Pid = 4242 // in a pid namespace, or a process gone before app took the thread id
	if c := p.AddSpans(spans); c.Indexed != 3 {
		t.Fatalf("spans: %+v", c)
	}
	for tid := 100; tid <= 102; tid++ {
		src.Push(profilertest.Sample(app.Pid, tid, now-25*s, 0x401000))
	}
	src.Sync()
	snaps := p.Take(false)
	if len(snaps) != 1 || len(snaps[0].Samples) != 3 {
		t.Fatalf("%d snapshots; want one with 3 samples", len(snaps))
	}
	for _, smp := range snaps[0].Samples {
		want := smp.Tid != 101
		if smp.Link.Linked != want {
			t.Errorf("sample of tid %d: linked %v, want %v", smp.Tid, smp.Link.Linked, want)
		}
	}
	if j := p.Stats().Joins; j.OtherProcess != 1 || j.Span != 2 {
		t.Errorf("joins %+v; want 2 linked, 1 of another process", j)
	}
}

// TestForkOfTargetPid: a process forked with the pid of a target ends the
// target there, also when the read loop reads samples of the new process
// before the fork record; discovery attaches the new process at once.
func TestForkOfTargetPid(t *testing.T) {
	p, src, pr := open(t, func(o *profiler.Options) {
		o.Pids = nil
		o.Executables = []string{"app"}
		o.DiscoveryInterval = time.Hour
		o.Window = 10 * time.Millisecond
	})
	if pr.Scans() != 1 {
		t.Fatalf("%d scans at Open", pr.Scans())
	}
	t0 := clock.Monotonic()
	pr.Exit(app.Pid)
	second := perf.Process{Pid: app.Pid, StartTime: 2, Exe: "/opt/app", Comm: "app"}
	pr.Start(second)
	fork := perf.Record{Type: perf.RecordFork, Task: perf.Task{Pid: uint32(app.Pid), Tid: uint32(app.Pid), Ppid: 1, Ptid: 1, Time: t0 + 2*ms}}
	src.Push(
		profilertest.Sample(app.Pid, app.Pid, t0+1*ms, 0x401000),
		profilertest.Sample(app.Pid, app.Pid, t0+3*ms, 0x501000), // read from another CPU's ring first
		fork,
		profilertest.Sample(app.Pid, app.Pid, t0+4*ms, 0x501000),
	)
	src.Sync()
	waitFor(t, func() bool { return pr.Scans() >= 2 && p.Stats().Processes == 1 && p.Stats().ProcessesHeld == 2 })
	src.Push(profilertest.Sample(app.Pid, app.Pid, t0+5*ms, 0x502000))
	src.Sync()
	time.Sleep(20 * time.Millisecond)
	byExe := map[string][]uint64{}
	for _, sn := range p.Take(false) {
		for _, smp := range sn.Samples {
			byExe[sn.Exe] = append(byExe[sn.Exe], sn.Stacks[smp.Stack][0].Addr)
		}
	}
	if a := byExe[app.Exe]; len(a) != 1 || a[0] != 0x401000 {
		t.Errorf("target before the fork: addresses %x, want its own sample only", a)
	}
	if a := byExe[second.Exe]; len(a) != 1 || a[0] != 0x502000 {
		t.Errorf("new process: addresses %x, want the sample taken after it was attached", a)
	}
	if st := p.Stats(); st.PidReused != 2 || st.ProcessesHeld != 1 {
		t.Errorf("%d samples dropped as of a reused pid, %d processes held; want 2 and 1", st.PidReused, st.ProcessesHeld)
	}
}

// TestReleaseSeesNewProcess: when discovery releases a target whose pid
// another process has taken, the samples read since that process started
// are taken from the target, also when its fork record was missed and the
// target's image was replaced by the new process's exec.
func TestReleaseSeesNewProcess(t *testing.T) {
	p, src, pr := open(t, func(o *profiler.Options) {
		o.Pids = nil
		o.Executables = []string{"app"}
		o.DiscoveryInterval = 10 * time.Millisecond
		o.Window = 10 * time.Millisecond
	})
	// The new process starts at the next clock tick (10 ms) after t0.
	t0 := clock.Monotonic()
	tick, started := nextTick()
	src.Push(profilertest.Sample(app.Pid, app.Pid, t0, 0x401000))
	src.Sync()
	// The target exits and the new process takes its pid, between two
	// discoveries.
	pr.Start(perf.Process{Pid: app.Pid, StartTime: tick, Exe: "/usr/bin/other", Comm: "other"})
	src.Push(
		profilertest.Sample(app.Pid, app.Pid, started+1*ms, 0x501000),
		profilertest.Exec(app.Pid, started+1*ms+ms/2, "other"),
		profilertest.Sample(app.Pid, app.Pid, started+2*ms, 0x501000),
	)
	src.Sync()
	waitFor(t, func() bool { return p.Stats().Processes == 0 })
	time.Sleep(time.Duration(started + 30*ms - clock.Monotonic()))
	var addrs []uint64
	for _, sn := range p.Take(false) {
		for _, smp := range sn.Samples {
			addrs = append(addrs, sn.Stacks[smp.Stack][0].Addr)
		}
	}
	if len(addrs) != 1 || addrs[0] != 0x401000 {
		t.Errorf("addresses %x, want the target's own sample only", addrs)
	}
	if st := p.Stats(); st.PidReused != 2 {
		t.Errorf("%d samples dropped as of a reused pid, want 2", st.PidReused)
	}
}

// nextTick returns the next clock tick of process start times (USER_HZ
// ticks since boot), and when it comes in CLOCK_MONOTONIC.
func nextTick() (tick, mono uint64) {
	var b, m xunix.Timespec
	_ = xunix.ClockGettime(xunix.CLOCK_BOOTTIME, &b)
	_ = xunix.ClockGettime(xunix.CLOCK_MONOTONIC, &m)
	tick = uint64(b.Nano())/uint64(10*time.Millisecond) + 1
	return tick, tick*uint64(10*time.Millisecond) - uint64(b.Nano()-m.Nano())
}
