package segment

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestRotatorRetention(t *testing.T) {
	dir := t.TempDir()
	const maxTotal = 40 << 10
	r, err := New(Options{Dir: dir, Prefix: "seg", MaxFileSize: 8 << 10, MaxTotalSize: maxTotal})
	if err != nil {
		t.Fatal(err)
	}
	var seq uint64
	for range 200 {
		if err := writeBatch(r, rotBatch(seq, 4, 250, 1e9+seq)); err != nil {
			t.Fatal(err)
		}
		seq += 4
		var total int64
		for _, name := range segments(t, dir) {
			fi, _ := os.Stat(filepath.Join(dir, name))
			total += fi.Size()
		}
		if total > maxTotal {
			t.Fatalf("after batch %d: %d bytes on disk > %d", seq/4, total, maxTotal)
		}
	}
	r.Close()
	names := segments(t, dir)
	st := r.Stats()
	if st.Deleted == 0 || st.Deleted+len(names) != st.Segments {
		t.Fatalf("stats %+v, %d files left", st, len(names))
	}
	// The newest segments are kept, contiguously, up to the last one.
	for i, name := range names {
		if want := fmt.Sprintf("seg.%d.bin", st.Deleted+i); name != want {
			t.Errorf("file %d is %s, want %s", i, name, want)
		}
	}
	var last []uint64
	for _, name := range names {
		s, _ := readSegment(t, filepath.Join(dir, name), nil)
		last = append(last, s...)
	}
	if len(last) == 0 || last[len(last)-1] != seq-1 {
		t.Errorf("newest event missing")
	}
}

// TestRotatorForget: segments deleted from outside and forgotten (an
// upload that deletes them) no longer count against MaxTotalSize, so
// retention deletes nothing while the rest fits, and does not count them
// as deleted.
func TestRotatorForget(t *testing.T) {
	dir := t.TempDir()
	const maxTotal = 40 << 10
	r, err := New(Options{Dir: dir, Prefix: "seg", MaxFileSize: 8 << 10, MaxTotalSize: maxTotal})
	if err != nil {
		t.Fatal(err)
	}
	var seq uint64
	for range 200 {
		if err := writeBatch(r, rotBatch(seq, 4, 250, 1e9+seq)); err != nil {
			t.Fatal(err)
		}
		seq += 4
		for _, name := range segments(t, dir) {
			if strings.HasSuffix(name, ".active") {
				continue
			}
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
			r.Forget(segNum(name))
		}
	}
	r.Close()
	if st := r.Stats(); st.Deleted != 0 || st.RotateErrors != 0 || st.Segments < 10 {
		t.Fatalf("stats %+v: want no deletion by retention", st)
	}
}

func TestRotatorContinuesNumbering(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"seg.3.bin", "seg.7.bin.gz", "seg.9.bin.active", "other.20.bin", "seg.x.bin"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, err := New(Options{Dir: dir, Prefix: "seg", MaxTotalSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeBatch(r, rotBatch(0, 2, 10, 1e9)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "seg.10.bin.active")); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	readSegment(t, filepath.Join(dir, "seg.10.bin"), nil)
	// The leftover holds no whole batch: recovery deletes it, counted,
	// and its number is not reused.
	for _, name := range []string{"seg.9.bin.active", "seg.9.bin"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			t.Errorf("%s exists after recovery", name)
		}
	}
	if s := r.Stats(); s.RecoveredEmpty != 1 || s.Recovered != 0 || s.RecoveredCutBytes != 3 {
		t.Errorf("stats %+v, want 1 recovered empty, 3 bytes cut", s)
	}
}

// TestRotatorHeld: held segments (around a slow span) are neither deleted
// nor counted by retention, which deletes the others oldest first; OnBatch
// names the segment of each batch. Once let go, they count again.
func TestRotatorHeld(t *testing.T) {
	dir := t.TempDir()
	const maxTotal = 40 << 10
	held := map[int]bool{2: true, 3: true}
	var batches []int
	r, err := New(Options{Dir: dir, Prefix: "seg", MaxFileSize: 8 << 10, MaxTotalSize: maxTotal,
		Held: func(n int) bool { return held[n] }, OnBatch: func(n int) { batches = append(batches, n) }})
	if err != nil {
		t.Fatal(err)
	}
	var seq uint64
	for range 200 {
		if err := writeBatch(r, rotBatch(seq, 4, 250, 1e9+seq)); err != nil {
			t.Fatal(err)
		}
		seq += 4
	}
	names := segments(t, dir)
	has := func(n int) bool { return slices.Contains(names, fmt.Sprintf("seg.%d.bin", n)) }
	if !has(2) || !has(3) || has(0) || has(1) || has(4) {
		t.Errorf("segments left %v: want 2 and 3 held, 0, 1 and 4 deleted", names)
	}
	var total int64
	for _, name := range segments(t, dir) {
		if name == "seg.2.bin" || name == "seg.3.bin" {
			continue
		}
		fi, _ := os.Stat(filepath.Join(dir, name))
		total += fi.Size()
	}
	if total > maxTotal || total < maxTotal/2 {
		t.Errorf("%d bytes of segments not held, bound %d: the held ones were counted", total, maxTotal)
	}
	if len(batches) != 200 || batches[0] != 0 || batches[199] != r.n || !slices.IsSorted(batches) {
		t.Errorf("OnBatch told %d batches, first %v", len(batches), batches[:min(len(batches), 3)])
	}
	// Let go: the next batch's retention deletes them.
	clear(held)
	if err := writeBatch(r, rotBatch(seq, 4, 250, 1e9+seq)); err != nil {
		t.Fatal(err)
	}
	r.Close()
	for _, name := range segments(t, dir) {
		if name == "seg.2.bin" || name == "seg.3.bin" {
			t.Errorf("%s kept once let go", name)
		}
	}
}
