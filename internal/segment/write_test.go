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

	"github.com/perfprof/perfprof/internal/testchild"
	"github.com/perfprof/perfprof/internal/wire"
)

func TestRotatorEmpty(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "dir")
	r, err := New(Options{Dir: dir, Prefix: "seg"})
	if err != nil {
		t.Fatal(err)
	}
	// A batch writing nothing is dropped; a failing batch writes nothing.
	if err := writeBatch(r, func(*wire.Writer) error { return nil }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := writeBatch(r, func(w *wire.Writer) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if names := segments(t, dir); len(names) != 0 {
		t.Fatalf("files left: %v", names)
	}
	if err := writeBatch(r, rotBatch(0, 1, 1, 1)); err == nil {
		t.Fatal("WriteSegmentBatch after Close succeeded")
	}
}

func TestRotatorDiskFull(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", dir).CombinedOutput(); err != nil {
		testchild.Unavailable(t, "cannot mount a tmpfs (needs root): %v: %s", err, out)
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
		if werr = writeBatch(r, rotBatch(seq, 6, 1000, 1e9+seq)); werr != nil {
			break
		}
		seq += 6
	}
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("got %v, want ENOSPC", werr)
	}
	// A second attempt fails too, and changes nothing.
	if err := writeBatch(r, rotBatch(seq, 6, 1000, 1e9+seq)); !errors.Is(err, syscall.ENOSPC) {
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
		if err := writeBatch(r, rotBatch(seq, 6, 1000, 1e9+seq)); err != nil {
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
	if err := writeBatch(r, rotBatch(0, 1, 1, 1)); err == nil {
		t.Fatal("WriteSegmentBatch on a legacy rotator: no error")
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
