package profiler

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/perfprof/perfprof/internal/container"
)

// An app names its process and threads on its spans (the resource's
// process.pid, the span's thread.id) by the ids of its own pid namespace.
// Where that is not the collector's (a per-node collector, apps in
// containers), those ids are not the ones of its samples: pid 1 of every
// container looks the same, and a container's thread 7 is the host's
// thread 41234. spanIDs maps them to the collector's: the process by its
// pid in its own namespace, told apart by the span resource's container.id
// (or, without one, the one target with that pid), and the thread by the
// ids the threads of the process have in its namespace, learnt from
// /proc/PID/task/TID/status (NSpid) when the read loop first sees a thread,
// or by a scan of the process's threads when a span names one not seen.
type spanIDs struct {
	procs Procs
	log   *zap.Logger

	mu      sync.Mutex
	byPid   map[int]*procIDs   // live targets by the collector's pid
	byLocal map[int][]*procIDs // and by their pid in their own namespace
	// byID and byPod index the live targets by the container.IDKey of
	// each of their cgroups' ids and by their pod's uid, so that a span
	// names its process in a few map lookups, however many targets a
	// node has, and whatever container ids a client sends.
	byID, byPod map[string][]*procIDs
	// warned is when spans were last said to be unmapped.
	warned time.Time
}

// procIDs is what spanIDs knows of one target.
type procIDs struct {
	pid   int
	ident Identity
	// tids maps the ids of the threads of a nested process in its own
	// namespace to the collector's.
	tids map[uint32]uint32
	// scanned is when the threads were last listed for a span's thread
	// that was not known.
	scanned time.Time
}

// Bounds on the work a span that names an unknown thread may cause: the
// threads of a process are listed at most once per threadScanGap, at most
// maxThreadScan of them (a span can name any thread id, and a client may
// send many).
const (
	threadScanGap = time.Second
	maxThreadScan = 1 << 14
	// maxLocalTids bounds the thread ids remembered per process.
	maxLocalTids = 1 << 16
)

// unmappedWarnGap spaces the warnings about spans that could not be
// mapped; the counter counts them all.
const unmappedWarnGap = time.Minute

func newSpanIDs(procs Procs, log *zap.Logger) *spanIDs {
	return &spanIDs{procs: procs, log: log, byPid: map[int]*procIDs{}, byLocal: map[int][]*procIDs{},
		byID: map[string][]*procIDs{}, byPod: map[string][]*procIDs{}}
}

// add registers a target attached with pid, replacing a process that had
// its pid.
func (m *spanIDs) add(pid int, ident Identity) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.removeLocked(pid)
	p := &procIDs{pid: pid, ident: ident}
	if ident.Nested {
		p.tids = map[uint32]uint32{}
	}
	m.byPid[pid] = p
	m.byLocal[ident.LocalPid] = append(m.byLocal[ident.LocalPid], p)
	for _, k := range idKeys(ident.Cgroup) {
		m.byID[k] = append(m.byID[k], p)
	}
	if pod := ident.Cgroup.PodUID; pod != "" {
		m.byPod[pod] = append(m.byPod[pod], p)
	}
}

// idKeys returns the distinct index keys of the ids of c.
func idKeys(c container.Cgroup) []string {
	var keys []string
	for _, id := range c.IDs {
		if k := container.IDKey(id); k != "" && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// dropFrom removes p from the list of m under key.
func dropFrom[K comparable](m map[K][]*procIDs, key K, p *procIDs) {
	list := m[key]
	for i, q := range list {
		if q == p {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(m, key)
	} else {
		m[key] = list
	}
}

// remove forgets the target of pid.
func (m *spanIDs) remove(pid int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.removeLocked(pid)
}

func (m *spanIDs) removeLocked(pid int) {
	p := m.byPid[pid]
	if p == nil {
		return
	}
	delete(m.byPid, pid)
	dropFrom(m.byLocal, p.ident.LocalPid, p)
	for _, k := range idKeys(p.ident.Cgroup) {
		dropFrom(m.byID, k, p)
	}
	if pod := p.ident.Cgroup.PodUID; pod != "" {
		dropFrom(m.byPod, pod, p)
	}
}

// thread notes that thread tid of the nested target pid is local in its
// own namespace.
func (m *spanIDs) thread(pid int, tid, local uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.byPid[pid]; p != nil && p.tids != nil {
		p.learn(local, tid)
	}
}

// learn notes that the thread local of p in its namespace is tid. With
// the lock held.
func (p *procIDs) learn(local, tid uint32) { putBounded(p.tids, local, tid) }

// putBounded sets m[k] = v, first forgetting all of m when it holds
// maxLocalTids keys and not k: a process that makes a thread per request
// has had millions over its life, and those of its last threads must
// stay known. What is forgotten is learnt again (a thread's first sample,
// or a scan of the process's threads) when a span names it.
func putBounded(m map[uint32]uint32, k, v uint32) {
	if _, ok := m[k]; !ok && len(m) >= maxLocalTids {
		clear(m)
	}
	m[k] = v
}

// mapSpans rewrites the Pid and Tid of spans in place into the collector's
// ids, and returns which it could not map (nil when it mapped them all):
// the caller leaves those out of the thread join. A span that names its
// process by none of process.pid, container.id and k8s.pod.uid keeps its
// ids: nothing says which process it is of.
func (m *spanIDs) mapSpans(spans []Span) (unmapped []bool) {
	mark := func(i int) {
		if unmapped == nil {
			unmapped = make([]bool, len(spans))
		}
		unmapped[i] = true
	}
	// The spans whose process is a nested target but whose thread is not
	// known yet, with their thread ids in its namespace.
	type pending struct {
		i     int
		p     *procIDs
		local uint32
	}
	var wait []pending
	// The spans of a request come a resource at a time: its process is
	// found once.
	memo := map[resourceIDs]found{}
	m.mu.Lock()
	for i := range spans {
		p, local, ok := m.mapSpan(&spans[i], memo)
		switch {
		case !ok:
			mark(i)
		case p != nil:
			wait = append(wait, pending{i, p, local})
		}
	}
	m.mu.Unlock()
	if wait == nil {
		return unmapped
	}
	// Threads the read loop has not seen (no sample yet, or only off-CPU
	// groups read after they exited): list the process's threads, off
	// the lock, at most once per threadScanGap.
	now := time.Now()
	lists := map[*procIDs]map[uint32]uint32{}
	m.mu.Lock()
	for _, w := range wait {
		if _, ok := lists[w.p]; ok || now.Sub(w.p.scanned) < threadScanGap {
			continue
		}
		w.p.scanned = now
		lists[w.p] = nil
	}
	m.mu.Unlock()
	for p := range lists {
		if tids, err := m.procs.ThreadIDs(p.pid, maxThreadScan); err == nil {
			lists[p] = tids
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for p, tids := range lists {
		for local, tid := range tids {
			p.learn(local, tid)
		}
	}
	for _, w := range wait {
		sp := &spans[w.i]
		if tid := w.p.tids[w.local]; tid != 0 {
			sp.Tid = tid
		} else {
			mark(w.i)
			m.warn(sp.Name, fmt.Sprintf("process %d (pid %d in its own pid namespace) has no thread %d there, or it ended before it was seen",
				w.p.pid, w.p.ident.LocalPid, w.local))
		}
	}
	return unmapped
}

// mapSpan maps one span; with the lock held. It reports false when the
// span cannot be mapped. When the span's process is a nested target that
// has no known thread of the span's thread id, it returns the target and
// that id, to list its threads.
func (m *spanIDs) mapSpan(sp *Span, memo map[resourceIDs]found) (*procIDs, uint32, bool) {
	key := resourceIDs{sp.Pid, sp.ContainerID, sp.PodUID}
	f, ok := memo[key]
	if !ok {
		f.p, f.keep, f.why = m.process(sp.Pid, sp.ContainerID, sp.PodUID)
		memo[key] = f
	}
	p, keep, why := f.p, f.keep, f.why
	if p == nil {
		if !keep {
			m.warn(sp.Name, why)
		}
		return nil, 0, keep
	}
	sp.Pid = uint32(p.pid)
	if !p.ident.Nested {
		return nil, 0, true
	}
	if tid := p.tids[sp.Tid]; tid != 0 {
		sp.Tid = tid
		return nil, 0, true
	}
	return p, sp.Tid, true
}

// resourceIDs are what a span's resource names its process by.
type resourceIDs struct {
	pid      uint32
	cid, pod string
}

// found is what process found for a resourceIDs.
type found struct {
	p    *procIDs
	keep bool
	why  string
}

// process finds the target a resource names by its process.pid (pid, 0
// when none), container.id (cid, "" when none) and k8s.pod.uid (pod, ""
// when none): the one whose pid in its own namespace is pid and whose
// cgroups are of that container, or else of that pod (an app in a cgroup
// namespace of its own, as containers on cgroup v2 are, finds no
// container id, but is told its pod's uid by the downward API). When
// there is none, keep says whether the ids may stand as they are (they
// name no target, or nothing says which process), else why names the
// reason. With the lock held.
func (m *spanIDs) process(pid uint32, cid, pod string) (p *procIDs, keep bool, why string) {
	if pid == 0 && cid == "" && pod == "" {
		return nil, true, ""
	}
	// From the smallest index that holds the process, the others checked.
	ofPid := func(p *procIDs) bool { return pid == 0 || p.ident.LocalPid == int(pid) }
	var cands []*procIDs
	switch {
	case cid != "":
		cands = filterProcs(m.byID[container.IDKey(cid)], func(p *procIDs) bool { return ofPid(p) && container.MatchID(cid, p.ident.Cgroup) })
	case pod != "":
		pod = strings.ToLower(pod)
		cands = filterProcs(m.byPod[pod], ofPid)
	default:
		cands = m.byLocal[int(pid)]
	}
	switch len(cands) {
	case 1:
		return cands[0], false, ""
	case 0:
		// No target is that process. A process that is not (yet) a
		// target keeps its ids, unless they name a target that is
		// another process: a nested target whose pid in the collector's
		// namespace is the resource's process.pid.
		if pid != 0 && m.byPid[int(pid)] == nil {
			return nil, true, ""
		}
		return nil, false, fmt.Sprintf("no target is process.pid %d%s in its own pid namespace", pid, inContainer(cid, pod))
	}
	return nil, false, fmt.Sprintf("%d targets are process.pid %d%s in their pid namespaces; the resource needs a container.id that tells them apart",
		len(cands), pid, inContainer(cid, pod))
}

func filterProcs(ps []*procIDs, keep func(*procIDs) bool) []*procIDs {
	var out []*procIDs
	for _, p := range ps {
		if keep(p) {
			out = append(out, p)
		}
	}
	return out
}

// pid maps the process a resource names (see process) to the collector's
// pid, 0 when it names a target it cannot be told from others.
func (m *spanIDs) pid(pid uint32, cid, pod string) uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, keep, _ := m.process(pid, cid, pod)
	switch {
	case p != nil:
		return uint32(p.pid)
	case keep:
		return pid
	}
	return 0
}

func inContainer(id, pod string) string {
	switch {
	case id != "":
		return " of container " + id
	case pod != "":
		return " of pod " + pod
	}
	return ""
}

// warn says, at most once per unmappedWarnGap, why a span is left out of
// the thread join. With the lock held.
func (m *spanIDs) warn(span, why string) {
	if now := time.Now(); now.Sub(m.warned) >= unmappedWarnGap {
		m.warned = now
		m.log.Warn("Spans name processes or threads by ids this collector cannot map to its own; they are passed on, but their samples are not joined to them by thread "+
			"(otelcol_receiver_perfprof_spans{outcome=\"unmapped\"} counts them; this message repeats at most once a minute)",
			zap.String("reason", why), zap.String("span", span))
	}
}
