package profiler

import "container/list"

// maxNamedProcesses bounds the pids whose spans named their resource.
const maxNamedProcesses = 4096

// pidNames remembers the resource that the spans of each process named
// (their resource's process.pid), for the snapshots of the process that
// none of its samples link to a span. Any client can name any pid, so
// the names follow the lifetime of processes: a target's is dropped when
// it exits (release) and when another process takes its pid (names from
// before that process started are of the old one), and when the map is
// full the least recently used name makes room for a new one, so that
// pids named once by processes gone long since cannot keep new processes
// unnamed. Guarded by engine.spansMu.
type pidNames struct {
	byPid map[int]*list.Element // of *pidName
	lru   list.List             // most recently used first
}

type pidName struct {
	pid      int
	resource int32
	at       uint64 // CLOCK_MONOTONIC of the last naming
}

// name says that pid's spans named resource at time at.
func (n *pidNames) name(pid int, resource int32, at uint64) {
	if el, ok := n.byPid[pid]; ok {
		pn := el.Value.(*pidName)
		pn.resource, pn.at = resource, at
		n.lru.MoveToFront(el)
		return
	}
	if n.byPid == nil {
		n.byPid = map[int]*list.Element{}
	}
	if len(n.byPid) >= maxNamedProcesses {
		old := n.lru.Back()
		delete(n.byPid, old.Value.(*pidName).pid)
		n.lru.Remove(old)
	}
	n.byPid[pid] = n.lru.PushFront(&pidName{pid: pid, resource: resource, at: at})
}

// get returns the resource pid's spans named, as a use.
func (n *pidNames) get(pid int) (int32, bool) {
	el, ok := n.byPid[pid]
	if !ok {
		return -1, false
	}
	n.lru.MoveToFront(el)
	return el.Value.(*pidName).resource, true
}

// forget drops the name of pid if it was given before t (any with t ==
// math.MaxUint64), and returns the resource it named.
func (n *pidNames) forget(pid int, t uint64) (int32, bool) {
	el, ok := n.byPid[pid]
	if !ok || el.Value.(*pidName).at >= t {
		return -1, false
	}
	delete(n.byPid, pid)
	n.lru.Remove(el)
	return el.Value.(*pidName).resource, true
}
