package profiler_test

import (
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/internal/profiler/profilertest"
)

// TestNewestPidsAreNamed: spans that name more processes than are
// remembered make the oldest names room; they do not leave the processes
// named last without a name.
func TestNewestPidsAreNamed(t *testing.T) {
	p, src, _ := open(t, nil)
	now := clock.Monotonic()
	for pid := 1000; pid < 6000; pid++ { // 5 000 processes, none a target
		p.NameProcess(pid, "", "", 1)
	}
	p.NameProcess(app.Pid, "", "", 2)
	src.Push(profilertest.Sample(app.Pid, 7, now-20*s, 0x401000))
	src.Sync()
	if snaps := p.Take(false); len(snaps) != 1 || snaps[0].Resource != 2 {
		t.Fatalf("snapshots %+v; want the target named by the spans that named it last", snaps)
	}
}

// TestReusedPidIsNotNamedByTheOld: the name that spans gave a process
// goes with it; a process that takes its pid later is not named by it.
func TestReusedPidIsNotNamedByTheOld(t *testing.T) {
	p, src, pr := open(t, discovering)
	now := clock.Monotonic()
	p.NameProcess(app.Pid, "", "", 4)
	src.Push(profilertest.Sample(app.Pid, app.Pid, now-20*s, 0x401000))
	src.Sync()
	// The target exits and another process takes its pid.
	pr.Exit(app.Pid)
	pr.Start(perf.Process{Pid: app.Pid, StartTime: 2, Exe: "/opt/app", Comm: "app"})
	waitFor(t, func() bool { return pr.Scans() >= 3 && src.Attached(app.Pid) && p.Stats().ProcessesHeld == 2 })
	src.Push(profilertest.Sample(app.Pid, app.Pid, now-19*s, 0x501000))
	src.Sync()
	byExe := map[string]int32{}
	for _, sn := range p.Take(false) {
		byExe[sn.Exe] = sn.Resource
	}
	if len(byExe) != 2 || byExe[app.Exe] != 4 || byExe["/opt/app"] != -1 {
		t.Errorf("resources by executable %v; want the exited target's 4 kept, none for the new process", byExe)
	}
}

// TestPidNamedBeforeItsProcessStarted: spans that named a pid before the
// process that has it now started named another process (one that was no
// target): the new target is not named by them.
func TestPidNamedBeforeItsProcessStarted(t *testing.T) {
	p, src, pr := open(t, discovering)
	p.NameProcess(200, "", "", 5) // not a target
	// The process that takes pid 200 starts at the next clock tick.
	tick, started := nextTick()
	time.Sleep(time.Duration(started + ms - clock.Monotonic()))
	pr.Start(perf.Process{Pid: 200, StartTime: tick, Exe: "/usr/bin/app", Comm: "app"})
	waitFor(t, func() bool { return src.Attached(200) })
	now := clock.Monotonic()
	src.Push(profilertest.Sample(200, 200, now-20*s, 0x401000))
	src.Sync()
	for _, sn := range p.Take(false) {
		if sn.Pid == 200 && sn.Resource != -1 {
			t.Errorf("the new process has resource %d, named before it started", sn.Resource)
		}
	}
	// Its own spans name it.
	p.NameProcess(200, "", "", 6)
	src.Push(profilertest.Sample(200, 200, now-19*s, 0x401000))
	src.Sync()
	for _, sn := range p.Take(false) {
		if sn.Pid == 200 && sn.Resource != 6 {
			t.Errorf("the new process has resource %d, want 6 its spans named", sn.Resource)
		}
	}
}

// discovering has the profiler find targets by executable (app), every
// 10 ms.
func discovering(o *profiler.Options) {
	o.Pids = nil
	o.Executables = []string{"app"}
	o.DiscoveryInterval = 10 * time.Millisecond
}
