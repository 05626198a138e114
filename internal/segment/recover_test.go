package segment

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/perfprof/perfprof/internal/wire"
)

// crashedSegment writes batches of per events into a rotator and returns
// the bytes of its active segment as a crash would leave them, with the
// offset where each batch ends. The metadata changes before the last
// batch, so that it is written with a re-emitted segment start.
func crashedSegment(t *testing.T, batches, per int) (data []byte, ends []int64) {
	t.Helper()
	dir := t.TempDir()
	r, err := New(Options{Dir: dir, Prefix: "seg", Metadata: map[string]string{"a": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for b := range batches {
		if b == batches-1 {
			r.SetMetadata(map[string]string{"a": "2"})
		}
		if err := writeBatch(r, rotBatch(uint64(b*per), per, 8, 1e9+uint64(b*per))); err != nil {
			t.Fatal(err)
		}
		ends = append(ends, r.size)
	}
	data, err = os.ReadFile(filepath.Join(dir, "seg.0.bin.active"))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) != ends[len(ends)-1] {
		t.Fatalf("active segment holds %d bytes, the rotator wrote %d", len(data), ends[len(ends)-1])
	}
	return data, ends
}

// recoverBytes puts data as seg.5.bin.active into a fresh directory and
// starts a rotator on it.
func recoverBytes(t *testing.T, data []byte, opts Options) (*Rotator, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "seg.5.bin.active"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	opts.Dir, opts.Prefix = dir, "seg"
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return r, dir
}

// wholeEvents counts the RotTest events a plain reader gets from data
// before it stops.
func wholeEvents(data []byte) int64 {
	evs, _ := wire.ReadAll(bytes.NewReader(data))
	var n int64
	for _, ev := range evs {
		if ev.Name() == "RotTest" {
			n++
		}
	}
	return n
}

// TestRecoverEveryOffset cuts an active segment at every byte offset, as a
// SIGKILL in the middle of a write may, and checks that recovery keeps
// exactly the batches that were whole, seals them and counts the rest.
func TestRecoverEveryOffset(t *testing.T) {
	const batches, per = 4, 5
	data, ends := crashedSegment(t, batches, per)
	t.Logf("segment of %d bytes, batches end at %v", len(data), ends)
	for c := 0; c <= len(data); c++ {
		r, dir := recoverBytes(t, data[:c], Options{})
		whole := 0 // batches that end at or before c
		for whole < len(ends) && ends[whole] <= int64(c) {
			whole++
		}
		s := r.Stats()
		if whole == 0 {
			if s.RecoveredEmpty != 1 || s.Recovered != 0 || s.RecoveredCutBytes != int64(c) {
				t.Fatalf("cut at %d: stats %+v, want the leftover deleted", c, s)
			}
			if names := segments(t, dir); len(names) != 0 {
				t.Fatalf("cut at %d: %v left", c, names)
			}
		} else {
			keep := ends[whole-1]
			got, err := os.ReadFile(filepath.Join(dir, "seg.5.bin"))
			if err != nil {
				t.Fatalf("cut at %d: %v", c, err)
			}
			if !bytes.Equal(got, data[:keep]) {
				t.Fatalf("cut at %d: sealed %d bytes, want the %d of %d whole batches", c, len(got), keep, whole)
			}
			if s.Recovered != 1 || s.RecoveredCutBytes != int64(c)-keep {
				t.Fatalf("cut at %d: stats %+v, want 1 recovered, %d bytes cut", c, s, int64(c)-keep)
			}
			if want := wholeEvents(data[:c]) - int64(whole*per); s.RecoveredDroppedEvents != want || want > per {
				t.Fatalf("cut at %d: %d events dropped, the cut bytes hold %d whole (at most a batch's %d)",
					c, s.RecoveredDroppedEvents, want, per)
			}
			seqs, _ := readSegment(t, filepath.Join(dir, "seg.5.bin"), nil)
			if len(seqs) != whole*per || (len(seqs) > 0 && seqs[len(seqs)-1] != uint64(whole*per-1)) {
				t.Fatalf("cut at %d: read %d events, want %d", c, len(seqs), whole*per)
			}
		}
		if c%31 == 0 {
			// Numbering goes on after the leftover.
			if err := writeBatch(r, rotBatch(1000, 1, 1, 1)); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(dir, "seg.6.bin.active")); err != nil {
				t.Fatalf("cut at %d: next segment: %v", c, err)
			}
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRecoverGarbageTail: bytes that are no batch after the whole ones,
// even ones that look like a batch end and a stream header, are cut.
func TestRecoverGarbageTail(t *testing.T) {
	data, _ := crashedSegment(t, 3, 4)
	tails := map[string][]byte{
		"zeros":        make([]byte, 100),
		"header":       slices.Concat(streamStart, []byte{0xff, 1, 2}),
		"random":       []byte("\x02\x00\x00\x13\x37\x99garbage\x03\x00\x00\x00\x00"),
		"fake end+hdr": slices.Concat(streamStart, []byte{0x02, 0x07}, batchEnd, streamStart),
	}
	for name, tail := range tails {
		t.Run(name, func(t *testing.T) {
			r, dir := recoverBytes(t, slices.Concat(data, tail), Options{})
			defer r.Close()
			got, err := os.ReadFile(filepath.Join(dir, "seg.5.bin"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("sealed %d bytes, want the %d of the whole batches", len(got), len(data))
			}
			if s := r.Stats(); s.Recovered != 1 || s.RecoveredCutBytes != int64(len(tail)) {
				t.Fatalf("stats %+v, want %d bytes cut", s, len(tail))
			}
			if seqs, _ := readSegment(t, filepath.Join(dir, "seg.5.bin"), nil); len(seqs) != 12 {
				t.Fatalf("%d events, want 12", len(seqs))
			}
		})
	}
}

// TestRecoverEmpty: an active file with nothing, or with only the segment
// start, is deleted and counted.
func TestRecoverEmpty(t *testing.T) {
	data, ends := crashedSegment(t, 1, 3)
	start := int64(bytes.Index(data[wire.HeaderSize:], streamStart)) + int64(wire.HeaderSize)
	start += int64(bytes.Index(data[start+1:], streamStart)) + 1 // the third stream: the batch
	if start <= 0 || start >= ends[0] {
		t.Fatalf("no batch stream found in %d bytes", len(data))
	}
	for _, c := range []int64{0, start} {
		r, dir := recoverBytes(t, data[:c], Options{})
		if s := r.Stats(); s.RecoveredEmpty != 1 || s.RecoveredCutBytes != c || s.RecoveredDroppedEvents != 0 {
			t.Errorf("%d bytes: stats %+v", c, s)
		}
		if names := segments(t, dir); len(names) != 0 {
			t.Errorf("%d bytes: %v left", c, names)
		}
		r.Close()
	}
}

// TestRecoverCompressRetention: recovered segments are gzipped with
// Compress, and join retention, oldest first; a sealed segment whose
// compression a crash interrupted is compressed again.
func TestRecoverCompressRetention(t *testing.T) {
	data, ends := crashedSegment(t, 3, 4)
	dir := t.TempDir()
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("seg.1.bin.active", data[:ends[1]+7]) // cut in the third batch
	write("seg.2.bin", data)                    // sealed, then killed while gzipping
	write("seg.2.bin.gz", []byte{0x1f, 0x8b, 8})
	write("seg.3.bin.active", data)
	r, err := New(Options{Dir: dir, Prefix: "seg", Compress: true, MaxTotalSize: 3*int64(len(data)) + 100})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := writeBatch(r, rotBatch(uint64(100+i), 1, 8, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	s := r.Stats()
	if s.Recovered != 2 || s.RecoveredCutBytes != 7 || s.RotateErrors != 0 {
		t.Errorf("stats %+v, want 2 recovered, 7 bytes cut", s)
	}
	if s.Deleted != 1 {
		t.Errorf("%d segments deleted by retention, want 1 (seg.1)", s.Deleted)
	}
	names := segments(t, dir)
	if want := []string{"seg.2.bin.gz", "seg.3.bin.gz", "seg.4.bin.gz"}; !slices.Equal(names, want) {
		t.Fatalf("segments %v, want %v", names, want)
	}
	for name, n := range map[string]int{"seg.2.bin.gz": 12, "seg.3.bin.gz": 12, "seg.4.bin.gz": 3} {
		if seqs, _ := readSegment(t, filepath.Join(dir, name), nil); len(seqs) != n {
			t.Errorf("%s: %d events, want %d", name, len(seqs), n)
		}
	}
}

// TestRecoverLiveWriter: an active segment whose writer is alive is not
// recovered; the second writer is refused with a clear error.
func TestRecoverLiveWriter(t *testing.T) {
	dir := t.TempDir()
	a, err := New(Options{Dir: dir, Prefix: "seg"})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeBatch(a, rotBatch(0, 2, 8, 1)); err != nil {
		t.Fatal(err)
	}
	_, err = New(Options{Dir: dir, Prefix: "seg"})
	if err == nil || !strings.Contains(err.Error(), "being written by another process") {
		t.Fatalf("second writer: error %v", err)
	}
	if err := writeBatch(a, rotBatch(2, 2, 8, 2)); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if seqs, _ := readSegment(t, filepath.Join(dir, "seg.0.bin"), nil); len(seqs) != 4 {
		t.Fatalf("%d events, want 4", len(seqs))
	}
	// Sealed, the lock is gone: a new writer starts.
	b, err := New(Options{Dir: dir, Prefix: "seg"})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
}

// TestRecoverLegacy cuts a TOKIOTRC segment at a sample of offsets: every
// whole record is kept (legacy batches have no mark of their end), nothing
// cut is readable.
func TestRecoverLegacy(t *testing.T) {
	dir := t.TempDir()
	r, err := New(Options{Dir: dir, Prefix: "seg", LegacyVersion: 17})
	if err != nil {
		t.Fatal(err)
	}
	var ends []int64
	for b := range 3 {
		err := r.WriteLegacyBatch(func(w *wire.LegacyWriter, defs *wire.LegacyDefs) error {
			for i := range 4 {
				if err := defs.EnsureCallframe(w, uint64(0x1000+i), "fn", "f.rs:1", true); err != nil {
					return err
				}
				rec := wire.LegacyRecord{Code: wire.LegacyCpuSample, TsUs: uint32(b*4 + i), Tid: 7, Worker: 255, Frames: []uint64{uint64(0x1000 + i)}}
				if err := w.Write(&rec); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		ends = append(ends, r.size)
	}
	data, err := os.ReadFile(filepath.Join(dir, "seg.0.bin.active"))
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	for c := 0; c <= len(data); c += 3 {
		rr, rdir := recoverBytes(t, data[:c], Options{LegacyVersion: 17})
		got, err := os.ReadFile(filepath.Join(rdir, "seg.5.bin"))
		samples := 0
		if err == nil {
			lr, err := wire.NewLegacyReader(bytes.NewReader(got))
			if err != nil {
				t.Fatalf("cut at %d: %v", c, err)
			}
			var rec wire.LegacyRecord
			for {
				err := lr.Read(&rec)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("cut at %d: recovered segment: %v", c, err)
				}
				if rec.Code == wire.LegacyCpuSample {
					samples++
				}
			}
			if !bytes.Equal(got, data[:len(got)]) {
				t.Fatalf("cut at %d: recovered bytes are not a prefix", c)
			}
		}
		whole := 0
		for whole < len(ends) && ends[whole] <= int64(c) {
			whole++
		}
		if samples < whole*4 || samples > len(ends)*4 {
			t.Fatalf("cut at %d: %d samples kept, %d batches were whole", c, samples, whole)
		}
		if s := rr.Stats(); s.Recovered+s.RecoveredEmpty != 1 || s.RecoveredCutBytes != int64(c-len(got)) {
			t.Fatalf("cut at %d: stats %+v, kept %d", c, s, len(got))
		}
		rr.Close()
	}
}
