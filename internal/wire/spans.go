package wire

import "encoding/binary"

// perfprof's spans as dial9's span wire contract has them
// (docs/trace-conventions.md, docs/dial9-span-contract.md): a close event
// for every span, and enter and exit events for the intervals it is known
// to have had its thread. Each event carries both the contract's modern
// fields (span_instance_id, tid, start_timestamp_ns, span_name) and
// dial9's varint span_id, set to the same never-recycled instance id, so
// that readers of either dialect pair them.

var (
	// SpanCloseOTelSchema is SpanClose__OtelSpan, at the span's end.
	SpanCloseOTelSchema = &Schema{Name: NameSpanCloseOTel, HasTimestamp: true, Fields: []Field{
		{FieldSpanID, Varint}, {FieldSpanInstanceID, Varint}, {FieldStartTimestampNs, Varint},
		{FieldSpanName, PooledString}, {FieldTraceID, PooledString}, {FieldOTelSpanID, PooledString},
		{FieldOTelParentSpanID, Optional(PooledString)}, {FieldTid, Optional(Varint)},
		{FieldWorkerID, Optional(Varint)}, {FieldService, Optional(PooledString)}, {FieldPid, Optional(U32)},
		{FieldParentSpanInstanceID, Optional(Varint)}, {FieldFirstEnterTimestampNs, Optional(Varint)},
		{FieldActiveNs, Varint}, {FieldAttributes, StringMap}}}
	// SpanEnterOTelSchema is SpanEnter__OtelSpan: the span goes on its thread.
	SpanEnterOTelSchema = &Schema{Name: NameSpanEnterOTel, HasTimestamp: true, Fields: []Field{
		{FieldSpanID, Varint}, {FieldSpanInstanceID, Varint}, {FieldTid, Varint},
		{FieldWorkerID, Optional(Varint)}, {FieldSpanName, PooledString}, {FieldParentSpanID, Optional(Varint)}}}
	// SpanExitOTelSchema is SpanExit__OtelSpan: the span leaves its thread.
	SpanExitOTelSchema = &Schema{Name: NameSpanExitOTel, HasTimestamp: true, Fields: []Field{
		{FieldSpanID, Varint}, {FieldSpanInstanceID, Varint}, {FieldTid, Varint}, {FieldSpanName, PooledString}}}
)

// SpanClose is a span's close event: its lifecycle [StartNs, Timestamp).
type SpanClose struct {
	Timestamp  uint64 // the span's end
	InstanceID uint64 // > 0, never recycled: also written as span_id
	StartNs    uint64
	Name       string
	// TraceID, SpanID and ParentSpanID are the OTel ids in lowercase hex
	// (32, 16 and 16 digits); ParentSpanID is absent for a root.
	TraceID, SpanID string
	ParentSpanID    Opt[string]
	Tid             Opt[uint64]
	WorkerID        Opt[uint64]
	Service         Opt[string]
	Pid             Opt[uint32]
	// ParentInstanceID is the parent's InstanceID, when the parent was
	// written in this run (absent for a root, and when it is not known);
	// FirstEnterNs the time of the first enter, absent if never entered;
	// ActiveNs the time in entered intervals, 0 if none.
	ParentInstanceID Opt[uint64]
	FirstEnterNs     Opt[uint64]
	ActiveNs         uint64
	// Attributes are the contract's close-time attributes: a StringMap,
	// 0x0A, what dial9's derive writes for Vec<(String, String)>, empty
	// when there are none (its folder refuses an absent optional map, and
	// with it the whole close).
	Attributes []StringPair
}

// SpanInterval is an enter or exit event of a span on thread Tid.
type SpanInterval struct {
	Timestamp  uint64
	InstanceID uint64
	Tid        uint64
	WorkerID   Opt[uint64] // enter only
	Name       string
	// ParentID is the parent's instance id (enter only; dial9's viewer
	// nests spans by it as parent_span_id).
	ParentID Opt[uint64]
}

// WriteSpanClose writes e with SpanCloseOTelSchema.
func (w *Writer) WriteSpanClose(e SpanClose) error {
	if w.err != nil {
		return w.err
	}
	name, trace, span := w.internString(e.Name), w.internString(e.TraceID), w.internString(e.SpanID)
	parent := w.internOpt(e.ParentSpanID)
	svc := w.internOpt(e.Service)
	if err := w.begin(SpanCloseOTelSchema, e.Timestamp); err != nil {
		return err
	}
	b := binary.AppendUvarint(w.buf, e.InstanceID)
	b = binary.AppendUvarint(b, e.InstanceID)
	b = binary.AppendUvarint(b, e.StartNs)
	b = le.AppendUint32(b, name)
	b = le.AppendUint32(b, trace)
	b = le.AppendUint32(b, span)
	b = appendOptU32(b, e.ParentSpanID.Valid, parent)
	b = appendOptVarint(b, e.Tid)
	b = appendOptVarint(b, e.WorkerID)
	b = appendOptU32(b, e.Service.Valid, svc)
	b = appendOptU32(b, e.Pid.Valid, e.Pid.V)
	b = appendOptVarint(b, e.ParentInstanceID)
	b = appendOptVarint(b, e.FirstEnterNs)
	w.buf = binary.AppendUvarint(b, e.ActiveNs)
	v := Value{Type: StringMap, Map: e.Attributes}
	w.appendValue(&v)
	return w.maybeFlush()
}

// WriteSpanEnter writes e with SpanEnterOTelSchema.
func (w *Writer) WriteSpanEnter(e SpanInterval) error {
	if w.err != nil {
		return w.err
	}
	name := w.internString(e.Name)
	if err := w.begin(SpanEnterOTelSchema, e.Timestamp); err != nil {
		return err
	}
	b := binary.AppendUvarint(w.buf, e.InstanceID)
	b = binary.AppendUvarint(b, e.InstanceID)
	b = binary.AppendUvarint(b, e.Tid)
	b = appendOptVarint(b, e.WorkerID)
	b = le.AppendUint32(b, name)
	w.buf = appendOptVarint(b, e.ParentID)
	return w.maybeFlush()
}

// WriteSpanExit writes e with SpanExitOTelSchema; e.WorkerID is not written.
func (w *Writer) WriteSpanExit(e SpanInterval) error {
	if w.err != nil {
		return w.err
	}
	name := w.internString(e.Name)
	if err := w.begin(SpanExitOTelSchema, e.Timestamp); err != nil {
		return err
	}
	b := binary.AppendUvarint(w.buf, e.InstanceID)
	b = binary.AppendUvarint(b, e.InstanceID)
	b = binary.AppendUvarint(b, e.Tid)
	w.buf = le.AppendUint32(b, name)
	return w.maybeFlush()
}
