package wire

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
)

func TestLegacyTruncated(t *testing.T) {
	for _, g := range legacyGoldens {
		// Start offsets of the records, to know what each cut should report.
		starts := []int{legacyHeaderLen}
		for i := range g.recs {
			b, err := legacyAppend(nil, g.version, &g.recs[i])
			if err != nil {
				t.Fatal(err)
			}
			starts = append(starts, starts[len(starts)-1]+len(b))
		}
		for cut := 0; cut < len(g.data); cut++ {
			_, recs, err := readLegacy(g.data[:cut])
			if cut < legacyHeaderLen {
				if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.HasPrefix(fmt.Sprint(err), "wire: legacy offset 0: header: truncated") {
					t.Fatalf("v%d cut %d: err = %v", g.version, cut, err)
				}
				continue
			}
			// n = number of complete records before the cut.
			n := 0
			for n+1 < len(starts) && starts[n+1] <= cut {
				n++
			}
			if !reflect.DeepEqual(recs, g.recs[:n]) && !(n == 0 && recs == nil) {
				t.Fatalf("v%d cut %d: got %d records, want %d", g.version, cut, len(recs), n)
			}
			if cut == starts[n] {
				if err != nil {
					t.Fatalf("v%d cut %d at a record boundary: err = %v", g.version, cut, err)
				}
				continue
			}
			want := fmt.Sprintf("wire: legacy offset %d: record code %d: truncated", starts[n], g.recs[n].Code)
			if !errors.Is(err, io.ErrUnexpectedEOF) || err.Error() != want {
				t.Fatalf("v%d cut %d: err = %v, want %q", g.version, cut, err, want)
			}
			var le *LegacyError
			if !errors.As(err, &le) || le.Offset != int64(starts[n]) {
				t.Fatalf("v%d cut %d: not a *LegacyError with offset %d: %#v", g.version, cut, starts[n], err)
			}
		}
	}
}

func TestLegacyUnknownCode(t *testing.T) {
	tests := []struct {
		name    string
		version uint32
		code    byte
	}{
		{"code 12", 13, 12},
		{"code 255", 18, 255},
		{"TaskTerminate in v13", 13, 172},
		{"SegmentMetadata in v16", 16, 11},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := writeLegacy(t, tt.version, []LegacyRecord{{Code: LegacyPollEnd, TsUs: 1, Worker: 2}})
			off := len(data)
			data = append(data, tt.code, 0, 0, 0, 0, 0, 0, 0, 0)
			_, recs, err := readLegacy(data)
			if len(recs) != 1 {
				t.Fatalf("got %d records before the unknown code, want 1", len(recs))
			}
			if !errors.Is(err, ErrLegacyUnknownCode) {
				t.Fatalf("err = %v, want ErrLegacyUnknownCode", err)
			}
			want := fmt.Sprintf("wire: legacy offset %d: record code %d: unknown record code in version %d", off, tt.code, tt.version)
			if err.Error() != want {
				t.Fatalf("err = %q, want %q", err, want)
			}
		})
	}
}

func TestLegacyHeaderErrors(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, io.ErrUnexpectedEOF},
		{"magic", []byte("TOKIOTRX\x0d\x00\x00\x00"), ErrLegacyMagic},
		{"TRC v1", []byte("TRC\x00\x01\x00\x00\x00\x00\x00\x00\x00"), ErrLegacyMagic},
		{"version 12", []byte("TOKIOTRC\x0c\x00\x00\x00"), ErrLegacyVersion},
		{"version 19", []byte("TOKIOTRC\x13\x00\x00\x00"), ErrLegacyVersion},
		{"bad gzip", []byte{0x1f, 0x8b, 0x00}, io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewLegacyReader(bytes.NewReader(tt.data))
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "wire: legacy offset 0: header: ") {
				t.Fatalf("err = %q", err)
			}
		})
	}
}

func TestLegacyWriterRejects(t *testing.T) {
	if _, err := NewLegacyWriter(io.Discard, 12); !errors.Is(err, ErrLegacyVersion) {
		t.Fatalf("version 12: err = %v", err)
	}
	tests := []struct {
		name    string
		version uint32
		rec     LegacyRecord
		want    error
	}{
		{"TaskTerminate in v13", 13, LegacyRecord{Code: LegacyTaskTerminate}, ErrLegacyUnknownCode},
		{"SegmentMetadata in v16", 16, LegacyRecord{Code: LegacySegmentMetadata}, ErrLegacyUnknownCode},
		{"code 12", 18, LegacyRecord{Code: 12}, ErrLegacyUnknownCode},
		{"256 frames", 13, LegacyRecord{Code: LegacyCpuSample, Frames: make([]uint64, 256)}, ErrLegacyTooLong},
		{"long symbol", 13, LegacyRecord{Code: LegacyCallframeDef, Symbol: strings.Repeat("x", 0x10000)}, ErrLegacyTooLong},
		{"location 0xFFFF", 13, LegacyRecord{Code: LegacyCallframeDef, HasLocation: true, Location: strings.Repeat("x", 0xFFFF)}, ErrLegacyTooLong},
		{"long thread name", 13, LegacyRecord{Code: LegacyThreadNameDef, Name: strings.Repeat("x", 0x10000)}, ErrLegacyTooLong},
		{"long metadata value", 17, LegacyRecord{Code: LegacySegmentMetadata, Metadata: []LegacyKV{{"k", strings.Repeat("x", 0x10000)}}}, ErrLegacyTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			w, err := NewLegacyWriter(&buf, tt.version)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Write(&tt.rec); !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if buf.Len() != legacyHeaderLen {
				t.Fatalf("a rejected record wrote %d bytes", buf.Len()-legacyHeaderLen)
			}
			// The writer stays usable.
			if err := w.Write(&LegacyRecord{Code: LegacyPollEnd}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

type legacyFailWriter struct{ n int }

func (f *legacyFailWriter) Write(b []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("disk full")
	}
	f.n--
	return len(b), nil
}

func TestLegacyWriterStickyError(t *testing.T) {
	w, err := NewLegacyWriter(&legacyFailWriter{n: 1}, 13)
	if err != nil {
		t.Fatal(err)
	}
	rec := LegacyRecord{Code: LegacyPollEnd}
	err1 := w.Write(&rec)
	if err1 == nil || !strings.Contains(err1.Error(), "disk full") {
		t.Fatalf("err = %v", err1)
	}
	if err2 := w.Write(&rec); err2 == nil {
		t.Fatal("second write after failure succeeded")
	}
}

func FuzzLegacyReader(f *testing.F) {
	for _, g := range legacyGoldens {
		f.Add(g.data)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(legacyGolden13)
	zw.Close()
	f.Add(gz.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		v, recs, err := readLegacy(data)
		if err != nil {
			var le *LegacyError
			if !errors.As(err, &le) {
				t.Fatalf("error is not a *LegacyError: %v", err)
			}
			if le.Offset < 0 {
				t.Fatalf("negative offset: %v", err)
			}
		}
		if err != nil || len(data) < 2 || (data[0] == 0x1f && data[1] == 0x8b) {
			return
		}
		// A plain file read to its end re-encodes to the same bytes: the
		// encoding is canonical.
		var buf bytes.Buffer
		w, werr := NewLegacyWriter(&buf, v)
		if werr != nil {
			t.Fatal(werr)
		}
		for i := range recs {
			if werr := w.Write(&recs[i]); werr != nil {
				t.Fatalf("re-encode record %d: %v", i, werr)
			}
		}
		if !bytes.Equal(buf.Bytes(), data) {
			t.Fatalf("re-encoding differs\n got % x\nwant % x", buf.Bytes(), data)
		}
	})
}
