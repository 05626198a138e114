package wire

import (
	"bytes"
	"reflect"
	"testing"
)

// TestSpanEventsTypedMatchGeneric: the span contract's typed writers encode
// what the generic Write does with their schemas, and the close reads back
// as KindSpanClose, unchanged.
func TestSpanEventsTypedMatchGeneric(t *testing.T) {
	closes := []SpanClose{
		{Timestamp: 2e9, InstanceID: 7, StartNs: 1e9, Name: "GET /", TraceID: "0102030405060708090a0b0c0d0e0f10",
			SpanID: "1112131415161718", ParentSpanID: Some("2122232425262728"), Tid: Some[uint64](1001),
			WorkerID: Some[uint64](2), Service: Some("svc"), Pid: Some[uint32](42),
			ParentInstanceID: Some[uint64](5), FirstEnterNs: Some[uint64](1e9), ActiveNs: 1e9,
			Attributes: []StringPair{{"http.route", "/items/{id}"}, {"http.request.method", "GET"}}},
		{Timestamp: 3e9, InstanceID: 1 << 40, StartNs: 3e9, Name: "root", TraceID: "0102030405060708090a0b0c0d0e0f10",
			SpanID: "3132333435363738"},
	}
	enter := SpanInterval{Timestamp: 1e9, InstanceID: 7, Tid: 1001, WorkerID: Some[uint64](2), Name: "GET /", ParentID: Some[uint64](5)}
	exit := SpanInterval{Timestamp: 2e9, InstanceID: 7, Tid: 1001, Name: "GET /"}
	var typed, generic bytes.Buffer
	tw, gw := NewWriter(&typed), NewWriter(&generic)
	opt := func(s Opt[string]) Value {
		if !s.Valid {
			return Absent
		}
		return PooledStringValue(s.V)
	}
	attrs := func(m []StringPair) Value { return Value{Type: StringMap, Map: m} }
	optU := func(v Opt[uint64], ty FieldType) Value {
		if !v.Valid {
			return Absent
		}
		return Value{Type: ty, U: v.V}
	}
	must(t, tw.WriteSpanEnter(enter))
	must(t, gw.Write(SpanEnterOTelSchema, enter.Timestamp, VarintValue(7), VarintValue(7), VarintValue(1001),
		optU(enter.WorkerID, Varint), PooledStringValue(enter.Name), optU(enter.ParentID, Varint)))
	must(t, tw.WriteSpanExit(exit))
	must(t, gw.Write(SpanExitOTelSchema, exit.Timestamp, VarintValue(7), VarintValue(7), VarintValue(1001),
		PooledStringValue(exit.Name)))
	for _, c := range closes {
		must(t, tw.WriteSpanClose(c))
		must(t, gw.Write(SpanCloseOTelSchema, c.Timestamp, VarintValue(c.InstanceID), VarintValue(c.InstanceID),
			VarintValue(c.StartNs), PooledStringValue(c.Name), PooledStringValue(c.TraceID), PooledStringValue(c.SpanID),
			opt(c.ParentSpanID), optU(c.Tid, Varint), optU(c.WorkerID, Varint), opt(c.Service),
			optU(Opt[uint64]{uint64(c.Pid.V), c.Pid.Valid}, U32),
			optU(c.ParentInstanceID, Varint), optU(c.FirstEnterNs, Varint), VarintValue(c.ActiveNs), attrs(c.Attributes)))
	}
	must(t, tw.Flush())
	must(t, gw.Flush())
	if !bytes.Equal(typed.Bytes(), generic.Bytes()) {
		t.Fatalf("typed and generic encodings differ:\n typed %x\n   gen %x", typed.Bytes(), generic.Bytes())
	}
	got := readTyped(t, NewReader(bytes.NewReader(typed.Bytes())))
	want := []any{NameSpanEnterOTel, NameSpanExitOTel, closes[0], closes[1]}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("read back:\n got %+v\nwant %+v", got, want)
	}
	// dial9's varint span_id is the instance id.
	evs, err := ReadAll(bytes.NewReader(typed.Bytes()))
	must(t, err)
	for _, ev := range evs {
		if id, ok := ev.Uint(FieldSpanID); !ok || id != 7 && id != 1<<40 {
			t.Errorf("%s: span_id %d %v", ev.Name(), id, ok)
		}
	}
}

// TestSpanCloseKind: a SpanClose__ of any type with the contract's fields
// and the OTel ids is KindSpanClose; without them, or under another name,
// KindOther.
func TestSpanCloseKind(t *testing.T) {
	f := SpanCloseOTelSchema.Fields
	for _, c := range []struct {
		s    *Schema
		want Kind
	}{
		{SpanCloseOTelSchema, KindSpanClose},
		{&Schema{Name: "SpanClose__Other", HasTimestamp: true, Fields: f}, KindSpanClose},
		{&Schema{Name: "SpanClose__Other", HasTimestamp: true, Fields: f[:4]}, KindOther},
		{&Schema{Name: "SpanCloseEvent", HasTimestamp: true, Fields: []Field{{FieldSpanID, Varint}}}, KindOther},
		{SpanEnterOTelSchema, KindOther},
		{&Schema{Name: "Other", HasTimestamp: true, Fields: f}, KindOther},
	} {
		if got := LayoutOf(c.s).Kind; got != c.want {
			t.Errorf("%s %d fields: kind %d, want %d", c.s.Name, len(c.s.Fields), got, c.want)
		}
	}
}
