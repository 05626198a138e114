package wire

import (
	"bytes"
	"io"
	"reflect"
	"testing"
)

// readTyped reads every event of a TRC or legacy stream back into the typed
// struct of its kind, as a reader outside the package would.
func readTyped(t *testing.T, rd interface{ ReadEvent(*Event) error }) []any {
	t.Helper()
	layouts := map[*Schema]*Layout{}
	var out []any
	var ev Event
	for {
		err := rd.ReadEvent(&ev)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		l := layouts[ev.Schema]
		if l == nil {
			l = LayoutOf(ev.Schema)
			layouts[ev.Schema] = l
		}
		switch l.Kind {
		case KindPollStart:
			out = append(out, l.PollStart(&ev))
		case KindPollEnd:
			out = append(out, l.PollEnd(&ev))
		case KindWorkerPark:
			out = append(out, l.WorkerPark(&ev))
		case KindWorkerUnpark:
			out = append(out, l.WorkerUnpark(&ev))
		case KindCpuSample:
			var e CpuSampleEvent
			var x CpuSampleExt
			l.CpuSample(&ev, &e, &x)
			e.Callchain = append([]uint64(nil), e.Callchain...)
			if len(ev.Schema.Fields) <= len(CpuSampleSchema.Fields) { // no perfprof fields
				out = append(out, e)
			} else {
				out = append(out, [2]any{e, x})
			}
		case KindSymbol:
			out = append(out, l.Symbol(&ev))
		case KindClockSync:
			out = append(out, l.ClockSync(&ev))
		case KindSegmentMetadata:
			e := l.SegmentMetadata(&ev)
			e.Entries = append([]StringPair(nil), e.Entries...)
			out = append(out, e)
		case KindSpan:
			out = append(out, l.Span(&ev))
		case KindSpanClose:
			out = append(out, l.SpanClose(&ev))
		case KindContextAttributeSet:
			e := l.ContextAttributeSet(&ev)
			e.Attributes = append([]StringPair(nil), e.Attributes...)
			out = append(out, e)
		default:
			out = append(out, ev.Name())
		}
	}
}

// typedEvent is an event in its typed form and the typed writer of it.
type typedEvent struct {
	v     any
	write func(w *Writer) error
}

func typed[T any](write func(*Writer, T) error, v T) typedEvent {
	return typedEvent{v, func(w *Writer) error { return write(w, v) }}
}

// TestTypedRoundTrip: what the typed writers write, the typed readers read
// back unchanged, perfprof's fields included.
func TestTypedRoundTrip(t *testing.T) {
	stack := []uint64{0x401000, 0x402000}
	ext := [2]any{CpuSampleEvent{Timestamp: 1e9 + 3, WorkerID: 255, Tid: 1002, Source: 1, Callchain: stack},
		CpuSampleExt{TraceID: Some("0102030405060708090a0b0c0d0e0f10"), SpanID: Some("1112131415161718"),
			SpanRootName: Some("GET /"), ValueNs: Some[uint64](5000), ThreadState: Some[uint8](ThreadBlocked), Pid: Some[uint32](9),
			CPUTimeDeltaNs: Some[uint64](7000), LinkSource: Some("thread_context"), ContextSetID: Some[uint64](1)}}
	events := []typedEvent{
		typed((*Writer).WriteContextAttributeSet, ContextAttributeSet{ID: 1, Attributes: []StringPair{{"http.route", "GET /a"}}}),
		typed((*Writer).WriteClockSync, ClockSyncEvent{Timestamp: 1e9, RealtimeNs: 1_700_000_000_000_000_000}),
		typed((*Writer).WriteSegmentMetadata, SegmentMetadataEvent{Timestamp: 1e9, Entries: []StringPair{{"service", "svc"}, {"host", "h"}}}),
		typed((*Writer).WritePollStart, PollStartEvent{Timestamp: 1e9 + 1, WorkerID: 1, LocalQueue: 3, TaskID: 77, SpawnLoc: "src/main.rs:1:2"}),
		typed((*Writer).WriteCpuSample, CpuSampleEvent{Timestamp: 1e9 + 2, WorkerID: 1, Tid: 1001, ThreadName: Some("w"),
			Callchain: stack, CPU: Some[uint64](2)}),
		{ext, func(w *Writer) error { return w.WriteCpuSampleExt(ext[0].(CpuSampleEvent), ext[1].(CpuSampleExt)) }},
		typed((*Writer).WritePollEnd, PollEndEvent{Timestamp: 1e9 + 4, WorkerID: 1}),
		typed((*Writer).WriteWorkerPark, WorkerParkEvent{Timestamp: 1e9 + 5, WorkerID: 1, CPUTimeNs: 123, Tid: 1001}),
		typed((*Writer).WriteWorkerUnpark, WorkerUnparkEvent{Timestamp: 1e9 + 6, WorkerID: 1, LocalQueue: 1, CPUTimeNs: 456,
			SchedWaitNs: 78, Tid: 1001}),
		typed((*Writer).WriteSpan, SpanEvent{Timestamp: 1e9 + 7, TraceID: "0102030405060708090a0b0c0d0e0f10", SpanID: "1112131415161718",
			ParentSpanID: Some("2122232425262728"), Name: "GET /", DurationNs: 9, WorkerID: Some[uint64](1), Service: Some("svc")}),
		typed((*Writer).WriteSymbolTableEntry, SymbolTableEntry{Addr: 0x401000, Size: 16, SymbolName: "f", InlineDepth: 1,
			SourceFile: "f.rs", SourceLine: 3}),
	}
	var buf bytes.Buffer
	w := NewWriter(&buf)
	var want []any
	for _, e := range events {
		must(t, e.write(w))
		want = append(want, e.v)
	}
	must(t, w.Flush())
	got := readTyped(t, NewReader(&buf))
	if !reflect.DeepEqual(got, want) {
		t.Errorf("typed round trip:\n got %+v\nwant %+v", got, want)
	}
}

// TestLayoutKinds: a schema reads as its kind only with its identifying
// fields; unknown events and a TRC event that merely calls itself
// CallframeDef are KindOther; integers saturate into narrower fields.
func TestLayoutKinds(t *testing.T) {
	for _, c := range []struct {
		s    *Schema
		want Kind
	}{
		{CpuSampleSchema, KindCpuSample},
		{CpuSampleExtSchema, KindCpuSample},
		{&Schema{Name: NameCpuSample, Fields: []Field{{FieldTid, U32}}}, KindOther},
		{&Schema{Name: NamePollEnd, Fields: []Field{{FieldTid, U32}}}, KindOther},
		{&Schema{Name: "TaskDumpEvent", Fields: []Field{{FieldWorkerID, Varint}}}, KindOther},
		{&Schema{Name: LegacyCallframeDef.String(), Fields: legacySchemas[LegacyCallframeDef].Fields}, KindOther},
		{legacySchemas[LegacyCallframeDef], KindSymbol},
		{legacySchemas[LegacyCpuSample], KindCpuSample},
		{SpanSchema, KindSpan},
		{ContextAttributeSetSchema, KindContextAttributeSet},
		{&Schema{Name: NameContextAttributeSet, Fields: []Field{{FieldSetID, Varint}}}, KindOther},
	} {
		if got := LayoutOf(c.s).Kind; got != c.want {
			t.Errorf("%s %v: kind %d, want %d", c.s.Name, c.s.Fields, got, c.want)
		}
	}
	s := &Schema{Name: NameCpuSample, Fields: []Field{{FieldWorkerID, Varint}, {FieldTid, Varint},
		{FieldCallchain, StackFrames}, {FieldThreadState, Varint}}}
	ev := Event{Schema: s, Values: []Value{VarintValue(1 << 40), VarintValue(1 << 40), StackValue(nil), VarintValue(300)}}
	var e CpuSampleEvent
	var x CpuSampleExt
	LayoutOf(s).CpuSample(&ev, &e, &x)
	if e.WorkerID != 1<<40 || e.Tid != 1<<32-1 || x.ThreadState != Some[uint8](255) {
		t.Errorf("saturation: worker %d tid %d state %+v", e.WorkerID, e.Tid, x.ThreadState)
	}
	s = &Schema{Name: NameCpuSample, Fields: []Field{{FieldCallchain, PooledStackFrames}}}
	LayoutOf(s).CpuSample(&Event{Schema: s, Values: []Value{{Type: PooledStackFrames}}}, &e, &x)
	if e.WorkerID != 255 {
		t.Errorf("sample without worker_id: worker %d, want 255", e.WorkerID)
	}
}

// TestLegacyEvents: the adapter presents legacy records as the TRC events
// they stand for, definitions resolved, the µs clock unwrapped into ns, a
// CallframeDef as a symbol with its location split.
func TestLegacyEvents(t *testing.T) {
	recs := []LegacyRecord{
		{Code: LegacySpawnLocationDef, SpawnLocID: 1, Name: "src/main.rs:10:5"},
		{Code: LegacyThreadNameDef, Tid: 1001, Name: "worker"},
		{Code: LegacyCallframeDef, Addr: 0x401000, Symbol: "handler", Location: "src/app.rs:42", HasLocation: true},
		{Code: LegacyCallframeDef, Addr: 0x402000, Symbol: "main"},
		{Code: LegacyPollStart, TsUs: 1<<32 - 10, Worker: 1, LocalQueue: 2, TaskID: 7, SpawnLocID: 1},
		{Code: LegacyCpuSample, TsUs: 5, Worker: 1, Tid: 1001, Frames: []uint64{0x401000, 0x402000}},
		{Code: LegacyCpuSample, TsUs: 6, Worker: 255, Tid: 1002, Source: 1, Frames: []uint64{0x402000}},
		{Code: LegacyPollEnd, TsUs: 7, Worker: 1},
		{Code: LegacyWorkerPark, TsUs: 8, Worker: 1, LocalQueue: 0, CPUUs: 3},
		{Code: LegacyWorkerUnpark, TsUs: 9, Worker: 1, CPUUs: 4, SchedWaitUs: 2},
		{Code: LegacyQueueSample, TsUs: 10, GlobalQueue: 3},
		{Code: LegacyTaskTerminate, TsUs: 11, TaskID: 7},
		{Code: LegacySegmentMetadata, TsNs: 42, Metadata: []LegacyKV{{"k", "v"}}},
	}
	rd, err := NewLegacyEventReader(bytes.NewReader(writeLegacy(t, 18, recs)))
	must(t, err)
	wrap := uint64(1) << 32 * 1000 // ns after the µs clock wrapped once
	want := []any{
		LegacySpawnLocationDef.String(), LegacyThreadNameDef.String(),
		SymbolTableEntry{Addr: 0x401000, SymbolName: "handler", SourceFile: "src/app.rs", SourceLine: 42},
		SymbolTableEntry{Addr: 0x402000, SymbolName: "main"},
		PollStartEvent{Timestamp: (1<<32 - 10) * 1000, WorkerID: 1, LocalQueue: 2, TaskID: 7, SpawnLoc: "src/main.rs:10:5"},
		CpuSampleEvent{Timestamp: wrap + 5000, WorkerID: 1, Tid: 1001, ThreadName: Some("worker"), Callchain: []uint64{0x401000, 0x402000}},
		CpuSampleEvent{Timestamp: wrap + 6000, WorkerID: 255, Tid: 1002, Source: 1, Callchain: []uint64{0x402000}},
		PollEndEvent{Timestamp: wrap + 7000, WorkerID: 1},
		WorkerParkEvent{Timestamp: wrap + 8000, WorkerID: 1, CPUTimeNs: 3000},
		WorkerUnparkEvent{Timestamp: wrap + 9000, WorkerID: 1, CPUTimeNs: 4000, SchedWaitNs: 2000},
		NameQueueSample, NameTaskTerminate,
		SegmentMetadataEvent{Timestamp: 42, Entries: []StringPair{{"k", "v"}}},
	}
	got := readTyped(t, rd)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("legacy events:\n got %+v\nwant %+v", got, want)
	}
	for _, c := range []LegacyCode{LegacyPollStart, LegacyCallframeDef, LegacyWakeEvent} {
		if s := legacySchema(c); LegacyEventName(c) != s.Name || !LayoutOf(s).Legacy {
			t.Errorf("%v: name %q, schema %q", c, LegacyEventName(c), s.Name)
		}
	}
}

// TestContextAttributeSets: samples refer to sets by id; a sample of the
// schema before context_set_id existed reads as one without attributes, on
// both read paths; a set, having no timestamp, neither carries nor moves
// the timestamp base, so that dial9's readers give it no time.
func TestContextAttributeSets(t *testing.T) {
	old := &Schema{Name: NameCpuSample, HasTimestamp: true,
		Fields: CpuSampleExtSchema.Fields[:len(CpuSampleExtSchema.Fields)-1]}
	if old.Fields[len(old.Fields)-1].Name != FieldLinkSource {
		t.Fatalf("the schema before context_set_id ends with %s", old.Fields[len(old.Fields)-1].Name)
	}
	stack := []uint64{0x401000}
	var buf bytes.Buffer
	w := NewWriter(&buf)
	vals := []Value{VarintValue(255), U32Value(7), U8Value(0), Absent, PooledStackValue(stack), Absent}
	for range len(old.Fields) - len(vals) {
		vals = append(vals, Absent)
	}
	must(t, w.Write(old, 1e9, vals...))
	must(t, w.WriteContextAttributeSet(ContextAttributeSet{ID: 5, Attributes: []StringPair{{"http.route", "GET /a"}}}))
	must(t, w.WriteCpuSampleExt(CpuSampleEvent{Timestamp: 1e9 + 10, WorkerID: 255, Tid: 7, Callchain: stack},
		CpuSampleExt{ContextSetID: Some[uint64](5)}))
	must(t, w.Flush())
	// The set's frame: tag, type id 1, no delta, set_id 5, a map of 1.
	if !bytes.Contains(buf.Bytes(), []byte{tagEvent, 1, 0, 5, 1, 0, 0, 0}) {
		t.Errorf("no timestamp-less set frame in %x", buf.Bytes())
	}
	for _, fast := range []bool{false, true} {
		got, _, err := readSamples(NewReader(bytes.NewReader(buf.Bytes())), fast)
		if err != io.EOF {
			t.Fatal(err)
		}
		if len(got) != 7 {
			t.Fatalf("fast %v: read %v", fast, got)
		}
		first, second := got[1].(CpuSampleRead), got[6].(CpuSampleRead)
		if first.X.ContextSetID.Valid || first.E.Timestamp != 1e9 {
			t.Errorf("fast %v: old sample read as %+v", fast, first)
		}
		if second.X.ContextSetID != Some[uint64](5) || second.E.Timestamp != 1e9+10 {
			t.Errorf("fast %v: sample with a set read as %+v", fast, second)
		}
		if got[2] != NameContextAttributeSet || got[3] != uint64(0) {
			t.Errorf("fast %v: set read as %v at %v", fast, got[2], got[3])
		}
	}
}
