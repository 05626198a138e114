package segment

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/wire"
)

func TestRotatorSize(t *testing.T) {
	dir := t.TempDir()
	meta := map[string]string{"service": "svc", "boot_id": "b1"}
	r, err := New(Options{Dir: dir, Prefix: "seg", MaxFileSize: 8 << 10, Metadata: meta})
	if err != nil {
		t.Fatal(err)
	}
	var seq uint64
	for range 100 {
		if err := writeBatch(r, rotBatch(seq, 5, 200, 1e9+seq*1000)); err != nil {
			t.Fatal(err)
		}
		seq += 5
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	names := segments(t, dir)
	if len(names) < 5 {
		t.Fatalf("%d segments, want many: %v", len(names), names)
	}
	var all []uint64
	for i, name := range names {
		if name != fmt.Sprintf("seg.%d.bin", i) {
			t.Fatalf("segment %d is %s", i, name)
		}
		fi, _ := os.Stat(filepath.Join(dir, name))
		if i < len(names)-1 && (fi.Size() <= 8<<10 || fi.Size() > 8<<10+2<<10) {
			t.Errorf("%s: %d bytes", name, fi.Size())
		}
		s, _ := readSegment(t, filepath.Join(dir, name), meta)
		all = append(all, s...)
	}
	if len(all) != int(seq) {
		t.Fatalf("%d events read, %d written", len(all), seq)
	}
	for i, s := range all {
		if s != uint64(i) {
			t.Fatalf("event %d has seq %d", i, s)
		}
	}
	st := r.Stats()
	if st.Segments != len(names) || st.Batches != 100 || st.WriteErrors != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestRotatorTime(t *testing.T) {
	dir := t.TempDir()
	clk := &fakeClock{time.Date(2026, 5, 1, 12, 0, 30, 0, time.UTC)}
	r, err := New(Options{Dir: dir, Prefix: "seg", Interval: time.Minute, Now: clk.now,
		Monotonic: func() uint64 { return uint64(clk.t.UnixNano()) }})
	if err != nil {
		t.Fatal(err)
	}
	// One batch every 7 s for 5 minutes; the event timestamp is the clock.
	var seq uint64
	for clk.t.Before(time.Date(2026, 5, 1, 12, 5, 30, 0, time.UTC)) {
		if err := writeBatch(r, rotBatch(seq, 1, 10, uint64(clk.t.UnixNano()))); err != nil {
			t.Fatal(err)
		}
		seq++
		clk.t = clk.t.Add(7 * time.Second)
	}
	// No batch after the boundary: Tick seals.
	clk.t = time.Date(2026, 5, 1, 12, 6, 0, 0, time.UTC)
	if err := r.Tick(); err != nil {
		t.Fatal(err)
	}
	if n := len(segments(t, dir)); n != 6 {
		t.Fatalf("%d segments, want 6 (12:00 to 12:05): %v", n, segments(t, dir))
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	var total int
	for i, name := range segments(t, dir) {
		seqs, tss := readSegment(t, filepath.Join(dir, name), nil)
		total += len(seqs)
		min := time.Date(2026, 5, 1, 12, i, 0, 0, time.UTC)
		for _, ts := range tss {
			if tm := time.Unix(0, int64(ts)).UTC(); tm.Truncate(time.Minute) != min {
				t.Errorf("%s: event at %v, outside minute %v", name, tm, min)
			}
		}
	}
	if total != int(seq) {
		t.Errorf("%d events read, %d written", total, seq)
	}
}

func TestRotatorNotWritable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	_, err := New(Options{Dir: filepath.Join(file, "sub"), Prefix: "seg"})
	if err == nil || !strings.Contains(err.Error(), "directory") {
		t.Fatalf("got %v", err)
	}
	if _, err := New(Options{Dir: t.TempDir(), Prefix: "a/b"}); err == nil {
		t.Fatal("prefix with a slash accepted")
	}
}

func TestRotatorVanished(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	r, err := New(Options{Dir: dir, Prefix: "seg"})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeBatch(r, rotBatch(0, 2, 10, 1e9)); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := writeBatch(r, rotBatch(2, 2, 10, 2e9)); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if names := segments(t, dir); !slices.Equal(names, []string{"seg.1.bin"}) {
		t.Fatalf("files %v", names)
	}
	if s, _ := readSegment(t, filepath.Join(dir, "seg.1.bin"), nil); !slices.Equal(s, []uint64{2, 3}) {
		t.Fatalf("events %v", s)
	}
	if st := r.Stats(); st.Abandoned != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestRotatorMetadataChange(t *testing.T) {
	dir := t.TempDir()
	r, err := New(Options{Dir: dir, Prefix: "seg", Metadata: map[string]string{"a": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	writeBatch(r, rotBatch(0, 1, 1, 1e9))
	r.SetMetadata(map[string]string{"a": "1", "b": "2"})
	writeBatch(r, rotBatch(1, 1, 1, 2e9))
	r.Close()
	evs, err := wire.ReadAll(mustOpen(t, filepath.Join(dir, "seg.0.bin")))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range evs {
		names = append(names, e.Name())
	}
	want := []string{wire.NameClockSync, wire.NameSegmentMetadata, wire.NameClockSync, "RotTest",
		wire.NameSegmentMetadata, wire.NameClockSync, "RotTest"}
	if !slices.Equal(names, want) {
		t.Fatalf("events %v", names)
	}
	if m := wire.LayoutOf(evs[4].Schema).SegmentMetadata(evs[4]).Entries; len(m) != 2 {
		t.Errorf("new metadata %v", m)
	}
}
