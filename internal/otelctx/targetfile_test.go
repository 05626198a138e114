package otelctx

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
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

// TestDynsymBound: the dynamic symbols of an object a target maps are
// read only up to maxDynsymBytes. Here a copy of /bin/true whose .dynsym
// section header says 1 TiB, in a sparse file that long: debug/elf would
// read every byte of it.
func TestDynsymBound(t *testing.T) {
	src, err := os.ReadFile("/bin/true")
	if err != nil {
		testchild.Unavailable(t, "%v", err)
	}
	ef, err := elf.NewFile(bytes.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	idx := -1
	for i, s := range ef.Sections {
		if s.Type == elf.SHT_DYNSYM {
			idx = i
		}
	}
	if idx < 0 || ef.Class != elf.ELFCLASS64 {
		testchild.Unavailable(t, "/bin/true has no 64-bit .dynsym")
	}
	shoff := binary.LittleEndian.Uint64(src[0x28:])
	hdr := src[shoff+uint64(idx)*64:]
	binary.LittleEndian.PutUint64(hdr[24:], 1<<30) // sh_offset
	binary.LittleEndian.PutUint64(hdr[32:], 1<<40) // sh_size
	name := filepath.Join(t.TempDir(), "bloated.so")
	if err := os.WriteFile(name, src, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(name, 1<<30+1<<40); err != nil {
		testchild.Unavailable(t, "no sparse file of 1 TiB here: %v", err)
	}
	f, err := elf.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	o := &object{path: name, f: f}
	done := make(chan struct{})
	go func() {
		o.dynsyms()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("reading the symbols of a 1 TiB .dynsym did not end in 10 s")
	}
	if k, ok := limits.KindOf(symbolErrs([]*object{o})); !ok || k != limits.FileTooLarge || len(o.syms) != 0 {
		t.Fatalf("symbols %d, error %v: want none, and FileTooLarge", len(o.syms), o.symErr)
	}
}
