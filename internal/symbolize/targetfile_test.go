package symbolize

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/perfprof/perfprof/internal/limits"
	"github.com/perfprof/perfprof/internal/targetfile"
	"github.com/perfprof/perfprof/internal/testchild"
)

// A process whose /proc/PID/maps is longer than targetfile.MaxMapsBytes
// is not read, and the bound is counted.
func TestMapsBound(t *testing.T) {
	testchild.BloatMaps(t, targetfile.MaxMapsBytes)
	rec := limits.NewRecorder(nil)
	c := NewCache(Options{Limits: rec})
	defer c.Close()
	_, err := c.Process(os.Getpid())
	if !errors.Is(err, targetfile.ErrTooLarge) {
		t.Fatalf("maps over %d bytes: %v, want ErrTooLarge", targetfile.MaxMapsBytes, err)
	}
	if n := rec.Counts()[limits.FileTooLarge]; n != 1 {
		t.Errorf("%d file_too_large counted, want 1", n)
	}
}

// A target can swap the path of a binary it maps for a FIFO between our
// check of the path and our open of it: opening a FIFO waits for a
// writer. The binary is opened once, and checked once opened.
func TestBinarySwappedForFIFO(t *testing.T) {
	dir := t.TempDir()
	elf := filepath.Join(dir, "elf")
	copyFile(t, "/usr/bin/true", elf)
	path := filepath.Join(dir, "bin")
	m := &Mapping{Start: 1, Limit: 2, Path: path} // no such map_files entry: the paths are tried

	stop := make(chan struct{})
	swapped := make(chan struct{})
	go func() {
		defer close(swapped)
		tmp := filepath.Join(dir, "tmp")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			var err error
			if i%2 == 0 {
				err = os.Link(elf, tmp)
			} else {
				err = unix.Mkfifo(tmp, 0o600)
			}
			if err == nil {
				err = os.Rename(tmp, path)
			}
			if err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { close(stop); <-swapped }()

	rec := limits.NewRecorder(nil)
	done := make(chan int)
	go func() {
		opened := 0
		for range 20000 {
			c := NewCache(Options{Limits: rec})
			if _, err := c.acquire(os.Getpid(), m); err == nil {
				opened++
			}
			c.Close()
		}
		done <- opened
	}()
	select {
	case opened := <-done:
		refused := rec.Counts()[limits.FileRefused]
		t.Logf("%d opened, %d refused", opened, refused)
		if refused == 0 {
			t.Error("no FIFO refusal counted")
		}
	case <-time.After(60 * time.Second):
		// An open of the FIFO is blocked: unblock it for the test to end.
		if f, err := os.OpenFile(path, os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		t.Fatal("opening a binary swapped for a FIFO did not return")
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY, 0o700)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// A perf map on a file system that stops answering (FUSE here, NFS) stalls
// the Update that reads it, not the lookups of the map: they need its
// lock, which the read does not hold.
func TestPerfMapStalledRead(t *testing.T) {
	path, reads := testchild.StalledFile(t, 4096)
	m := newPerfMapAt(path)
	go m.Update() // returns at the test's cleanup, when the file system goes
	select {
	case <-reads:
	case <-time.After(10 * time.Second):
		t.Fatal("Update did not read the perf map")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Lookup(0x1000, Latest)
		m.Found()
		m.Stats()
		m.Reread()
		if m.TryUpdate() {
			t.Error("TryUpdate ran while an Update was reading")
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a lookup waited for the read of the perf map")
	}
}
