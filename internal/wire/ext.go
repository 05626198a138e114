package wire

import (
	"encoding/binary"

	"github.com/perfprof/perfprof/internal/convention"
)

// The events perfprof adds to dial9 trace files, as docs/trace-conventions.md
// describes them: extra optional fields on CpuSampleEvent, its own
// SpanEvent and ContextAttributeSet. Readers that look fields up by name and
// skip unknown events read these files as plain dial9 traces.

var (
	// CpuSampleExtSchema is CpuSampleEvent with perfprof's optional fields
	// appended after the built-in ones.
	CpuSampleExtSchema = &Schema{Name: NameCpuSample, HasTimestamp: true, Fields: []Field{
		{FieldWorkerID, Varint}, {FieldTid, U32}, {FieldSource, U8}, {FieldThreadName, Optional(PooledString)},
		{FieldCallchain, PooledStackFrames}, {FieldCPU, Optional(Varint)},
		{FieldTraceID, Optional(PooledString)}, {FieldSpanID, Optional(PooledString)},
		{FieldSpanRootName, Optional(PooledString)}, {FieldValueNs, Optional(Varint)},
		{FieldThreadState, Optional(U8)}, {FieldPid, Optional(U32)},
		{FieldCPUTimeDeltaNs, Optional(Varint)}, {FieldLinkSource, Optional(PooledString)},
		{FieldContextSetID, Optional(Varint)}}}
	// SpanSchema is perfprof's SpanEvent: one span that ran on a thread or
	// worker, at its start time.
	SpanSchema = &Schema{Name: NameSpan, HasTimestamp: true, Fields: []Field{
		{FieldTraceID, PooledString}, {FieldSpanID, PooledString}, {FieldParentSpanID, Optional(PooledString)},
		{FieldName, PooledString}, {FieldDurationNs, Varint}, {FieldTid, Optional(U32)},
		{FieldWorkerID, Optional(Varint)}, {FieldService, Optional(PooledString)}, {FieldPid, Optional(U32)}}}
	// ContextAttributeSetSchema is perfprof's ContextAttributeSet: a set of
	// context attributes that CPU samples of the same file refer to by id
	// (their context_set_id), written once before the first of them. It
	// has no timestamp: it is a definition, not something that happened,
	// and dial9's viewer bounds a trace by the timestamps of every event
	// it does not know, so a timestamp 0 would stretch its time line to
	// the clock's origin.
	ContextAttributeSetSchema = &Schema{Name: NameContextAttributeSet, Fields: []Field{
		{FieldSetID, Varint}, {FieldAttributes, StringMap}}}
)

// Thread states of CpuSampleExt.ThreadState: the codes of the convention's
// thread.state values, so that both spellings stay one definition.
const (
	ThreadBlocked  = convention.ThreadStateCodeBlocked  // slept, waited on I/O or a lock
	ThreadRunnable = convention.ThreadStateCodeRunnable // preempted, waiting for a CPU
)

// CpuSampleExt holds perfprof's fields of a CpuSampleEvent.
type CpuSampleExt struct {
	TraceID      Opt[string] // 32 lowercase hex digits
	SpanID       Opt[string] // 16 lowercase hex digits
	SpanRootName Opt[string]
	ValueNs      Opt[uint64] // off-CPU nanoseconds (source 1)
	ThreadState  Opt[uint8]  // ThreadBlocked or ThreadRunnable (source 1)
	Pid          Opt[uint32]
	// CPUTimeDeltaNs is the thread's CPU time since its previous on-CPU
	// sample, as the process read it at the sample (source 0).
	CPUTimeDeltaNs Opt[uint64]
	// LinkSource says how the link was found: a convention.LinkSource*
	// value.
	LinkSource Opt[string]
	// ContextSetID is the id of the ContextAttributeSet holding the
	// attributes of the thread context the sample was read in.
	ContextSetID Opt[uint64]
}

// ContextAttributeSet is a set of context attributes (key/value pairs, in
// the order of the record they came from) that samples refer to by ID. An
// ID means the set most recently defined under it in the file: a writer
// may define an ID again, with other attributes, for the samples after.
type ContextAttributeSet struct {
	ID         uint64
	Attributes []StringPair
}

// SpanEvent is a span that ran on a thread or a runtime worker.
type SpanEvent struct {
	Timestamp    uint64 // start
	TraceID      string
	SpanID       string
	ParentSpanID Opt[string]
	Name         string
	DurationNs   uint64
	Tid          Opt[uint32]
	WorkerID     Opt[uint64]
	Service      Opt[string]
	Pid          Opt[uint32]
}

// WriteCpuSampleExt writes e with CpuSampleExtSchema. Strings are interned in
// field order, as Write would.
func (w *Writer) WriteCpuSampleExt(e CpuSampleEvent, x CpuSampleExt) error {
	if w.err != nil {
		return w.err
	}
	name := w.internOpt(e.ThreadName)
	stack := w.internStack(e.Callchain)
	trace, span, root := w.internOpt(x.TraceID), w.internOpt(x.SpanID), w.internOpt(x.SpanRootName)
	linkSource := w.internOpt(x.LinkSource)
	if err := w.begin(CpuSampleExtSchema, e.Timestamp); err != nil {
		return err
	}
	b := binary.AppendUvarint(w.buf, e.WorkerID)
	b = le.AppendUint32(b, e.Tid)
	b = append(b, e.Source)
	b = appendOptU32(b, e.ThreadName.Valid, name)
	b = le.AppendUint32(b, stack)
	b = appendOptVarint(b, e.CPU)
	b = appendOptU32(b, x.TraceID.Valid, trace)
	b = appendOptU32(b, x.SpanID.Valid, span)
	b = appendOptU32(b, x.SpanRootName.Valid, root)
	b = appendOptVarint(b, x.ValueNs)
	if x.ThreadState.Valid {
		b = append(b, 1, x.ThreadState.V)
	} else {
		b = append(b, 0)
	}
	b = appendOptU32(b, x.Pid.Valid, x.Pid.V)
	b = appendOptVarint(b, x.CPUTimeDeltaNs)
	b = appendOptU32(b, x.LinkSource.Valid, linkSource)
	b = appendOptVarint(b, x.ContextSetID)
	w.buf = b
	return w.maybeFlush()
}

// WriteContextAttributeSet writes e with ContextAttributeSetSchema.
func (w *Writer) WriteContextAttributeSet(e ContextAttributeSet) error {
	if w.err != nil {
		return w.err
	}
	if err := w.begin(ContextAttributeSetSchema, 0); err != nil {
		return err
	}
	w.buf = binary.AppendUvarint(w.buf, e.ID)
	v := Value{Type: StringMap, Map: e.Attributes}
	w.appendValue(&v)
	return w.maybeFlush()
}

// WriteSpan writes e with SpanSchema.
func (w *Writer) WriteSpan(e SpanEvent) error {
	if w.err != nil {
		return w.err
	}
	trace, span := w.internString(e.TraceID), w.internString(e.SpanID)
	parent := w.internOpt(e.ParentSpanID)
	name := w.internString(e.Name)
	svc := w.internOpt(e.Service)
	if err := w.begin(SpanSchema, e.Timestamp); err != nil {
		return err
	}
	b := le.AppendUint32(w.buf, trace)
	b = le.AppendUint32(b, span)
	b = appendOptU32(b, e.ParentSpanID.Valid, parent)
	b = le.AppendUint32(b, name)
	b = binary.AppendUvarint(b, e.DurationNs)
	b = appendOptU32(b, e.Tid.Valid, e.Tid.V)
	b = appendOptVarint(b, e.WorkerID)
	b = appendOptU32(b, e.Service.Valid, svc)
	b = appendOptU32(b, e.Pid.Valid, e.Pid.V)
	w.buf = b
	return w.maybeFlush()
}

func (w *Writer) internOpt(s Opt[string]) uint32 {
	if !s.Valid {
		return 0
	}
	return w.internString(s.V)
}

func appendOptU32(b []byte, valid bool, v uint32) []byte {
	if !valid {
		return append(b, 0)
	}
	return le.AppendUint32(append(b, 1), v)
}

func appendOptVarint(b []byte, v Opt[uint64]) []byte {
	if !v.Valid {
		return append(b, 0)
	}
	return binary.AppendUvarint(append(b, 1), v.V)
}
