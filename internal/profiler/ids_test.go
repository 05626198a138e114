package profiler_test

import (
	"slices"
	"testing"

	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/container"
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/internal/profiler/profilertest"
)

// TestSpansOfOtherPidNamespaces: a per-node collector samples an app of
// its own namespace and two containers whose processes are pid 1 and whose
// worker threads are thread 7 in their own namespaces. Their spans name
// those ids; each span is joined to the samples of its own container's
// thread, and only where the span says which process it is of.
func TestSpansOfOtherPidNamespaces(t *testing.T) {
	const (
		idA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		idB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	)
	host := perf.Process{Pid: 100, StartTime: 1, Comm: "app"}
	a := perf.Process{Pid: 5001, StartTime: 2, Comm: "svc"}
	b := perf.Process{Pid: 6001, StartTime: 3, Comm: "svc"}
	src := profilertest.NewRecords()
	pr := profilertest.NewProcs(host, a, b)
	pr.SetIdentity(5001, container.Identity{LocalPid: 1, Nested: true, Cgroup: container.Cgroup{ContainerID: idA, PodUID: "pod-a", IDs: []string{idA}}})
	pr.SetIdentity(6001, container.Identity{LocalPid: 1, Nested: true, Cgroup: container.Cgroup{ContainerID: idB, PodUID: "pod-b", IDs: []string{idB}}})
	for _, th := range []struct {
		pid, tid int
		local    uint32
	}{{5001, 5001, 1}, {5001, 5002, 7}, {5001, 5003, 9}, {6001, 6001, 1}, {6001, 6002, 7}} {
		pr.SetLocalTid(th.pid, th.tid, th.local)
	}
	p, err := profiler.Open(profiler.Options{Pids: []int{100, 5001, 6001}, Records: src, Procs: pr, Window: 5e9, Perf: perf.Options{Frequency: 99}})
	if err != nil {
		t.Fatal(err)
	}
	now := clock.Monotonic()
	// The threads 7 ran before their spans came: the facts worker learns
	// their ids, within milliseconds of the read loop seeing them.
	src.Push(profilertest.Sample(5001, 5002, now-25*s, 0x401000), profilertest.Sample(6001, 6002, now-25*s, 0x401000),
		profilertest.Sample(100, 101, now-25*s, 0x401000))
	src.Sync()
	sp := func(id byte, pid, tid uint32, cid string) profiler.Span {
		s := span{tid: tid, id: id, name: "s", start: 30 * s, end: 20 * s, worker: -1, resource: -1}.of(now)
		s.Pid, s.ContainerID = pid, cid
		return s
	}
	// In a pod, over [18 s, 12 s) ago.
	inPod := func(id byte, pid, tid uint32, pod string) profiler.Span {
		s := span{tid: tid, id: id, name: "s", start: 18 * s, end: 12 * s, worker: -1, resource: -1}.of(now)
		s.Pid, s.PodUID = pid, pod
		return s
	}
	c := p.AddSpans([]profiler.Span{
		sp(1, 1, 7, idA),      // container A's thread 7
		sp(2, 1, 7, idB[:12]), // container B's, by a 12-digit prefix
		sp(3, 1, 7, ""),       // pid 1 of which container?
		sp(4, 100, 101, ""),   // the host app: its ids are the collector's
		sp(5, 1, 9, idA),      // a thread of A with no sample yet: found by a scan
		sp(6, 5001, 7, ""),    // no process sees itself as pid 5001
		sp(7, 1, 99, idA),     // no thread 99 in A
		// A container that is not a target: its process is not either,
		// and its span is held with its own ids, as the spans of other
		// processes are; none of the targets is pid 1 here.
		sp(8, 1, 8, "cccccccccc"+"cc"),
		// No container.id (an app in a cgroup namespace of its own finds
		// none), but its pod's uid: pid 1 of that pod.
		inPod(9, 1, 7, "POD-B"),
		inPod(11, 1, 7, "pod-c"), // no target in that pod: held as span 8 is
	})
	if c.Indexed != 7 || c.Unmapped != 3 {
		t.Errorf("spans %+v, want 7 indexed, 3 unmapped", c)
	}
	src.Push(profilertest.Sample(5001, 5003, now-25*s, 0x401000), profilertest.Sample(6001, 6002, now-15*s, 0x401000))
	src.Sync()
	snaps, err := p.Close()
	if err != nil {
		t.Fatal(err)
	}
	links := map[[2]int][]byte{}
	for _, sn := range snaps {
		if sn.Pid == 5001 && (sn.ContainerID != idA || sn.PodUID != "pod-a") {
			t.Errorf("snapshot of %d: container %q pod %q", sn.Pid, sn.ContainerID, sn.PodUID)
		}
		for _, smp := range sn.Samples {
			links[[2]int{sn.Pid, int(smp.Tid)}] = append(links[[2]int{sn.Pid, int(smp.Tid)}], smp.Link.SpanID[0])
		}
	}
	want := map[[2]int][]byte{{5001, 5002}: {1}, {6001, 6002}: {2, 9}, {100, 101}: {4}, {5001, 5003}: {5}}
	for k, w := range want {
		got := slices.Sorted(slices.Values(links[k]))
		if !slices.Equal(got, w) {
			t.Errorf("pid %d tid %d: samples linked to spans %v, want %v (all: %v)", k[0], k[1], got, w, links)
		}
	}
	// One scan of A for the two spans naming its unknown threads in one
	// request, and one of B if its thread 7 was not named yet when the
	// spans came: never one per span.
	if pr.ThreadScans < 1 || pr.ThreadScans > 2 {
		t.Errorf("%d scans of threads, want 1 or 2 (two spans named unknown threads of A in one request)", pr.ThreadScans)
	}
	// Spans naming unknown threads again within a second list no threads.
	for i := range 100 {
		if c := p.AddSpans([]profiler.Span{sp(byte(20+i), 1, uint32(200+i), idA)}); c.Unmapped != 1 {
			t.Errorf("span of unknown thread %d: %+v", 200+i, c)
		}
	}
	if pr.ThreadScans > 3 {
		t.Errorf("%d scans of threads after 100 more unknown threads, want ≤ 3", pr.ThreadScans)
	}
	if st := p.Stats(); st.Spans.Unmapped != 103 {
		t.Errorf("cumulative unmapped %d, want 103", st.Spans.Unmapped)
	}
}
