package testchild

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// BloatMaps maps, into the test process itself, a file with a path of
// some 4000 bytes (near PATH_MAX) as many times as it takes for
// /proc/self/maps to be longer than minBytes, as a hostile target can;
// the mappings go at the test's cleanup. The test must not run in
// parallel with others that read the process's maps.
func BloatMaps(tb testing.TB, minBytes int64) {
	tb.Helper()
	dir := tb.TempDir()
	comp := strings.Repeat("d", 250)
	for len(dir) < 3800 {
		dir = filepath.Join(dir, comp)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		tb.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "f"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(4096); err != nil {
		tb.Fatal(err)
	}
	// A line of maps pads its path to column 73, and ends in a newline.
	line := int64(73 + len(f.Name()) + 1)
	n := int(minBytes/line) + 1
	var maps [][]byte
	tb.Cleanup(func() {
		for _, m := range maps {
			unix.Munmap(m)
		}
	})
	for range n {
		// Each maps offset 0: neighbours do not continue each other's
		// offsets, so the kernel keeps them apart.
		m, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ, unix.MAP_PRIVATE)
		if err != nil {
			tb.Fatalf("mapping %d of %d: %v", len(maps), n, err)
		}
		maps = append(maps, m)
	}
}

// FIFOAndZero makes in dir, under names that start with prefix, the two
// files a target puts where a regular file of its is expected: a FIFO
// (opening it waits for a writer) and a link to /dev/zero (reading it
// never ends).
func FIFOAndZero(tb testing.TB, dir, prefix string) (fifo, zero string) {
	tb.Helper()
	fifo = filepath.Join(dir, prefix+"fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		tb.Fatal(err)
	}
	zero = filepath.Join(dir, prefix+"zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		tb.Fatal(err)
	}
	return fifo, zero
}
