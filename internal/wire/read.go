package wire

import (
	"math"
	"strconv"
	"strings"

	"github.com/perfprof/perfprof/internal/convention"
)

// Typed readers: the read side of the typed writers (events.go, ext.go).
// A Layout is found once per schema and turns a decoded Event into the
// struct its Write method takes, looking fields up by position, not name.
// They are lenient as readers of foreign files must be: a field the schema
// lacks, an absent optional one or one of an unexpected type reads as the
// zero value (an Opt as not Valid); any integer type reads into any integer
// field, saturating at the field's maximum; String and PooledString read
// alike, and so do StackFrames and PooledStackFrames.

// Kind is the typed form a schema's events read as.
type Kind uint8

// Kinds. A schema has the kind of its name only if its identifying fields
// are there (worker_id for the runtime events, callchain for a CPU sample,
// addr and symbol_name for a symbol, realtime_ns, entries, span_id, set_id
// and attributes); otherwise it is KindOther.
const (
	KindOther Kind = iota
	KindPollStart
	KindPollEnd
	KindWorkerPark
	KindWorkerUnpark
	KindCpuSample
	KindSymbol // SymbolTableEntry, or a legacy CallframeDef
	KindClockSync
	KindSegmentMetadata
	KindSpan
	KindContextAttributeSet
	// KindSpanClose is a SpanClose__{Type} event of dial9's span contract
	// with perfprof's OTel ids (spans.go); a close without them, or
	// without the contract's span_instance_id, start_timestamp_ns and
	// span_name, is KindOther.
	KindSpanClose
)

// slots: the fields the typed forms read, by position in Layout.idx.
const (
	sWorker = iota
	sLocalQueue
	sTask
	sSpawnLoc
	sCPUTime
	sSchedWait
	sTid
	sSource
	sThreadName
	sCallchain
	sCPU
	sAddr
	sSize
	sSymName
	sDepth
	sSrcFile
	sSrcLine
	sRealtime
	sEntries
	sTraceID
	sSpanID
	sRoot
	sValue
	sState
	sPid
	sParent
	sName
	sDuration
	sService
	sCPUDelta
	sLinkSource
	sContextSetID
	sSetID
	sAttributes
	sInstance
	sStartTs
	sSpanName
	sOTelSpan
	sOTelParent
	sParentInst
	sFirstEnter
	sActive
	sLocation // legacy CallframeDef: "file:line"
	nSlots
)

var slotFields = [nSlots]string{
	sWorker: FieldWorkerID, sLocalQueue: FieldLocalQueue, sTask: FieldTaskID, sSpawnLoc: FieldSpawnLoc,
	sCPUTime: FieldCPUTimeNs, sSchedWait: FieldSchedWaitNs, sTid: FieldTid, sSource: FieldSource,
	sThreadName: FieldThreadName, sCallchain: FieldCallchain, sCPU: FieldCPU, sAddr: FieldAddr,
	sSize: FieldSize, sSymName: FieldSymbolName, sDepth: FieldInlineDepth, sSrcFile: FieldSourceFile,
	sSrcLine: FieldSourceLine, sRealtime: FieldRealtimeNs, sEntries: FieldEntries, sTraceID: FieldTraceID,
	sSpanID: FieldSpanID, sRoot: FieldSpanRootName, sValue: FieldValueNs, sState: FieldThreadState,
	sPid: FieldPid, sParent: FieldParentSpanID, sName: FieldName, sDuration: FieldDurationNs,
	sService: FieldService, sCPUDelta: FieldCPUTimeDeltaNs, sLinkSource: FieldLinkSource,
	sContextSetID: FieldContextSetID, sSetID: FieldSetID, sAttributes: FieldAttributes,
	sInstance: FieldSpanInstanceID, sStartTs: FieldStartTimestampNs, sSpanName: FieldSpanName,
	sOTelSpan: FieldOTelSpanID, sOTelParent: FieldOTelParentSpanID,
	sParentInst: FieldParentSpanInstanceID, sFirstEnter: FieldFirstEnterTimestampNs, sActive: FieldActiveNs,
}

var kindsByName = map[string]Kind{
	NamePollStart: KindPollStart, NamePollEnd: KindPollEnd, NameWorkerPark: KindWorkerPark,
	NameWorkerUnpark: KindWorkerUnpark, NameCpuSample: KindCpuSample, NameSymbolTableEntry: KindSymbol,
	NameClockSync: KindClockSync, NameSegmentMetadata: KindSegmentMetadata, NameSpan: KindSpan,
	NameContextAttributeSet: KindContextAttributeSet,
}

// identifying fields of each kind: without them a schema is KindOther.
var kindNeeds = map[Kind][]int{
	KindCpuSample:           {sCallchain},
	KindPollStart:           {sWorker},
	KindPollEnd:             {sWorker},
	KindWorkerPark:          {sWorker},
	KindWorkerUnpark:        {sWorker},
	KindSymbol:              {sAddr, sSymName},
	KindClockSync:           {sRealtime},
	KindSegmentMetadata:     {sEntries},
	KindSpan:                {sSpanID},
	KindContextAttributeSet: {sSetID, sAttributes},
	KindSpanClose:           {sInstance, sStartTs, sSpanName, sTraceID, sOTelSpan},
}

// Layout says where the events of one schema keep the fields of their
// typed form. Find it once per schema (LayoutOf) and keep it: a Reader
// returns one *Schema for all the streams that define the same schema.
type Layout struct {
	Kind Kind
	// Legacy is set for the schemas LegacyEventReader presents records
	// under: their timestamps are ns since the recorder started.
	Legacy bool
	idx    [nSlots]int
	// fast is the plan of ReadSample's fast path, nil for a schema it does
	// not read; fastMax the most bytes an event body of it can take.
	fast    []fastField
	fastMax int
}

// LayoutOf returns the layout of s. A legacy CallframeDef is KindSymbol
// only as LegacyEventReader presents it, not as an event of that name in a
// TRC file.
func LayoutOf(s *Schema) *Layout {
	l := &Layout{Kind: kindsByName[s.Name]}
	if l.Kind == KindOther && strings.HasPrefix(s.Name, NameSpanClosePrefix) {
		l.Kind = KindSpanClose
	}
	for c := LegacyCode(0); int(c) < len(legacySchemas); c++ {
		if legacySchemas[c] == s {
			l.Legacy = true
		}
	}
	for i := range l.idx {
		l.idx[i] = s.FieldIndex(slotFields[i])
	}
	if l.Legacy && s == legacySchemas[LegacyCallframeDef] {
		l.Kind = KindSymbol
		l.idx[sSymName] = s.FieldIndex(fieldSymbol)
		l.idx[sLocation] = s.FieldIndex(fieldLocation)
	} else {
		l.idx[sLocation] = -1
	}
	for _, f := range kindNeeds[l.Kind] {
		if l.idx[f] < 0 {
			l.Kind = KindOther
		}
	}
	// A value's type is its field's, so a field of a type its slot cannot
	// read is as good as missing: decided here, not per event.
	for i, j := range l.idx {
		if j < 0 {
			continue
		}
		switch t := s.Fields[j].Type.Base(); {
		case strSlots[i]:
			if t != String && t != PooledString {
				l.idx[i] = -1
			}
		case i == sCallchain:
			if t != StackFrames && t != PooledStackFrames {
				l.idx[i] = -1
			}
		case i == sEntries || i == sAttributes:
			if t != StringMap {
				l.idx[i] = -1
			}
		default:
			if t != Varint && t != U8 && t != U16 && t != U32 && t != I64 {
				l.idx[i] = -1
			}
		}
	}
	l.planFast(s)
	return l
}

// strSlots are the slots that read a string; callchain, entries and
// attributes read their own types; the others read an integer.
var strSlots = [nSlots]bool{sSpawnLoc: true, sThreadName: true, sSymName: true, sSrcFile: true, sTraceID: true,
	sSpanID: true, sRoot: true, sParent: true, sName: true, sService: true, sLocation: true, sLinkSource: true,
	sSpanName: true, sOTelSpan: true, sOTelParent: true}

// value returns the value of slot i, or nil if the schema has no such
// field (of a type the slot reads) or the value is absent.
func (l *Layout) value(ev *Event, i int) *Value {
	j := l.idx[i]
	if j < 0 || j >= len(ev.Values) || ev.Values[j].Absent {
		return nil
	}
	return &ev.Values[j]
}

// u returns the integer value of slot i, and whether it is there.
func (l *Layout) u(ev *Event, i int) (uint64, bool) {
	if v := l.value(ev, i); v != nil {
		return v.U, true
	}
	return 0, false
}

func (l *Layout) u64(ev *Event, i int) uint64 { v, _ := l.u(ev, i); return v }

func (l *Layout) u32(ev *Event, i int) uint32 { return uint32(min(l.u64(ev, i), math.MaxUint32)) }

func (l *Layout) u8(ev *Event, i int) uint8 { return uint8(min(l.u64(ev, i), math.MaxUint8)) }

func (l *Layout) optU64(ev *Event, i int) Opt[uint64] {
	v, ok := l.u(ev, i)
	return Opt[uint64]{v, ok}
}

func (l *Layout) optU32(ev *Event, i int) Opt[uint32] {
	v, ok := l.u(ev, i)
	return Opt[uint32]{uint32(min(v, math.MaxUint32)), ok}
}

// s returns the string value of slot i, and whether it is there.
func (l *Layout) s(ev *Event, i int) (string, bool) {
	if v := l.value(ev, i); v != nil {
		return v.S, true
	}
	return "", false
}

func (l *Layout) str(ev *Event, i int) string { s, _ := l.s(ev, i); return s }

func (l *Layout) optStr(ev *Event, i int) Opt[string] {
	s, ok := l.s(ev, i)
	return Opt[string]{s, ok}
}

// PollStart reads ev as a PollStartEvent.
func (l *Layout) PollStart(ev *Event) PollStartEvent {
	return PollStartEvent{Timestamp: ev.Timestamp, WorkerID: l.u64(ev, sWorker), LocalQueue: l.u8(ev, sLocalQueue),
		TaskID: l.u64(ev, sTask), SpawnLoc: l.str(ev, sSpawnLoc)}
}

// PollEnd reads ev as a PollEndEvent.
func (l *Layout) PollEnd(ev *Event) PollEndEvent {
	return PollEndEvent{Timestamp: ev.Timestamp, WorkerID: l.u64(ev, sWorker)}
}

// WorkerPark reads ev as a WorkerParkEvent.
func (l *Layout) WorkerPark(ev *Event) WorkerParkEvent {
	return WorkerParkEvent{Timestamp: ev.Timestamp, WorkerID: l.u64(ev, sWorker), LocalQueue: l.u8(ev, sLocalQueue),
		CPUTimeNs: l.u64(ev, sCPUTime), Tid: l.u32(ev, sTid)}
}

// WorkerUnpark reads ev as a WorkerUnparkEvent.
func (l *Layout) WorkerUnpark(ev *Event) WorkerUnparkEvent {
	return WorkerUnparkEvent{Timestamp: ev.Timestamp, WorkerID: l.u64(ev, sWorker), LocalQueue: l.u8(ev, sLocalQueue),
		CPUTimeNs: l.u64(ev, sCPUTime), SchedWaitNs: l.u64(ev, sSchedWait), Tid: l.u32(ev, sTid)}
}

// CpuSample reads ev into e, a CpuSampleEvent, and x, perfprof's fields of
// it: the one typed reader on the hot path, so it fills the caller's
// structs instead of returning copies. A sample without worker_id reads as
// convention.NoWorker. Callchain shares memory with ev (see Event).
func (l *Layout) CpuSample(ev *Event, e *CpuSampleEvent, x *CpuSampleExt) {
	e.Timestamp = ev.Timestamp
	e.WorkerID = convention.NoWorker
	if w, ok := l.u(ev, sWorker); ok {
		e.WorkerID = w
	}
	e.Tid = l.u32(ev, sTid)
	e.Source = l.u8(ev, sSource)
	e.ThreadName = l.optStr(ev, sThreadName)
	e.Callchain = nil
	if v := l.value(ev, sCallchain); v != nil {
		e.Callchain = v.Frames
	}
	e.CPU = l.optU64(ev, sCPU)
	x.TraceID = l.optStr(ev, sTraceID)
	x.SpanID = l.optStr(ev, sSpanID)
	x.SpanRootName = l.optStr(ev, sRoot)
	x.ValueNs = l.optU64(ev, sValue)
	st, ok := l.u(ev, sState)
	x.ThreadState = Opt[uint8]{uint8(min(st, math.MaxUint8)), ok}
	x.Pid = l.optU32(ev, sPid)
	x.CPUTimeDeltaNs = l.optU64(ev, sCPUDelta)
	x.LinkSource = l.optStr(ev, sLinkSource)
	x.ContextSetID = l.optU64(ev, sContextSetID)
}

// StackID returns the stack-pool id of ev's callchain, if it is a pooled
// one: within a stream, equal ids are equal stacks sharing one slice, so a
// reader can know a stack again without comparing its addresses.
func (l *Layout) StackID(ev *Event) (uint64, bool) {
	if v := l.value(ev, sCallchain); v != nil && v.Type == PooledStackFrames {
		return v.U, true
	}
	return 0, false
}

// Symbol reads ev as a SymbolTableEntry. A legacy CallframeDef has inline
// depth 0 and its location "file:line" (line optional) split.
func (l *Layout) Symbol(ev *Event) SymbolTableEntry {
	e := SymbolTableEntry{Timestamp: ev.Timestamp, Addr: l.u64(ev, sAddr), Size: l.u64(ev, sSize),
		SymbolName: l.str(ev, sSymName), InlineDepth: l.u64(ev, sDepth), SourceFile: l.str(ev, sSrcFile),
		SourceLine: l.u64(ev, sSrcLine)}
	if loc, ok := l.s(ev, sLocation); ok {
		e.SourceFile, e.SourceLine = splitLocation(loc)
	}
	return e
}

// splitLocation splits a CallframeDef location "file:line" (line optional).
func splitLocation(loc string) (string, uint64) {
	if i := strings.LastIndexByte(loc, ':'); i > 0 {
		if n, err := strconv.Atoi(loc[i+1:]); err == nil {
			return loc[:i], uint64(n)
		}
	}
	return loc, 0
}

// ClockSync reads ev as a ClockSyncEvent.
func (l *Layout) ClockSync(ev *Event) ClockSyncEvent {
	return ClockSyncEvent{Timestamp: ev.Timestamp, RealtimeNs: l.u64(ev, sRealtime)}
}

// SegmentMetadata reads ev as a SegmentMetadataEvent. Entries share memory
// with ev.
func (l *Layout) SegmentMetadata(ev *Event) SegmentMetadataEvent {
	e := SegmentMetadataEvent{Timestamp: ev.Timestamp}
	if v := l.value(ev, sEntries); v != nil {
		e.Entries = v.Map
	}
	return e
}

// ContextAttributeSet reads ev as a ContextAttributeSet. Attributes share
// memory with ev.
func (l *Layout) ContextAttributeSet(ev *Event) ContextAttributeSet {
	e := ContextAttributeSet{ID: l.u64(ev, sSetID)}
	if v := l.value(ev, sAttributes); v != nil {
		e.Attributes = v.Map
	}
	return e
}

// pairs returns the string map of slot i, nil if absent or empty. It
// shares memory with ev.
func (l *Layout) pairs(ev *Event, i int) []StringPair {
	if v := l.value(ev, i); v != nil && len(v.Map) > 0 {
		return v.Map
	}
	return nil
}

// Span reads ev as a SpanEvent.
func (l *Layout) Span(ev *Event) SpanEvent {
	return SpanEvent{Timestamp: ev.Timestamp, TraceID: l.str(ev, sTraceID), SpanID: l.str(ev, sSpanID),
		ParentSpanID: l.optStr(ev, sParent), Name: l.str(ev, sName), DurationNs: l.u64(ev, sDuration),
		Tid: l.optU32(ev, sTid), WorkerID: l.optU64(ev, sWorker), Service: l.optStr(ev, sService),
		Pid: l.optU32(ev, sPid)}
}

// SpanClose reads ev as a SpanClose. Attributes share memory with ev.
func (l *Layout) SpanClose(ev *Event) SpanClose {
	return SpanClose{Timestamp: ev.Timestamp, InstanceID: l.u64(ev, sInstance), StartNs: l.u64(ev, sStartTs),
		Name: l.str(ev, sSpanName), TraceID: l.str(ev, sTraceID), SpanID: l.str(ev, sOTelSpan),
		ParentSpanID: l.optStr(ev, sOTelParent), Tid: l.optU64(ev, sTid), WorkerID: l.optU64(ev, sWorker),
		Service: l.optStr(ev, sService), Pid: l.optU32(ev, sPid),
		ParentInstanceID: l.optU64(ev, sParentInst), FirstEnterNs: l.optU64(ev, sFirstEnter), ActiveNs: l.u64(ev, sActive),
		Attributes: l.pairs(ev, sAttributes)}
}
