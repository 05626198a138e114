package profiler_test

import (
	"errors"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/internal/profiler/profilertest"
	"github.com/perfprof/perfprof/internal/sched"
)

const (
	ms = uint64(time.Millisecond)
	s  = uint64(time.Second)
)

var app = perf.Process{Pid: 100, StartTime: 1, Exe: "/usr/bin/app", Comm: "app"}

// open returns a profiler over a scripted source, sampling app.
func open(t *testing.T, mod func(*profiler.Options), procs ...perf.Process) (*profiler.Profiler, *profilertest.Records, *profilertest.Procs) {
	t.Helper()
	src := profilertest.NewRecords()
	if len(procs) == 0 {
		procs = []perf.Process{app}
	}
	pr := profilertest.NewProcs(procs...)
	opts := profiler.Options{
		Pids:    []int{procs[0].Pid},
		Records: src, Procs: pr,
		Window: 5 * time.Second,
		Perf:   perf.Options{Frequency: 99},
	}
	if mod != nil {
		mod(&opts)
	}
	p, err := profiler.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.Close() })
	return p, src, pr
}

// unix converts a CLOCK_MONOTONIC time as the engine does.
func unix(mono uint64) uint64 { return clock.NewMapper().Unix(mono) }

type span struct {
	tid          uint32
	id           byte
	parent       byte
	name         string
	start, end   uint64 // mono, relative to now (subtracted)
	worker       int64
	resource     int32
	parentRemote bool
}

func (sp span) of(now uint64) profiler.Span {
	out := profiler.Span{
		Tid: sp.tid, TraceID: [16]byte{1}, SpanID: [8]byte{sp.id}, Name: sp.name,
		Start: unix(now - sp.start), End: unix(now - sp.end), WorkerID: sp.worker, Resource: sp.resource,
		ParentRemote: sp.parentRemote,
	}
	if sp.parent != 0 {
		out.ParentSpanID = [8]byte{sp.parent}
	}
	return out
}

func TestJoin(t *testing.T) {
	type sample struct {
		tid uint32
		ago uint64 // before now
	}
	type want struct {
		span   byte // 0: not linked
		root   string
		worker int64
	}
	for _, c := range []struct {
		name    string
		spans   []span
		samples []sample
		want    []want // per sample, in time order; only samples past the window
		counts  profiler.JoinCounts
	}{
		{
			name:    "a sample inside a span, one after it, one on another thread",
			spans:   []span{{tid: 7, id: 1, name: "GET /a", start: 30 * s, end: 20 * s, worker: 3, resource: -1}},
			samples: []sample{{7, 25 * s}, {7, 15 * s}, {8, 25 * s}},
			want:    []want{{1, "GET /a", 3}, {0, "", -1}, {0, "", 3}},
			counts:  profiler.JoinCounts{Span: 1, NoSpan: 2},
		},
		{
			name: "the innermost span wins; its root is the local root",
			spans: []span{
				{tid: 7, id: 1, name: "request", start: 30 * s, end: 10 * s, worker: -1, resource: -1},
				{tid: 7, id: 2, parent: 1, name: "step", start: 25 * s, end: 20 * s, worker: -1, resource: -1},
			},
			samples: []sample{{7, 28 * s}, {7, 22 * s}, {7, 15 * s}},
			want:    []want{{1, "request", -1}, {2, "request", -1}, {1, "request", -1}},
			counts:  profiler.JoinCounts{Span: 3},
		},
		{
			name: "a span whose parent is remote is its own local root",
			spans: []span{
				{tid: 7, id: 2, parent: 9, parentRemote: true, name: "server", start: 30 * s, end: 10 * s, worker: -1, resource: -1},
			},
			samples: []sample{{7, 20 * s}},
			want:    []want{{2, "server", -1}},
			counts:  profiler.JoinCounts{Span: 1},
		},
		{
			name: "unrelated spans open on one thread at once: no link",
			spans: []span{
				{tid: 7, id: 1, name: "GET /a", start: 30 * s, end: 10 * s, worker: -1, resource: -1},
				{tid: 7, id: 2, name: "GET /b", start: 25 * s, end: 15 * s, worker: -1, resource: -1},
			},
			samples: []sample{{7, 28 * s}, {7, 20 * s}, {7, 12 * s}},
			want:    []want{{1, "GET /a", -1}, {0, "", -1}, {1, "GET /a", -1}},
			counts:  profiler.JoinCounts{Span: 2, Ambiguous: 1},
		},
		{
			name:    "samples younger than the window wait",
			spans:   []span{{tid: 7, id: 1, name: "a", start: 30 * s, end: 0, worker: -1, resource: -1}},
			samples: []sample{{7, 20 * s}, {7, 1 * s}},
			want:    []want{{1, "a", -1}},
			counts:  profiler.JoinCounts{Span: 1},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, src, _ := open(t, nil)
			now := clock.Monotonic()
			var spans []profiler.Span
			for _, sp := range c.spans {
				spans = append(spans, sp.of(now))
			}
			if got := p.AddSpans(spans); got.Indexed != int64(len(spans)) {
				t.Fatalf("indexed %+v", got)
			}
			for _, smp := range c.samples {
				src.Push(profilertest.Sample(100, int(smp.tid), now-smp.ago, 0x401000))
			}
			src.Sync()
			snaps := p.Take(false)
			var got []want
			for _, sn := range snaps {
				for _, smp := range sortedSamples(sn) {
					got = append(got, want{smp.Link.SpanID[0], smp.Link.Root, smp.Link.Worker})
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("links %+v, want %+v", got, c.want)
			}
			// The cases join by thread and time only.
			wantCounts := c.counts
			wantCounts.Read[profiler.SourceThread] = wantCounts.Span
			if st := p.Stats(); st.Joins != wantCounts {
				t.Errorf("join counts %+v, want %+v", st.Joins, wantCounts)
			}
		})
	}
}

func sortedSamples(sn profiler.Snapshot) []profiler.Sample {
	out := append([]profiler.Sample(nil), sn.Samples...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time < out[j].Time })
	return out
}

func TestLateSpansAndResources(t *testing.T) {
	p, src, _ := open(t, nil)
	now := clock.Monotonic()
	src.Push(profilertest.Sample(100, 8, now-20*s, 0x401000)) // no span on its thread
	src.Sync()
	p.NameProcess(100, "", "", 4)
	snaps := p.Take(false)
	if len(snaps) != 1 || snaps[0].Resource != 4 {
		t.Fatalf("the process named by its spans' resource gets it without a linked sample: %+v", snaps)
	}
	// The span of thread 7 votes for resource 2 once a sample falls in it.
	p.AddSpans([]profiler.Span{span{tid: 7, id: 1, name: "a", start: 4 * s, end: 0, worker: -1, resource: 2}.of(now)})
	src.Push(profilertest.Sample(100, 7, now-3*s, 0x401000))
	src.Sync()
	snaps, _ = p.Close()
	if len(snaps) != 1 || snaps[0].Resource != 2 || !snaps[0].Samples[0].Link.Linked {
		t.Fatalf("final take: %+v", snaps)
	}
	// A span that ends before the watermark of the last report is late.
	c := p.AddSpans([]profiler.Span{span{tid: 7, id: 3, name: "late", start: 40 * s, end: 35 * s, worker: -1, resource: -1}.of(now)})
	if c.Late != 1 || c.Indexed != 0 {
		t.Fatalf("late span counted %+v", c)
	}
}

func TestBufferBoundTakesEarlyThenDrops(t *testing.T) {
	p, src, _ := open(t, func(o *profiler.Options) { o.Window = 10 * time.Second; o.MaxBufferedSamples = 100 })
	now := clock.Monotonic()
	for i := range 250 {
		src.Push(profilertest.Sample(100, 7, now-uint64(i)*ms, 0x401000))
	}
	src.Sync()
	select {
	case <-p.Flush():
	default:
		t.Fatal("reaching the bound did not ask for an early report")
	}
	st := p.Stats()
	if st.Samples != 200 || st.BufferFull != 50 {
		t.Fatalf("accepted %d, dropped %d; want up to twice the bound, then drops", st.Samples, st.BufferFull)
	}
	snaps := p.Take(false)
	if n := len(snaps[0].Samples); n != 150 {
		t.Fatalf("took %d early; want all but half the bound", n)
	}
	if j := p.Stats().Joins; j.Early != 150 {
		t.Fatalf("join counts %+v", j)
	}
	snaps, _ = p.Close()
	if n := len(snaps[0].Samples); n != 50 {
		t.Fatalf("final take: %d samples, want the 50 kept", n)
	}
}

// TestSchedPairing drives context-switch records through the engine and
// checks the off-CPU samples it makes: their state, weight, time and the
// stack of the switch-out they pair with.
func TestSchedPairing(t *testing.T) {
	const tid = 7
	type off struct {
		state  sched.State
		weight uint64
		at     uint64 // ms after t0
		leaf   uint64 // leaf address of the stack; 0: no stack
	}
	for _, c := range []struct {
		name string
		recs func(t0 uint64) []perf.Record
		want []off
		// deltas are the CPU deltas of the on-CPU samples, in ms.
		deltas []uint64
	}{
		{
			name: "a 25 ms sleep: 2 intervals now, the rest pending",
			recs: func(t0 uint64) []perf.Record {
				return []perf.Record{
					profilertest.Sample(100, tid, t0, 0xa),
					profilertest.SwitchSample(100, tid, t0+5*ms, 0xb),
					profilertest.SwitchOut(100, tid, t0+5*ms, false),
					profilertest.SwitchIn(100, tid, t0+30*ms),
					profilertest.Sample(100, tid, t0+40*ms, 0xa),
				}
			},
			want:   []off{{sched.Blocked, 20 * ms, 5, 0xb}},
			deltas: []uint64{0, 15},
		},
		{
			name: "preempted: runnable; the switch sample may come after the record",
			recs: func(t0 uint64) []perf.Record {
				return []perf.Record{
					profilertest.Sample(100, tid, t0, 0xa),
					profilertest.SwitchOut(100, tid, t0+1*ms, true),
					profilertest.SwitchSample(100, tid, t0+1*ms+500, 0xc),
					profilertest.SwitchIn(100, tid, t0+12*ms),
				}
			},
			want:   []off{{sched.Runnable, 10 * ms, 1, 0xc}},
			deltas: []uint64{0},
		},
		{
			name: "records delivered out of time order (rings are read per CPU)",
			recs: func(t0 uint64) []perf.Record {
				return []perf.Record{
					profilertest.SwitchIn(100, tid, t0+30*ms),
					profilertest.Sample(100, tid, t0+40*ms, 0xa),
					profilertest.Sample(100, tid, t0, 0xa),
					profilertest.SwitchOut(100, tid, t0+5*ms, false),
					profilertest.SwitchSample(100, tid, t0+5*ms, 0xb),
				}
			},
			want:   []off{{sched.Blocked, 20 * ms, 5, 0xb}},
			deltas: []uint64{0, 15},
		},
		{
			name: "a switch sample too far from the record is not its stack",
			recs: func(t0 uint64) []perf.Record {
				return []perf.Record{
					profilertest.Sample(100, tid, t0, 0xa),
					profilertest.SwitchSample(100, tid, t0+1*ms, 0xb),
					profilertest.SwitchOut(100, tid, t0+5*ms, false),
					profilertest.SwitchIn(100, tid, t0+30*ms),
				}
			},
			want:   []off{{sched.Blocked, 20 * ms, 5, 0}},
			deltas: []uint64{0},
		},
		{
			name: "short sleeps accumulate until they cross the interval",
			recs: func(t0 uint64) []perf.Record {
				var recs []perf.Record
				for i := range uint64(4) {
					b := t0 + i*4*ms
					recs = append(recs,
						profilertest.Sample(100, tid, b, 0xa),
						profilertest.SwitchSample(100, tid, b+1*ms, 0xb),
						profilertest.SwitchOut(100, tid, b+1*ms, false),
						profilertest.SwitchIn(100, tid, b+4*ms))
				}
				return recs
			},
			// 3 ms off per 4 ms: the 4th sleep brings the total to 12 ms.
			want:   []off{{sched.Blocked, 10 * ms, 13, 0xb}},
			deltas: []uint64{0, 1, 1, 1},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, src, _ := open(t, func(o *profiler.Options) {
				o.Perf.Sched = true
				o.OffCPUInterval = 10 * time.Millisecond
				o.Symbolize = false
			})
			t0 := clock.Monotonic() - 20*s
			src.Push(c.recs(t0)...)
			src.Sync()
			snaps := p.Take(false)
			if len(snaps) != 1 {
				t.Fatalf("%d snapshots", len(snaps))
			}
			var got []off
			var deltas []uint64
			first := ^uint64(0)
			for _, smp := range snaps[0].Samples {
				if !smp.OffCPU() {
					first = min(first, smp.Time)
				}
			}
			for _, smp := range sortedSamples(snaps[0]) {
				if !smp.OffCPU() {
					deltas = append(deltas, smp.Weight/ms)
					continue
				}
				o := off{state: smp.State, weight: smp.Weight, at: (smp.Time - first + ms/2) / ms}
				if smp.Stack >= 0 {
					o.leaf = snaps[0].Stacks[smp.Stack][0].Addr
				}
				got = append(got, o)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("off-CPU samples %+v, want %+v", got, c.want)
			}
			if !slices.Equal(deltas, c.deltas) {
				t.Errorf("CPU deltas %v ms, want %v", deltas, c.deltas)
			}
		})
	}
}

func TestPidReuseKeepsProcessesApart(t *testing.T) {
	p, src, pr := open(t, func(o *profiler.Options) {
		o.Pids = nil
		o.Executables = []string{"app"}
		o.DiscoveryInterval = 20 * time.Millisecond
	})
	now := clock.Monotonic()
	src.Push(profilertest.Sample(100, 100, now-20*s, 0x401000))
	src.Sync()
	// The process exits and another takes its pid.
	pr.Exit(100)
	second := perf.Process{Pid: 100, StartTime: 2, Exe: "/opt/app", Comm: "app"}
	pr.Start(second)
	waitFor(t, func() bool { return pr.Scans() >= 3 && src.Attached(100) })
	src.Push(profilertest.Sample(100, 100, now-19*s, 0x501000))
	src.Sync()
	snaps := p.Take(false)
	if len(snaps) != 2 {
		t.Fatalf("%d snapshots; want one per process", len(snaps))
	}
	sort.Slice(snaps, func(i, j int) bool { return snaps[i].Exe > snaps[j].Exe })
	for i, want := range []struct {
		exe  string
		addr uint64
	}{{"/usr/bin/app", 0x401000}, {"/opt/app", 0x501000}} {
		sn := snaps[i]
		if sn.Pid != 100 || sn.Exe != want.exe || len(sn.Samples) != 1 || sn.Stacks[0][0].Addr != want.addr {
			t.Errorf("snapshot %d: pid %d exe %s, %d samples; want %s with its own sample", i, sn.Pid, sn.Exe, len(sn.Samples), want.exe)
		}
	}
	if st := p.Stats(); st.Processes != 1 {
		t.Errorf("%d processes attached; want the new one only", st.Processes)
	}
	// The old process is dropped after its last report.
	if snaps := p.Take(false); len(snaps) != 0 {
		t.Errorf("a second report returned %d snapshots", len(snaps))
	}
}

func TestExecStartsANewImage(t *testing.T) {
	p, src, pr := open(t, nil)
	now := clock.Monotonic()
	src.Push(profilertest.Sample(100, 100, now-20*s, 0x401000))
	src.Sync()
	pr.Start(perf.Process{Pid: 100, StartTime: 1, Exe: "/usr/bin/other", Comm: "other"})
	src.Push(profilertest.Exec(100, clock.Monotonic(), "other"), profilertest.Sample(100, 100, now-19*s, 0x401000))
	src.Sync()
	snaps := p.Take(false)
	if len(snaps) != 2 {
		t.Fatalf("%d snapshots; want the image before and after exec apart", len(snaps))
	}
	sort.Slice(snaps, func(i, j int) bool { return snaps[i].Samples[0].Time < snaps[j].Samples[0].Time })
	if snaps[0].Exe != "/usr/bin/app" || snaps[1].Exe != "/usr/bin/other" || snaps[1].Comm != "other" {
		t.Errorf("before exec %s (%s), after %s (%s)", snaps[0].Exe, snaps[0].Comm, snaps[1].Exe, snaps[1].Comm)
	}
	if st := p.Stats(); st.Processes != 1 || st.Execs != 1 {
		t.Errorf("stats %+v", st)
	}
}

// The record of the exec that made the image discovery found can be read
// after the attach: it is not a new image (which would read the process
// anew and ask a JVM again).
func TestExecBeforeAttachIsTheImageFound(t *testing.T) {
	before := clock.Monotonic()
	p, src, _ := open(t, nil)
	now := clock.Monotonic()
	src.Push(profilertest.Exec(100, before, "app"), profilertest.Sample(100, 100, now-19*s, 0x401000))
	src.Sync()
	snaps := p.Take(false)
	if len(snaps) != 1 || len(snaps[0].Samples) != 1 {
		t.Fatalf("%d snapshots; want the image found, with its sample", len(snaps))
	}
	if st := p.Stats(); st.Processes != 1 || st.Execs != 0 {
		t.Errorf("stats %+v; want no exec", st)
	}
}

func TestOpenFailsWhole(t *testing.T) {
	src := profilertest.NewRecords()
	_, err := profiler.Open(profiler.Options{Pids: []int{100, 200}, Records: src, Procs: profilertest.NewProcs(app)})
	if !errors.Is(err, perf.ErrNoProcess) {
		t.Fatalf("missing pid: %v", err)
	}
	if src.Attached(100) {
		t.Error("a failed Open left a process attached")
	}
	src = profilertest.NewRecords()
	src.FailAttach(100, perf.ErrPermission)
	_, err = profiler.Open(profiler.Options{Pids: []int{100}, Records: src, Procs: profilertest.NewProcs(app)})
	if !errors.Is(err, perf.ErrPermission) {
		t.Fatalf("denied attach: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
