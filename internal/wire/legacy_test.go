package wire

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"testing"
)

// legacyGolden13 is a v13 file written byte by byte from the table in
// docs/trace-format.md, Part F (all integers little-endian).
var legacyGolden13 = []byte{
	// header: "TOKIOTRC", version u32 = 13
	0x54, 0x4F, 0x4B, 0x49, 0x4F, 0x54, 0x52, 0x43, 0x0D, 0x00, 0x00, 0x00,
	// @12 PollStart: code 0 | ts 0x01020304 | worker 2 | local_q 5 | task 0x0A0B0C0D | loc 0x0102
	0x00, 0x04, 0x03, 0x02, 0x01, 0x02, 0x05, 0x0D, 0x0C, 0x0B, 0x0A, 0x02, 0x01,
	// @25 PollEnd: code 1 | ts 1000 = 0x3E8 | worker 3
	0x01, 0xE8, 0x03, 0x00, 0x00, 0x03,
	// @31 WorkerPark: code 2 | ts 2000 = 0x7D0 | worker 1 | local_q 0 | cpu_us 123456 = 0x1E240
	0x02, 0xD0, 0x07, 0x00, 0x00, 0x01, 0x00, 0x40, 0xE2, 0x01, 0x00,
	// @42 WorkerUnpark: code 3 | ts 0xFFFFFFFF | worker 1 | local_q 7 | cpu_us 1 | sched_wait_us 0x12345678
	0x03, 0xFF, 0xFF, 0xFF, 0xFF, 0x01, 0x07, 0x01, 0x00, 0x00, 0x00, 0x78, 0x56, 0x34, 0x12,
	// @57 QueueSample: code 4 | ts 5 | global_q 255
	0x04, 0x05, 0x00, 0x00, 0x00, 0xFF,
	// @63 SpawnLocationDef: code 5 | id 7 | len 8 | "a.rs:1:2"
	0x05, 0x07, 0x00, 0x08, 0x00, 'a', '.', 'r', 's', ':', '1', ':', '2',
	// @76 TaskSpawn (v13, no ts): code 6 | task 42 = 0x2A | loc 7
	0x06, 0x2A, 0x00, 0x00, 0x00, 0x07, 0x00,
	// @83 WakeEvent: code 7 | ts 0x100 | waker 1 | woken 2 | target_worker 255
	0x07, 0x00, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0xFF,
	// @97 CpuSample: code 8 | ts 0x10 | worker 254 | tid 4242 = 0x1092 | source 1 | n 2 |
	//     0x401000 | 0xFFFFFFFF81000000
	0x08, 0x10, 0x00, 0x00, 0x00, 0xFE, 0x92, 0x10, 0x00, 0x00, 0x01, 0x02,
	0x00, 0x10, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x81, 0xFF, 0xFF, 0xFF, 0xFF,
	// @125 CpuSample with no frames: code 8 | ts 0x20 | worker 0 | tid 1 | source 0 | n 0
	0x08, 0x20, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00,
	// @137 CallframeDef: code 9 | addr 0x401000 | sym_len 4 | "main" | loc_len 6 | "m.rs:3"
	0x09, 0x00, 0x10, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 'm', 'a', 'i', 'n',
	0x06, 0x00, 'm', '.', 'r', 's', ':', '3',
	// @160 CallframeDef without location: code 9 | addr 0xFFFFFFFF81000000 | sym_len 1 | "k" | loc_len 0xFFFF
	0x09, 0x00, 0x00, 0x00, 0x81, 0xFF, 0xFF, 0xFF, 0xFF, 0x01, 0x00, 'k', 0xFF, 0xFF,
	// @174 CallframeDef with an empty location: code 9 | addr 1 | sym_len 0 | loc_len 0
	0x09, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	// @187 ThreadNameDef: code 10 | tid 4242 | len 3 | "w-1"
	0x0A, 0x92, 0x10, 0x00, 0x00, 0x03, 0x00, 'w', '-', '1',
	// @197 end
}

var legacyRecords13 = []LegacyRecord{
	{Code: LegacyPollStart, TsUs: 0x01020304, Worker: 2, LocalQueue: 5, TaskID: 0x0A0B0C0D, SpawnLocID: 0x0102},
	{Code: LegacyPollEnd, TsUs: 1000, Worker: 3},
	{Code: LegacyWorkerPark, TsUs: 2000, Worker: 1, LocalQueue: 0, CPUUs: 123456},
	{Code: LegacyWorkerUnpark, TsUs: 0xFFFFFFFF, Worker: 1, LocalQueue: 7, CPUUs: 1, SchedWaitUs: 0x12345678},
	{Code: LegacyQueueSample, TsUs: 5, GlobalQueue: 255},
	{Code: LegacySpawnLocationDef, SpawnLocID: 7, Name: "a.rs:1:2"},
	{Code: LegacyTaskSpawn, TaskID: 42, SpawnLocID: 7},
	{Code: LegacyWakeEvent, TsUs: 0x100, Waker: 1, Woken: 2, TargetWorker: 255},
	{Code: LegacyCpuSample, TsUs: 0x10, Worker: 254, Tid: 4242, Source: 1, Frames: []uint64{0x401000, 0xFFFFFFFF81000000}},
	{Code: LegacyCpuSample, TsUs: 0x20, Worker: 0, Tid: 1, Source: 0},
	{Code: LegacyCallframeDef, Addr: 0x401000, Symbol: "main", Location: "m.rs:3", HasLocation: true},
	{Code: LegacyCallframeDef, Addr: 0xFFFFFFFF81000000, Symbol: "k"},
	{Code: LegacyCallframeDef, Addr: 1, HasLocation: true},
	{Code: LegacyThreadNameDef, Tid: 4242, Name: "w-1"},
}

// legacyGolden18 covers the codes whose layout changed after v13.
var legacyGolden18 = []byte{
	// header: "TOKIOTRC", version u32 = 18
	0x54, 0x4F, 0x4B, 0x49, 0x4F, 0x54, 0x52, 0x43, 0x12, 0x00, 0x00, 0x00,
	// TaskSpawn (v15+): code 6 | ts 9 | task 42 | loc 7
	0x06, 0x09, 0x00, 0x00, 0x00, 0x2A, 0x00, 0x00, 0x00, 0x07, 0x00,
	// TaskTerminate (v15+): code 172 = 0xAC | ts 10 | task 42
	0xAC, 0x0A, 0x00, 0x00, 0x00, 0x2A, 0x00, 0x00, 0x00,
	// SegmentMetadata (v18): code 11 | ts_ns 0x0102030405060708 | n 2 |
	//     k_len 1 "s" v_len 1 "x" | k_len 1 "k" v_len 0
	0x0B, 0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, 0x02, 0x00,
	0x01, 0x00, 's', 0x01, 0x00, 'x', 0x01, 0x00, 'k', 0x00, 0x00,
}

var legacyRecords18 = []LegacyRecord{
	{Code: LegacyTaskSpawn, TsUs: 9, TaskID: 42, SpawnLocID: 7},
	{Code: LegacyTaskTerminate, TsUs: 10, TaskID: 42},
	{Code: LegacySegmentMetadata, TsNs: 0x0102030405060708, Metadata: []LegacyKV{{"s", "x"}, {"k", ""}}},
}

// v14: TaskTerminate without a timestamp; v17: SegmentMetadata without one.
var legacyGolden14 = []byte{
	0x54, 0x4F, 0x4B, 0x49, 0x4F, 0x54, 0x52, 0x43, 0x0E, 0x00, 0x00, 0x00, // v14
	0xAC, 0x2A, 0x00, 0x00, 0x00, // TaskTerminate: task 42
	0x06, 0x01, 0x00, 0x00, 0x00, 0x02, 0x00, // TaskSpawn: task 1, loc 2
}

var legacyRecords14 = []LegacyRecord{
	{Code: LegacyTaskTerminate, TaskID: 42},
	{Code: LegacyTaskSpawn, TaskID: 1, SpawnLocID: 2},
}

var legacyGolden17 = []byte{
	0x54, 0x4F, 0x4B, 0x49, 0x4F, 0x54, 0x52, 0x43, 0x11, 0x00, 0x00, 0x00, // v17
	0x0B, 0x01, 0x00, 0x01, 0x00, 'a', 0x02, 0x00, 'b', 'c', // SegmentMetadata: n 1, "a" = "bc"
}

var legacyRecords17 = []LegacyRecord{
	{Code: LegacySegmentMetadata, Metadata: []LegacyKV{{"a", "bc"}}},
}

var legacyGoldens = []struct {
	version uint32
	data    []byte
	recs    []LegacyRecord
}{
	{13, legacyGolden13, legacyRecords13},
	{14, legacyGolden14, legacyRecords14},
	{17, legacyGolden17, legacyRecords17},
	{18, legacyGolden18, legacyRecords18},
}

func writeLegacy(t testing.TB, version uint32, recs []LegacyRecord) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewLegacyWriter(&buf, version)
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		if err := w.Write(&recs[i]); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if w.Offset() != int64(buf.Len()) {
		t.Fatalf("Offset() = %d, wrote %d", w.Offset(), buf.Len())
	}
	return buf.Bytes()
}

// readLegacy returns the records read before the first error, and that error
// (nil on a clean end).
func readLegacy(data []byte) (uint32, []LegacyRecord, error) {
	r, err := NewLegacyReader(bytes.NewReader(data))
	if err != nil {
		return 0, nil, err
	}
	var recs []LegacyRecord
	for {
		var rec LegacyRecord
		err := r.Read(&rec)
		if err == io.EOF {
			return r.Version(), recs, nil
		}
		if err != nil {
			return r.Version(), recs, err
		}
		recs = append(recs, rec)
	}
}

func TestLegacyWriterGolden(t *testing.T) {
	for _, g := range legacyGoldens {
		t.Run(fmt.Sprint("v", g.version), func(t *testing.T) {
			got := writeLegacy(t, g.version, g.recs)
			if !bytes.Equal(got, g.data) {
				t.Fatalf("writer output differs\n got % x\nwant % x", got, g.data)
			}
		})
	}
}

func TestLegacyReaderGolden(t *testing.T) {
	for _, g := range legacyGoldens {
		t.Run(fmt.Sprint("v", g.version), func(t *testing.T) {
			v, recs, err := readLegacy(g.data)
			if err != nil {
				t.Fatal(err)
			}
			if v != g.version {
				t.Errorf("version %d, want %d", v, g.version)
			}
			if !reflect.DeepEqual(recs, g.recs) {
				t.Fatalf("records differ\n got %+v\nwant %+v", recs, g.recs)
			}
		})
	}
}

func TestLegacyReaderGzip(t *testing.T) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(legacyGolden13)
	zw.Close()
	_, recs, err := readLegacy(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(recs, legacyRecords13) {
		t.Fatalf("records differ")
	}

	// A cut gzip stream is a truncation too.
	cut := buf.Bytes()[:buf.Len()-10]
	_, _, err = readLegacy(cut)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut gzip: err = %v, want ErrUnexpectedEOF", err)
	}
}

func randLegacyRecord(rng *rand.Rand, version uint32) LegacyRecord {
	codes := []LegacyCode{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if version >= 14 {
		codes = append(codes, LegacyTaskTerminate)
	}
	if version >= 17 {
		codes = append(codes, LegacySegmentMetadata)
	}
	u8 := func() uint8 { return uint8(rng.Uint32()) }
	str := func() string {
		n := rng.IntN(20)
		if rng.IntN(50) == 0 {
			n = rng.IntN(LegacyMaxString + 1)
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32()) // not necessarily UTF-8: bytes go through unchanged
		}
		return string(b)
	}
	rec := LegacyRecord{Code: codes[rng.IntN(len(codes))]}
	switch rec.Code {
	case LegacyPollStart:
		rec.TsUs, rec.Worker, rec.LocalQueue, rec.TaskID, rec.SpawnLocID = rng.Uint32(), u8(), u8(), rng.Uint32(), uint16(rng.Uint32())
	case LegacyPollEnd:
		rec.TsUs, rec.Worker = rng.Uint32(), u8()
	case LegacyWorkerPark:
		rec.TsUs, rec.Worker, rec.LocalQueue, rec.CPUUs = rng.Uint32(), u8(), u8(), rng.Uint32()
	case LegacyWorkerUnpark:
		rec.TsUs, rec.Worker, rec.LocalQueue, rec.CPUUs, rec.SchedWaitUs = rng.Uint32(), u8(), u8(), rng.Uint32(), rng.Uint32()
	case LegacyQueueSample:
		rec.TsUs, rec.GlobalQueue = rng.Uint32(), u8()
	case LegacySpawnLocationDef:
		rec.SpawnLocID, rec.Name = uint16(rng.Uint32()), str()
	case LegacyTaskSpawn:
		if version >= 15 {
			rec.TsUs = rng.Uint32()
		}
		rec.TaskID, rec.SpawnLocID = rng.Uint32(), uint16(rng.Uint32())
	case LegacyWakeEvent:
		rec.TsUs, rec.Waker, rec.Woken, rec.TargetWorker = rng.Uint32(), rng.Uint32(), rng.Uint32(), u8()
	case LegacyCpuSample:
		rec.TsUs, rec.Worker, rec.Tid, rec.Source = rng.Uint32(), u8(), rng.Uint32(), u8()
		n := rng.IntN(LegacyMaxFrames + 1)
		if n > 0 {
			rec.Frames = make([]uint64, n)
			for i := range rec.Frames {
				rec.Frames[i] = rng.Uint64()
			}
		}
	case LegacyCallframeDef:
		rec.Addr, rec.Symbol = rng.Uint64(), str()
		if rng.IntN(2) == 0 {
			rec.HasLocation, rec.Location = true, str()
			if len(rec.Location) == LegacyMaxString {
				rec.Location = rec.Location[1:]
			}
		}
	case LegacyThreadNameDef:
		rec.Tid, rec.Name = rng.Uint32(), str()
	case LegacySegmentMetadata:
		if version >= 18 {
			rec.TsNs = rng.Uint64()
		}
		for range rng.IntN(5) {
			rec.Metadata = append(rec.Metadata, LegacyKV{str(), str()})
		}
	case LegacyTaskTerminate:
		if version >= 15 {
			rec.TsUs = rng.Uint32()
		}
		rec.TaskID = rng.Uint32()
	}
	return rec
}

func TestLegacyRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for v := uint32(LegacyMinVersion); v <= LegacyMaxVersion; v++ {
		recs := make([]LegacyRecord, 3000)
		for i := range recs {
			recs[i] = randLegacyRecord(rng, v)
		}
		data := writeLegacy(t, v, recs)
		gotV, got, err := readLegacy(data)
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		if gotV != v {
			t.Fatalf("version %d, want %d", gotV, v)
		}
		if len(got) != len(recs) {
			t.Fatalf("v%d: read %d records, wrote %d", v, len(got), len(recs))
		}
		for i := range recs {
			if !reflect.DeepEqual(got[i], recs[i]) {
				t.Fatalf("v%d record %d:\n got %+v\nwant %+v", v, i, got[i], recs[i])
			}
		}
	}
}

// TestLegacyReaderReuse checks that Read into one record reuses its slices
// and clears fields left over from the previous record.
func TestLegacyReaderReuse(t *testing.T) {
	r, err := NewLegacyReader(bytes.NewReader(legacyGolden13))
	if err != nil {
		t.Fatal(err)
	}
	var rec LegacyRecord
	for i := 0; ; i++ {
		err := r.Read(&rec)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		want := legacyRecords13[i]
		if len(rec.Frames) == 0 && len(want.Frames) == 0 {
			rec.Frames = nil
		}
		if !reflect.DeepEqual(rec, want) {
			t.Fatalf("record %d:\n got %+v\nwant %+v", i, rec, want)
		}
	}
}

func BenchmarkLegacyWriteCpuSample(b *testing.B) {
	w, err := NewLegacyWriter(io.Discard, 13)
	if err != nil {
		b.Fatal(err)
	}
	rec := LegacyRecord{Code: LegacyCpuSample, TsUs: 1, Worker: 3, Tid: 4242, Frames: make([]uint64, 16)}
	for i := range rec.Frames {
		rec.Frames[i] = 0x400000 + uint64(i)*0x40
	}
	b.SetBytes(12 + 8*16)
	b.ReportAllocs()
	for b.Loop() {
		rec.TsUs++
		if err := w.Write(&rec); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLegacyReadCpuSample(b *testing.B) {
	rec := LegacyRecord{Code: LegacyCpuSample, TsUs: 1, Worker: 3, Tid: 4242, Frames: make([]uint64, 16)}
	recs := make([]LegacyRecord, 1000)
	for i := range recs {
		recs[i] = rec
	}
	data := writeLegacy(b, 13, recs)
	b.SetBytes(12 + 8*16)
	b.ReportAllocs()
	var r *LegacyReader
	var out LegacyRecord
	i := len(recs)
	for b.Loop() {
		if i == len(recs) {
			b.StopTimer()
			r, _ = NewLegacyReader(bytes.NewReader(data))
			i = 0
			b.StartTimer()
		}
		if err := r.Read(&out); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
