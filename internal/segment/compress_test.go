package segment

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRotatorCompress(t *testing.T) {
	dir := t.TempDir()
	meta := map[string]string{"k": "v"}
	r, err := New(Options{Dir: dir, Prefix: "seg", MaxFileSize: 4 << 10, Compress: true, Metadata: meta})
	if err != nil {
		t.Fatal(err)
	}
	var seq uint64
	for range 30 {
		if err := writeBatch(r, rotBatch(seq, 3, 300, 5e9+seq)); err != nil {
			t.Fatal(err)
		}
		seq += 3
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	var n int
	for i, name := range segments(t, dir) {
		if name != fmt.Sprintf("seg.%d.bin.gz", i) {
			t.Fatalf("file %d is %s", i, name)
		}
		b, _ := os.ReadFile(filepath.Join(dir, name))
		if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Fatalf("%s is not gzip", name)
		}
		s, _ := readSegment(t, filepath.Join(dir, name), meta)
		n += len(s)
	}
	if n != int(seq) {
		t.Errorf("%d events read, %d written", n, seq)
	}
}

// TestRotatorCompressRetention: background compression and retention race
// freely; at Close every segment left is compressed, none is orphaned, and
// the bound holds.
func TestRotatorCompressRetention(t *testing.T) {
	dir := t.TempDir()
	r, err := New(Options{Dir: dir, Prefix: "seg", MaxFileSize: 2 << 10, MaxTotalSize: 12 << 10, Compress: true})
	if err != nil {
		t.Fatal(err)
	}
	var seq uint64
	for range 300 {
		if err := writeBatch(r, rotBatch(seq, 2, 600, 5e9+seq)); err != nil {
			t.Fatal(err)
		}
		seq += 2
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	names := segments(t, dir)
	st := r.Stats()
	if st.Deleted == 0 || len(names) == 0 || len(names) > 6 {
		t.Fatalf("%d segments kept, %d deleted: %v", len(names), st.Deleted, names)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".bin.gz") {
			t.Errorf("%s left in the directory", e.Name())
		}
	}
	if len(ents) != len(names) || st.RotateErrors != 0 {
		t.Errorf("%d files, %d segments, %d rotate errors", len(ents), len(names), st.RotateErrors)
	}
	for _, name := range names {
		readSegment(t, filepath.Join(dir, name), nil)
	}
}
