package wire

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/perfprof/perfprof/internal/interop"
)

// golden is the 294-byte TRC file of the worked example in
// docs/trace-format.md §A.11: a byte-layout contract, so it is a file and
// not generated. It was copied from the design repository's testdata,
// where it was written from the format's description and checked with
// dial9's own JavaScript decoder.
func golden(t testing.TB) []byte {
	b, err := os.ReadFile(filepath.Join("testdata", "trc-example-3events.bin"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const t0 = 1_000_000_000

// writeGolden writes the three events of the spec's worked example (§A.11).
func writeGolden(t testing.TB, w *Writer) {
	must(t, w.WritePollStart(PollStartEvent{Timestamp: t0, WorkerID: 0, LocalQueue: 2, TaskID: 7, SpawnLoc: "src/main.rs:10:5"}))
	must(t, w.WriteCpuSample(CpuSampleEvent{Timestamp: t0 + 500, WorkerID: 0, Tid: 4242, Source: 0,
		Callchain: []uint64{0x401000, 0x402000}, CPU: Some[uint64](3)}))
	must(t, w.WritePollEnd(PollEndEvent{Timestamp: t0 + 1500, WorkerID: 0}))
	must(t, w.Flush())
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestGoldenWrite(t *testing.T) {
	want := golden(t)
	var buf bytes.Buffer
	writeGolden(t, NewWriter(&buf))
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("typed writer output differs from golden file:\n got %x\nwant %x", buf.Bytes(), want)
	}

	// The generic Write produces the same bytes.
	buf.Reset()
	w := NewWriter(&buf)
	must(t, w.Write(PollStartSchema, t0, VarintValue(0), U8Value(2), VarintValue(7), PooledStringValue("src/main.rs:10:5")))
	must(t, w.Write(CpuSampleSchema, t0+500, VarintValue(0), U32Value(4242), U8Value(0), Absent,
		PooledStackValue([]uint64{0x401000, 0x402000}), VarintValue(3)))
	must(t, w.Write(PollEndSchema, t0+1500, VarintValue(0)))
	must(t, w.Flush())
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("generic writer output differs from golden file:\n got %x\nwant %x", buf.Bytes(), want)
	}
}

func TestGoldenRead(t *testing.T) {
	r := NewReader(bytes.NewReader(golden(t)))
	ev, err := r.Next()
	must(t, err)
	if ev.Name() != "PollStartEvent" || ev.Timestamp != t0 {
		t.Fatalf("event 1: %s at %d", ev.Name(), ev.Timestamp)
	}
	if v, _ := ev.Uint("local_queue"); v != 2 {
		t.Errorf("local_queue = %d", v)
	}
	if v, _ := ev.Uint("task_id"); v != 7 {
		t.Errorf("task_id = %d", v)
	}
	if s, _ := ev.Str("spawn_loc"); s != "src/main.rs:10:5" {
		t.Errorf("spawn_loc = %q", s)
	}
	ev, err = r.Next()
	must(t, err)
	if ev.Name() != "CpuSampleEvent" || ev.Timestamp != t0+500 {
		t.Fatalf("event 2: %s at %d", ev.Name(), ev.Timestamp)
	}
	if v, _ := ev.Uint("tid"); v != 4242 {
		t.Errorf("tid = %d", v)
	}
	if _, ok := ev.Str("thread_name"); ok || !ev.Field("thread_name").Absent {
		t.Errorf("thread_name present")
	}
	if f := ev.Field("callchain").Frames; len(f) != 2 || f[0] != 0x401000 || f[1] != 0x402000 {
		t.Errorf("callchain = %x", f)
	}
	if v, ok := ev.Uint("cpu"); !ok || v != 3 {
		t.Errorf("cpu = %d, %v", v, ok)
	}
	ev, err = r.Next()
	must(t, err)
	if ev.Name() != "PollEndEvent" || ev.Timestamp != t0+1500 {
		t.Fatalf("event 3: %s at %d", ev.Name(), ev.Timestamp)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("after last event: %v, want io.EOF", err)
	}
	want := Stats{Bytes: 294, Headers: 1, Schemas: 3, StringPoolFrames: 1, StackPoolFrames: 1, TimestampResets: 1, Events: 3}
	if got := r.Stats(); got != want {
		t.Errorf("stats = %+v, want %+v", got, want)
	}
}

// TestDemoTrace reads the trace that dial9's own code wrote and checks the
// counts that docs/trace-format.md §A.12 gives for it.
func TestDemoTrace(t *testing.T) {
	f, err := os.Open(interop.Path(t, interop.DemoTrace))
	must(t, err)
	defer f.Close()
	r := NewReader(f)
	var ev Event
	names := map[string]int{}
	var symbols, withName int
	for {
		err := r.ReadEvent(&ev)
		if err == io.EOF {
			break
		}
		must(t, err)
		names[ev.Name()]++
		switch ev.Name() {
		case "SymbolTableEntry":
			if s, _ := ev.Str("symbol_name"); s != "" {
				symbols++
			}
		case "CpuSampleEvent":
			if len(ev.Field("callchain").Frames) == 0 {
				t.Fatalf("empty callchain at event %d", r.Stats().Events)
			}
			if _, ok := ev.Str("thread_name"); ok {
				withName++
			}
		}
	}
	st := r.Stats()
	t.Logf("stats %+v", st)
	t.Logf("events by name %v; %d symbols, %d samples with thread names", names, symbols, withName)
	want := Stats{Bytes: 4_047_237, Headers: 14, Schemas: 94, StringPoolFrames: 10_509, StackPoolFrames: 293, TimestampResets: 7_678}
	got := st
	got.Events, got.AnnotationFrames = 0, 0
	if got != want {
		t.Errorf("stats = %+v, want %+v", got, want)
	}
	if st.Events < 200_000 || st.Events > 220_000 {
		t.Errorf("%d events, want about 210k", st.Events)
	}
	for _, n := range []string{"PollStartEvent", "PollEndEvent", "CpuSampleEvent", "SymbolTableEntry", "ClockSyncEvent", "SegmentMetadataEvent"} {
		if names[n] == 0 {
			t.Errorf("no %s", n)
		}
	}
}

func TestTruncation(t *testing.T) {
	golden := golden(t)
	// Offsets at which each event frame ends, and all frame boundaries (a
	// stream may legally end after any complete frame).
	ends := []int{0x7e, 0xff, 294}
	boundaries := map[int]bool{5: true, 0x22: true, 0x68: true, 0x71: true, 0x7e: true, 0x9b: true, 0xec: true, 0xff: true, 0x11f: true}
	for cut := 0; cut < len(golden); cut++ {
		r := NewReader(bytes.NewReader(golden[:cut]))
		n := 0
		var err error
		for {
			if _, err = r.Next(); err != nil {
				break
			}
			n++
		}
		wantN := 0
		for _, e := range ends {
			if e <= cut {
				wantN++
			}
		}
		if n != wantN {
			t.Errorf("cut %d: %d events, want %d", cut, n, wantN)
		}
		if boundaries[cut] {
			if err != io.EOF {
				t.Errorf("cut %d at a frame boundary: %v, want io.EOF", cut, err)
			}
			continue
		}
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("cut %d: %v, want unexpected EOF", cut, err)
			continue
		}
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Offset != int64(cut) {
			t.Errorf("cut %d: error %v does not name offset %d", cut, err, cut)
		}
		if cut == 200 {
			t.Logf("cut %d: %v", cut, err)
		}
	}
}

func TestCorruption(t *testing.T) {
	golden := golden(t)
	patch := func(off int, b ...byte) []byte {
		c := bytes.Clone(golden)
		copy(c[off:], b)
		return c
	}
	for _, tc := range []struct {
		name string
		data []byte
		err  error
		msg  string
	}{
		{"bad magic", patch(0, 'X'), ErrBadMagic, "wire: offset 0: header"},
		{"unknown frame tag", patch(0x7e, 0x07), ErrUnknownTag, "wire: offset 126: frame 0x07: unknown tag"},
		{"unknown field type", patch(0x67, 0x10), ErrUnknownFieldType, "field spawn_loc: 0x10"},
		{"field type 0", patch(0x67, 0x00), ErrUnknownFieldType, "schema PollStartEvent"},
		{"optional field type 0x80", patch(0x67, 0x80), ErrUnknownFieldType, "offset 103"},
		{"unknown type id", patch(0x72, 9), ErrUnknownType, "type id 9"},
		{"unresolved string", patch(0x7a, 5), ErrUnresolvedPool, "event PollStartEvent field spawn_loc: string pool id 5: unresolved pool id"},
		{"unresolved stack", patch(0xf9, 1), ErrUnresolvedPool, "stack pool id 1"},
		{"bad presence byte", patch(0xf8, 2), ErrInvalid, "presence byte 0x02"},
		{"conflicting schema", append(bytes.Clone(golden), // PollEndEvent again as id 0
			0x01, 0, 0, 12, 0, 'P', 'o', 'l', 'l', 'E', 'n', 'd', 'E', 'v', 'e', 'n', 't', 1, 1, 0, 9, 0, 'w', 'o', 'r', 'k', 'e', 'r', '_', 'i', 'd', 9),
			ErrSchemaConflict, "offset 326: frame 0x01 at 294: schema PollEndEvent: type id 0 already is PollStartEvent"},
		{"junk after header", append([]byte("TRC\x00\x01"), 0x54, 0x52, 0x43, 0x01, 0x01), ErrBadMagic, "offset 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadAll(bytes.NewReader(tc.data))
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %q, want it to contain %q", err, tc.msg)
			}
		})
	}
}

func TestIdenticalReRegistration(t *testing.T) {
	golden := golden(t)
	// Repeat the PollEndEvent schema frame (0xff…0x11f) and its event.
	data := append(bytes.Clone(golden), golden[0xff:]...)
	evs, err := ReadAll(bytes.NewReader(data))
	must(t, err)
	if len(evs) != 4 || evs[3].Name() != "PollEndEvent" || evs[3].Timestamp != t0+2500 {
		t.Fatalf("got %d events, last %s at %d", len(evs), evs[len(evs)-1].Name(), evs[len(evs)-1].Timestamp)
	}
	if evs[2].Schema != evs[3].Schema {
		t.Errorf("re-registered schema not shared")
	}
}

// TestStreams covers mid-stream headers (full reset), a frame appended
// without a header (continuing the last stream), pool frames with count > 1
// and ids out of order, annotations, and the timestamp rules.
func TestStreams(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	writeGolden(t, w)
	must(t, w.Reset())
	// Second stream: a timestamp going backwards, a jump > 2^24 and a small
	// step; the same strings get ids from 0 again.
	must(t, w.WritePollStart(PollStartEvent{Timestamp: 5, WorkerID: 1, SpawnLoc: "b"}))
	must(t, w.WritePollStart(PollStartEvent{Timestamp: 3, WorkerID: 1, SpawnLoc: "a"}))
	must(t, w.WritePollEnd(PollEndEvent{Timestamp: 3 + 1<<24, WorkerID: 1}))
	must(t, w.WritePollEnd(PollEndEvent{Timestamp: 4 + 1<<24, WorkerID: 1}))
	must(t, w.Flush())
	// Appended without a header: a pool frame with two entries in reverse id
	// order, an annotations frame for type id 0, and an event using them.
	b := buf.Bytes()
	b = append(b, 0x03, 2, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 'z', 2, 0, 0, 0, 1, 0, 0, 0, 'y')
	b = append(b, 0x06, 0x00, 1, 0, 2, 0, 4, 0, 'u', 'n', 'i', 't', 2, 0, 0, 0, 'n', 's')
	b = append(b, 0x06, 0x80, 0x01, 0, 0) // unknown type id 128 (LEB128), ignored
	b = append(b, 0x02, 0, 0, 1, 0, 0, 9, 0, 7, 3, 0, 0, 0)

	r := NewReader(bytes.NewReader(b))
	var got []string
	var ts []uint64
	var ev Event
	for {
		err := r.ReadEvent(&ev)
		if err == io.EOF {
			break
		}
		must(t, err)
		loc, _ := ev.Str("spawn_loc")
		got = append(got, ev.Name()+":"+loc)
		ts = append(ts, ev.Timestamp)
	}
	wantNames := "PollStartEvent:src/main.rs:10:5 CpuSampleEvent: PollEndEvent: PollStartEvent:b PollStartEvent:a PollEndEvent: PollEndEvent: PollStartEvent:z"
	if strings.Join(got, " ") != wantNames {
		t.Errorf("events %q\nwant %q", strings.Join(got, " "), wantNames)
	}
	wantTS := []uint64{t0, t0 + 500, t0 + 1500, 5, 3, 3 + 1<<24, 4 + 1<<24, 5 + 1<<24}
	if !equalU64(ts, wantTS) {
		t.Errorf("timestamps %v, want %v", ts, wantTS)
	}
	st := r.Stats()
	if st.Headers != 2 || st.TimestampResets != 3 || st.AnnotationFrames != 2 {
		t.Errorf("stats %+v", st)
	}
	if a := r.Annotations(PollStartSchema); a != nil {
		t.Errorf("annotations keyed by writer's schema: %v", a)
	}
	if a := r.Annotations(ev.Schema); len(a) != 1 || a[0] != (Annotation{Field: 2, Key: "unit", Value: "ns"}) {
		t.Errorf("annotations = %v", a)
	}
	// After the header, the first stream's pools are gone.
	bad := append(bytes.Clone(b[:294]), "TRC\x00\x01"...)
	bad = append(bad, golden(t)[0x22:0x68]...)                  // PollStartEvent schema
	bad = append(bad, 0x02, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0) // spawn_loc pool id 0: gone
	if _, err := ReadAll(bytes.NewReader(bad)); !errors.Is(err, ErrUnresolvedPool) {
		t.Errorf("pool survived a header: %v", err)
	}
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestWriteErrors(t *testing.T) {
	w := NewWriter(io.Discard)
	bad := &Schema{Name: "Bad", Fields: []Field{{"x", 0x10}}}
	if err := w.Write(bad, 0, VarintValue(1)); !errors.Is(err, ErrUnknownFieldType) {
		t.Errorf("invalid field type: %v", err)
	}
	if err := w.Write(PollEndSchema, 0); err == nil {
		t.Error("missing value accepted")
	}
	if err := w.Write(PollEndSchema, 0, U8Value(1)); err == nil {
		t.Error("wrong value type accepted")
	}
	if err := w.Write(PollEndSchema, 0, Absent); err == nil {
		t.Error("absent required value accepted")
	}
	if err := w.Write(WorkerParkSchema, 0, VarintValue(0), U8Value(0), VarintValue(0), Value{Type: U32, U: 1 << 32}); err == nil {
		t.Error("U32 overflow accepted")
	}
}
