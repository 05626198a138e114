package container

import "fmt"

// Identity is where a process runs, as its pid namespace and its cgroups
// say: the ids its own telemetry names it by (an app reports the pid and
// thread ids of its own namespace), and its container.
type Identity struct {
	// LocalPid is the process's pid in its own pid namespace: its pid in
	// the reader's (that of /proc) when Nested is false.
	LocalPid int
	// Nested says the process is in a pid namespace below the reader's:
	// the ids it knows itself by are not the reader's.
	Nested bool
	Cgroup Cgroup
}

// ReadIdentity reads the identity of pid: its NSpid and its cgroups. A
// process of another user hides neither. On an error it returns what it
// read, with LocalPid pid when it read nothing.
func ReadIdentity(pid int) (Identity, error) {
	ids, err := ReadNSpid(pid)
	if err != nil {
		return Identity{LocalPid: pid}, err
	}
	id := Identity{LocalPid: ids[len(ids)-1], Nested: len(ids) > 1}
	if id.Cgroup, err = ReadCgroup(pid); err != nil {
		return id, fmt.Errorf("identity of pid %d: %w", pid, err)
	}
	return id, nil
}

// Selector selects processes by their cgroups: those matching one of
// Paths (MatchPath), if any, and one of IDs (MatchID), if any.
type Selector struct {
	Paths, IDs []string
}

// Empty reports whether s selects every process.
func (s Selector) Empty() bool { return len(s.Paths) == 0 && len(s.IDs) == 0 }

// Match reports whether c is selected.
func (s Selector) Match(c Cgroup) bool {
	if len(s.Paths) > 0 && !anyOf(s.Paths, func(p string) bool { return MatchPath(p, c.Paths) }) {
		return false
	}
	return len(s.IDs) == 0 || anyOf(s.IDs, func(id string) bool { return MatchID(id, c) })
}

func anyOf(list []string, f func(string) bool) bool {
	for _, s := range list {
		if f(s) {
			return true
		}
	}
	return false
}
