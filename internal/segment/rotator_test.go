package segment

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/wire"
)

var rotTestSchema = &wire.Schema{Name: "RotTest", HasTimestamp: true, Fields: []wire.Field{
	{Name: "seq", Type: wire.Varint}, {Name: "loc", Type: wire.PooledString}, {Name: "payload", Type: wire.Bytes}}}

// rotBatch returns a batch function writing events seq..seq+k-1 with
// payloads of size bytes each.
func rotBatch(seq uint64, k, size int, ts uint64) func(w *wire.Writer) error {
	return func(w *wire.Writer) error {
		for i := range k {
			p := make([]byte, size)
			for j := range p {
				p[j] = byte(int(seq) + i + j*7)
			}
			err := w.Write(rotTestSchema, ts+uint64(i), wire.Value{Type: wire.Varint, U: seq + uint64(i)},
				wire.Value{Type: wire.PooledString, S: fmt.Sprintf("loc%d", i%3)}, wire.Value{Type: wire.Bytes, B: p})
			if err != nil {
				return err
			}
		}
		return nil
	}
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// readSegment reads a whole segment, checks its start (§A.10) and returns
// the seq and timestamp of its RotTest events. Errors are reported.
func readSegment(t *testing.T, path string, meta map[string]string) (seqs, tss []uint64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd := wire.NewReader(f)
	var evs []*wire.Event
	for {
		ev, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: after %d events: %v", path, len(evs), err)
		}
		evs = append(evs, ev)
	}
	if len(evs) < 3 || evs[0].Name() != "ClockSyncEvent" || evs[1].Name() != "SegmentMetadataEvent" ||
		evs[2].Name() != "ClockSyncEvent" {
		t.Fatalf("%s: segment does not start with ClockSync, SegmentMetadata, ClockSync", path)
	}
	if st := rd.Stats(); st.Headers < 2 {
		t.Errorf("%s: %d stream headers, want ≥ 2", path, st.Headers)
	}
	if rt, _ := evs[0].Uint("realtime_ns"); rt == 0 {
		t.Errorf("%s: ClockSync without realtime", path)
	}
	got := map[string]string{}
	for _, p := range evs[1].Field("entries").Map {
		got[p.Key] = p.Value
	}
	for k, v := range meta {
		if got[k] != v {
			t.Errorf("%s: metadata %s = %q, want %q", path, k, got[k], v)
		}
	}
	for _, ev := range evs[3:] {
		if ev.Name() != "RotTest" {
			continue
		}
		s, _ := ev.Uint("seq")
		seqs = append(seqs, s)
		tss = append(tss, ev.Timestamp)
	}
	return seqs, tss
}

// segments lists the files in dir, sorted by segment number.
func segments(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	slices.SortFunc(names, func(a, b string) int { return segNum(a) - segNum(b) })
	return names
}

func segNum(name string) int {
	var n int
	fmt.Sscanf(strings.TrimPrefix(name, "seg."), "%d", &n)
	return n
}

func TestRotatorSize(t *testing.T) {
	dir := t.TempDir()
	meta := map[string]string{"service": "svc", "boot_id": "b1"}
	r, err := New(Options{Dir: dir, Prefix: "seg", MaxFileSize: 8 << 10, Metadata: meta})
	if err != nil {
		t.Fatal(err)
	}
	var seq uint64
	for range 100 {
		if err := r.WriteBatch(rotBatch(seq, 5, 200, 1e9+seq*1000)); err != nil {
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
		if err := r.WriteBatch(rotBatch(seq, 1, 10, uint64(clk.t.UnixNano()))); err != nil {
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

func TestRotatorRetention(t *testing.T) {
	dir := t.TempDir()
	const maxTotal = 40 << 10
	r, err := New(Options{Dir: dir, Prefix: "seg", MaxFileSize: 8 << 10, MaxTotalSize: maxTotal})
	if err != nil {
		t.Fatal(err)
	}
	var seq uint64
	for range 200 {
		if err := r.WriteBatch(rotBatch(seq, 4, 250, 1e9+seq)); err != nil {
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

func TestRotatorCompress(t *testing.T) {
	dir := t.TempDir()
	meta := map[string]string{"k": "v"}
	r, err := New(Options{Dir: dir, Prefix: "seg", MaxFileSize: 4 << 10, Compress: true, Metadata: meta})
	if err != nil {
		t.Fatal(err)
	}
	var seq uint64
	for range 30 {
		if err := r.WriteBatch(rotBatch(seq, 3, 300, 5e9+seq)); err != nil {
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

func TestRotatorEmpty(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "dir")
	r, err := New(Options{Dir: dir, Prefix: "seg"})
	if err != nil {
		t.Fatal(err)
	}
	// A batch writing nothing is dropped; a failing batch writes nothing.
	if err := r.WriteBatch(func(*wire.Writer) error { return nil }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := r.WriteBatch(func(w *wire.Writer) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if names := segments(t, dir); len(names) != 0 {
		t.Fatalf("files left: %v", names)
	}
	if err := r.WriteBatch(rotBatch(0, 1, 1, 1)); err == nil {
		t.Fatal("WriteBatch after Close succeeded")
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
	if err := r.WriteBatch(rotBatch(0, 2, 10, 1e9)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "seg.10.bin.active")); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	readSegment(t, filepath.Join(dir, "seg.10.bin"), nil)
	if _, err := os.Stat(filepath.Join(dir, "seg.9.bin.active")); err != nil {
		t.Error("leftover active segment was touched")
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
	if err := r.WriteBatch(rotBatch(0, 2, 10, 1e9)); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteBatch(rotBatch(2, 2, 10, 2e9)); err != nil {
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
	r.WriteBatch(rotBatch(0, 1, 1, 1e9))
	r.SetMetadata(map[string]string{"a": "1", "b": "2"})
	r.WriteBatch(rotBatch(1, 1, 1, 2e9))
	r.Close()
	evs, err := wire.ReadAll(mustOpen(t, filepath.Join(dir, "seg.0.bin")))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range evs {
		names = append(names, e.Name())
	}
	want := []string{"ClockSyncEvent", "SegmentMetadataEvent", "ClockSyncEvent", "RotTest",
		"SegmentMetadataEvent", "ClockSyncEvent", "RotTest"}
	if !slices.Equal(names, want) {
		t.Fatalf("events %v", names)
	}
	if m := evs[4].Field("entries").Map; len(m) != 2 {
		t.Errorf("new metadata %v", m)
	}
}

func mustOpen(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestRotatorDiskFull(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount: %v: %s", err, out)
		}
	})
	r, err := New(Options{Dir: dir, Prefix: "seg", MaxFileSize: 48 << 10})
	if err != nil {
		t.Fatal(err)
	}
	var seq uint64
	var werr error
	for range 1000 {
		if werr = r.WriteBatch(rotBatch(seq, 6, 1000, 1e9+seq)); werr != nil {
			break
		}
		seq += 6
	}
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("got %v, want ENOSPC", werr)
	}
	// A second attempt fails too, and changes nothing.
	if err := r.WriteBatch(rotBatch(seq, 6, 1000, 1e9+seq)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("retry: got %v", err)
	}
	check := func() []uint64 {
		var all []uint64
		for _, name := range segments(t, dir) {
			s, _ := readSegment(t, filepath.Join(dir, name), nil)
			all = append(all, s...)
		}
		for i, s := range all {
			if s != uint64(i) {
				t.Fatalf("event %d has seq %d", i, s)
			}
		}
		return all
	}
	names := segments(t, dir)
	if len(names) < 2 || !strings.HasSuffix(names[len(names)-1], ".bin.active") {
		t.Fatalf("files %v", names)
	}
	// Sealed files and the active one read completely: whole batches only.
	if got := check(); len(got) != int(seq) {
		t.Fatalf("%d events on disk, %d written", len(got), seq)
	}
	if st := r.Stats(); st.WriteErrors != 2 {
		t.Errorf("stats %+v", st)
	}

	if out, err := exec.Command("mount", "-o", "remount,size=1m", dir).CombinedOutput(); err != nil {
		t.Fatalf("remount: %v: %s", err, out)
	}
	for range 20 {
		if err := r.WriteBatch(rotBatch(seq, 6, 1000, 1e9+seq)); err != nil {
			t.Fatalf("after remount: %v", err)
		}
		seq += 6
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if got := check(); len(got) != int(seq) {
		t.Fatalf("%d events on disk, %d written", len(got), seq)
	}
	for _, name := range segments(t, dir) {
		if !strings.HasSuffix(name, ".bin") {
			t.Errorf("unsealed file %s", name)
		}
	}
}

// TestRotatorLegacy rotates TOKIOTRC v13 segments by size: every segment
// starts with the header and defines every callframe and thread it uses.
func TestRotatorLegacy(t *testing.T) {
	dir := t.TempDir()
	r, err := New(Options{Dir: dir, Prefix: "old", MaxFileSize: 4 << 10, LegacyVersion: 13, Compress: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.WriteBatch(rotBatch(0, 1, 1, 1)); err == nil {
		t.Fatal("WriteBatch on a legacy rotator: no error")
	}
	const batches, per = 60, 10
	for b := range batches {
		err := r.WriteLegacyBatch(func(w *wire.LegacyWriter, defs *wire.LegacyDefs) error {
			for i := range per {
				tid := uint32(100 + i%3)
				frames := []uint64{0x1000 + uint64(i%4), 0x2000}
				for _, a := range frames {
					if err := defs.EnsureCallframe(w, a, fmt.Sprintf("fn%x", a), "f.rs:1", true); err != nil {
						return err
					}
				}
				if err := defs.EnsureThreadName(w, tid, fmt.Sprintf("t%d", tid)); err != nil {
					return err
				}
				rec := wire.LegacyRecord{Code: wire.LegacyCpuSample, TsUs: uint32(b*per + i), Tid: tid, Worker: 255, Frames: frames}
				if err := w.Write(&rec); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	names := segments(t, dir)
	if len(names) < 3 {
		t.Fatalf("%d segments, want several: %v", len(names), names)
	}
	var ts []uint32
	for _, name := range names {
		if !strings.HasSuffix(name, ".bin.gz") {
			t.Fatalf("segment %s is not compressed", name)
		}
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		lr, err := wire.NewLegacyReader(f)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		frames, threads := map[uint64]bool{}, map[uint32]bool{}
		for {
			var rec wire.LegacyRecord
			err := lr.Read(&rec)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			switch rec.Code {
			case wire.LegacyCallframeDef:
				frames[rec.Addr] = true
			case wire.LegacyThreadNameDef:
				threads[rec.Tid] = true
			case wire.LegacyCpuSample:
				for _, a := range rec.Frames {
					if !frames[a] {
						t.Fatalf("%s: sample at %d µs uses frame %#x before its CallframeDef", name, rec.TsUs, a)
					}
				}
				if !threads[rec.Tid] {
					t.Fatalf("%s: sample uses thread %d before its ThreadNameDef", name, rec.Tid)
				}
				ts = append(ts, rec.TsUs)
			}
		}
		f.Close()
	}
	if len(ts) != batches*per {
		t.Fatalf("%d samples read back, %d written", len(ts), batches*per)
	}
	for i, x := range ts {
		if x != uint32(i) {
			t.Fatalf("sample %d has timestamp %d", i, x)
		}
	}
}

// TestRotatorFresh: the fresh flag is set exactly for the first batch of
// each segment, and again after a failed batch's segment was lost.
func TestRotatorFresh(t *testing.T) {
	dir := t.TempDir()
	r, err := New(Options{Dir: dir, Prefix: "f", MaxFileSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var fresh []bool
	for i := range 6 {
		err := r.WriteSegmentBatch(func(w *wire.Writer, f bool) error {
			fresh = append(fresh, f)
			return rotBatch(uint64(i), 1, 600, 1e9)(w)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	r.Close()
	// 600-byte batches: the second batch of a segment takes it past 1000 bytes.
	want := []bool{true, false, true, false, true, false}
	if !slices.Equal(fresh, want) {
		t.Fatalf("fresh %v, want %v", fresh, want)
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
		if err := r.WriteBatch(rotBatch(seq, 2, 600, 5e9+seq)); err != nil {
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
