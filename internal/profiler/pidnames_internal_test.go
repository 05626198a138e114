package profiler

import "testing"

// TestPidNamesEvictsLeastRecentlyUsed: a full map makes room by the name
// used least recently, where a use is a naming or a lookup.
func TestPidNamesEvictsLeastRecentlyUsed(t *testing.T) {
	var n pidNames
	for pid := 1; pid <= maxNamedProcesses; pid++ {
		n.name(pid, int32(pid), 1)
	}
	n.get(1)         // used: now pid 2 is the least recent
	n.name(3, 30, 2) // named again: kept
	n.name(9999, 9, 2)
	if len(n.byPid) != maxNamedProcesses || n.lru.Len() != maxNamedProcesses {
		t.Fatalf("%d names (%d in the list), want %d", len(n.byPid), n.lru.Len(), maxNamedProcesses)
	}
	for pid, want := range map[int]int32{1: 1, 2: -1, 3: 30, 4: 4, 9999: 9} {
		if got, _ := n.get(pid); got != want {
			t.Errorf("pid %d: resource %d, want %d", pid, got, want)
		}
	}
	if _, ok := n.forget(3, 2); ok {
		t.Error("a name given at 2 forgotten as given before 2")
	}
	if h, ok := n.forget(3, 3); !ok || h != 30 {
		t.Errorf("forget(3, 3) = %d, %v; want 30, true", h, ok)
	}
}
