package wire

import (
	"bytes"
	"testing"
)

// TestExtTypedMatchesGeneric: the typed writers of perfprof's events encode
// exactly what the generic Write does with their schemas, present and absent
// fields alike, and read back by name.
func TestExtTypedMatchesGeneric(t *testing.T) {
	stack := []uint64{0x401000, 0x402000, 0xffffffff81000000}
	samples := []struct {
		e CpuSampleEvent
		x CpuSampleExt
	}{
		{CpuSampleEvent{Timestamp: 1e9, WorkerID: 255, Tid: 7, ThreadName: Some("main"), Callchain: stack, CPU: Some[uint64](3)},
			CpuSampleExt{Pid: Some[uint32](42), CPUTimeDeltaNs: Some[uint64](1_003_000), LinkSource: Some("goroutine_labels"),
				ContextSetID: Some[uint64](300)}},
		{CpuSampleEvent{Timestamp: 1e9 + 500, WorkerID: 1, Tid: 8, Source: 1, Callchain: stack},
			CpuSampleExt{TraceID: Some("0102030405060708090a0b0c0d0e0f10"), SpanID: Some("1112131415161718"),
				SpanRootName: Some("GET /"), ValueNs: Some[uint64](123456), ThreadState: Some[uint8](ThreadRunnable)}},
	}
	span := SpanEvent{Timestamp: 1e9 + 10, TraceID: "0102030405060708090a0b0c0d0e0f10", SpanID: "1112131415161718",
		Name: "GET /", DurationNs: 5e6, Tid: Some[uint32](8), Service: Some("svc"), Pid: Some[uint32](42)}

	var typed, generic bytes.Buffer
	tw, gw := NewWriter(&typed), NewWriter(&generic)
	opt := func(s Opt[string], ty FieldType) Value {
		if !s.Valid {
			return Absent
		}
		return Value{Type: ty, S: s.V}
	}
	optU := func(v Opt[uint64], ty FieldType) Value {
		if !v.Valid {
			return Absent
		}
		return Value{Type: ty, U: v.V}
	}
	for _, s := range samples {
		if err := tw.WriteCpuSampleExt(s.e, s.x); err != nil {
			t.Fatal(err)
		}
		err := gw.Write(CpuSampleExtSchema, s.e.Timestamp, VarintValue(s.e.WorkerID), U32Value(s.e.Tid), U8Value(s.e.Source),
			opt(s.e.ThreadName, PooledString), PooledStackValue(s.e.Callchain), optU(s.e.CPU, Varint),
			opt(s.x.TraceID, PooledString), opt(s.x.SpanID, PooledString), opt(s.x.SpanRootName, PooledString),
			optU(s.x.ValueNs, Varint), optU(Opt[uint64]{uint64(s.x.ThreadState.V), s.x.ThreadState.Valid}, U8),
			optU(Opt[uint64]{uint64(s.x.Pid.V), s.x.Pid.Valid}, U32), optU(s.x.CPUTimeDeltaNs, Varint), opt(s.x.LinkSource, PooledString),
			optU(s.x.ContextSetID, Varint))
		if err != nil {
			t.Fatal(err)
		}
	}
	set := ContextAttributeSet{ID: 300, Attributes: []StringPair{{"http.route", "GET /a"}, {"user.name", "ünï"}}}
	if err := tw.WriteContextAttributeSet(set); err != nil {
		t.Fatal(err)
	}
	if err := gw.Write(ContextAttributeSetSchema, 0, VarintValue(set.ID), StringMapValue(set.Attributes)); err != nil {
		t.Fatal(err)
	}
	if err := tw.WriteSpan(span); err != nil {
		t.Fatal(err)
	}
	err := gw.Write(SpanSchema, span.Timestamp, PooledStringValue(span.TraceID), PooledStringValue(span.SpanID),
		opt(span.ParentSpanID, PooledString), PooledStringValue(span.Name), VarintValue(span.DurationNs),
		optU(Opt[uint64]{uint64(span.Tid.V), span.Tid.Valid}, U32), optU(span.WorkerID, Varint),
		opt(span.Service, PooledString), optU(Opt[uint64]{uint64(span.Pid.V), span.Pid.Valid}, U32))
	if err != nil {
		t.Fatal(err)
	}
	tw.Flush()
	gw.Flush()
	if !bytes.Equal(typed.Bytes(), generic.Bytes()) {
		t.Fatalf("typed and generic encodings differ:\n typed %x\n   gen %x", typed.Bytes(), generic.Bytes())
	}

	evs, err := ReadAll(bytes.NewReader(typed.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 4 {
		t.Fatalf("%d events", len(evs))
	}
	if id, _ := evs[0].Uint("context_set_id"); id != 300 {
		t.Errorf("context_set_id %d", id)
	}
	if _, ok := evs[1].Uint("context_set_id"); ok {
		t.Error("absent context_set_id read as present")
	}
	if m := evs[2].Field("attributes"); evs[2].Name() != "ContextAttributeSet" || m == nil || len(m.Map) != 2 || m.Map[1].Value != "ünï" {
		t.Errorf("attribute set read back as %s %+v", evs[2].Name(), evs[2].Values)
	}
	evs = append(evs[:2], evs[3])
	if v, _ := evs[1].Uint("value_ns"); v != 123456 {
		t.Errorf("value_ns %d", v)
	}
	if s, _ := evs[1].Str("span_id"); s != "1112131415161718" {
		t.Errorf("span_id %q", s)
	}
	if _, ok := evs[0].Str("trace_id"); ok {
		t.Error("absent trace_id read as present")
	}
	if s, _ := evs[2].Str("name"); s != "GET /" || evs[2].Name() != "SpanEvent" || evs[2].Timestamp != 1e9+10 {
		t.Errorf("span read back as %s %q at %d", evs[2].Name(), s, evs[2].Timestamp)
	}
}
