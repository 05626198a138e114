package symbolize

import (
	"errors"
	"os"
	"testing"
)

// TestManagedProcessSameBeforeBinding: a managed process's map is taken
// only while its pid is still the process's. A read after the pid passed
// to another process (same says no) opens none of the binaries it lists,
// keeps the map read before, and a lookup that misses every mapping does
// not read the map again.
func TestManagedProcessSameBeforeBinding(t *testing.T) {
	c := NewCache(Options{})
	defer c.Close()
	if _, err := c.ManagedProcess(os.Getpid(), func() bool { return false }); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("first read of a pid that passed on: %v, want os.ErrNotExist", err)
	}
	if n := c.Stats().FilesOpened; n != 0 {
		t.Fatalf("%d files opened for a pid that passed on, want none", n)
	}

	same := true
	p, err := c.ManagedProcess(os.Getpid(), func() bool { return same })
	if err != nil {
		t.Fatal(err)
	}
	maps, opened := len(p.Mappings()), c.Stats().FilesOpened
	if maps == 0 || opened == 0 {
		t.Fatalf("%d mappings, %d files opened", maps, opened)
	}
	same = false
	p.maps = p.maps[:1] // as if the process had mapped code since
	if err := p.Refresh(); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("refresh after the pid passed on: %v, want os.ErrNotExist", err)
	}
	if n := len(p.Mappings()); n != 1 {
		t.Errorf("%d mappings after a refresh that was dropped, want the 1 kept", n)
	}
	refreshed := p.lastRefresh
	p.lastRefresh = p.lastRefresh.Add(-2 * refreshInterval)
	if ms := p.findOrRefresh(0x10); ms != nil || !p.lastRefresh.Before(refreshed) {
		t.Errorf("a lookup that missed read the map of a managed process again")
	}
	if n := c.Stats().FilesOpened; n != opened {
		t.Errorf("files opened %d → %d after the pid passed on", opened, n)
	}
}
