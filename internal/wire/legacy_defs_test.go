package wire

import (
	"bytes"
	"reflect"
	"testing"
)

func TestLegacyDefsRotation(t *testing.T) {
	var d LegacyDefs
	writeFile := func(w *LegacyWriter) {
		t.Helper()
		for range 2 { // the second round must write no definitions
			if err := d.EnsureThreadName(w, 4242, "w-1"); err != nil {
				t.Fatal(err)
			}
			if err := d.EnsureCallframe(w, 0x401000, "main", "m.rs:3", true); err != nil {
				t.Fatal(err)
			}
			if err := d.EnsureCallframe(w, 0xFFFFFFFF81000000, "k", "", false); err != nil {
				t.Fatal(err)
			}
			if err := d.EnsureSpawnLoc(w, 7, "a.rs:1:2"); err != nil {
				t.Fatal(err)
			}
			rec := LegacyRecord{Code: LegacyCpuSample, Tid: 4242, Frames: []uint64{0x401000, 0xFFFFFFFF81000000}}
			if err := w.Write(&rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	wantCodes := []LegacyCode{LegacyThreadNameDef, LegacyCallframeDef, LegacyCallframeDef, LegacySpawnLocationDef, LegacyCpuSample, LegacyCpuSample}
	codes := func(data []byte) []LegacyCode {
		t.Helper()
		_, recs, err := readLegacy(data)
		if err != nil {
			t.Fatal(err)
		}
		var cs []LegacyCode
		for _, r := range recs {
			cs = append(cs, r.Code)
		}
		return cs
	}

	// File 1, then file 2 through a new writer: every definition again.
	var f1, f2, f3 bytes.Buffer
	w1, _ := NewLegacyWriter(&f1, 13)
	writeFile(w1)
	w2, _ := NewLegacyWriter(&f2, 13)
	writeFile(w2)
	if got := codes(f1.Bytes()); !reflect.DeepEqual(got, wantCodes) {
		t.Fatalf("file 1 codes %v, want %v", got, wantCodes)
	}
	if !bytes.Equal(f1.Bytes(), f2.Bytes()) {
		t.Fatalf("file 2 differs from file 1:\n% x\n% x", f2.Bytes(), f1.Bytes())
	}

	// NewFile with the same writer also re-emits (a writer over a rotating sink).
	w3, _ := NewLegacyWriter(&f3, 13)
	writeFile(w3)
	d.NewFile()
	writeFile(w3)
	if got := codes(f3.Bytes()); !reflect.DeepEqual(got, append(append([]LegacyCode{}, wantCodes...), wantCodes...)) {
		t.Fatalf("after NewFile codes %v", got)
	}

	// A renamed thread is defined again within the same file.
	var f4 bytes.Buffer
	w4, _ := NewLegacyWriter(&f4, 13)
	d.EnsureThreadName(w4, 1, "a")
	d.EnsureThreadName(w4, 1, "a")
	d.EnsureThreadName(w4, 1, "b")
	if got := codes(f4.Bytes()); len(got) != 2 {
		t.Fatalf("rename: %d records, want 2", len(got))
	}
}
