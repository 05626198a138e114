package targetfile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/testchild"
)

func TestReadFileBound(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "f")
	data := bytes.Repeat([]byte("x"), 100)
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(name, false, 100); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("at the bound: %d bytes, %v", len(b), err)
	}
	if _, err := ReadFile(name, false, 99); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("past the bound: %v, want ErrTooLarge", err)
	}
	// A sparse file's size is the target's to choose: refused by fstat,
	// before a byte is read.
	sparse := filepath.Join(dir, "sparse")
	f, err := os.Create(sparse)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(1 << 40)
	f.Close()
	start := time.Now()
	if _, err := ReadFile(sparse, false, 1<<20); !errors.Is(err, ErrTooLarge) || time.Since(start) > time.Second {
		t.Fatalf("sparse 1 TiB file: %v after %v", err, time.Since(start))
	}
}

func TestRefusesFIFOAndDevices(t *testing.T) {
	fifo, zero := testchild.FIFOAndZero(t, t.TempDir(), "")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, name := range []string{fifo, zero} {
			if _, err := ReadFile(name, true, 1<<20); !errors.Is(err, ErrNotRegular) {
				t.Errorf("%s: %v, want ErrNotRegular", name, err)
			}
		}
		if _, err := Open(zero, false); err == nil {
			t.Errorf("%s: a link opened without follow", zero)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("opening a FIFO or /dev/zero as a target file did not return")
	}
}

func TestReadProcBound(t *testing.T) {
	b, err := ReadProc("/proc/self/maps", 1<<20)
	if err != nil || !bytes.Contains(b, []byte("[stack]")) {
		t.Fatalf("maps: %v", err)
	}
	if _, err := ReadProc("/proc/self/maps", int64(len(b)/2)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("maps over the bound: %v, want ErrTooLarge", err)
	}
}

func TestInRoot(t *testing.T) {
	// An absolute link under /proc/self/root/ resolves in that root; with
	// the collector's root being it, the result is the same file: what
	// is checked is that openat2 is used without error.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "t"), []byte("ok"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Symlink(filepath.Join(dir, "t"), filepath.Join(dir, "l"))
	b, err := ReadFile("/proc/self/root"+filepath.Join(dir, "l"), true, 10)
	if err != nil || string(b) != "ok" {
		t.Fatalf("%q %v", b, err)
	}
}

// A file on a FUSE file system whose server does not answer is opened and
// stat'ed without asking the server to poll it: a file in the Go poller
// is polled by epoll, in the thread that adds it and in the poller's.
func TestFUSEFileNotPolled(t *testing.T) {
	path, _ := testchild.StalledFile(t, 4096)
	done := make(chan error)
	go func() {
		f, err := Open(path, false)
		if err == nil {
			_, err = f.Stat()
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("opening a file of a FUSE server that does not answer polls did not return")
	}
}
