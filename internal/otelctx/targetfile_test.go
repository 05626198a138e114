package otelctx

import (
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/perfprof/perfprof/internal/limits"
	"github.com/perfprof/perfprof/internal/targetfile"
	"github.com/perfprof/perfprof/internal/testchild"
)

// A process whose /proc/PID/maps is longer than targetfile.MaxMapsBytes
// is not read: the error says which bound it reached.
func TestMapsBound(t *testing.T) {
	testchild.BloatMaps(t, targetfile.MaxMapsBytes)
	_, err := ProcessContext(os.Getpid())
	if k, ok := limits.KindOf(err); !ok || k != limits.FileTooLarge || !errors.Is(err, targetfile.ErrTooLarge) {
		t.Fatalf("maps over %d bytes: %v, want a %v error", targetfile.MaxMapsBytes, err, limits.FileTooLarge)
	}
	if _, err := LocateTLS(os.Getpid()); !errors.Is(err, targetfile.ErrTooLarge) {
		t.Fatalf("LocateTLS: %v, want ErrTooLarge", err)
	}
}

// A process can replace the path of a file it mapped with a FIFO, whose
// open would wait for a writer, or a link to /dev/zero: neither is read.
func TestMappedFileSwapped(t *testing.T) {
	fifo, zero := testchild.FIFOAndZero(t, t.TempDir(), "lib")
	maps := []mapping{
		{start: 0x1000, end: 0x2000, perms: "r-xp", name: fifo},
		{start: 0x3000, end: 0x4000, perms: "r-xp", name: zero},
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		objs, err := loadObjects(os.Getpid(), maps)
		if err != nil || len(objs) != 0 {
			t.Errorf("loadObjects = %d objects, %v; want none", len(objs), err)
		}
		closeObjects(objs)
		for _, name := range []string{fifo, zero} {
			if k, err := statKey(name); !errors.Is(err, targetfile.ErrNotRegular) {
				t.Errorf("statKey(%s) = %v, %v; want ErrNotRegular", name, k, err)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		if f, err := os.OpenFile(fifo, os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			f.Close() // let the blocked open return, for the test to end
		}
		t.Fatal("opening a mapped file swapped for a FIFO did not return")
	}
}
