package wire

import (
	"io"
)

// The one place that interprets legacy records as events: LegacyEventReader
// presents each TOKIOTRC record as the TRC event it stands for, so that the
// analyses, dump and segment recovery read both layouts through one loop
// and the typed readers (read.go) see one event model.

// Schemas under which LegacyEventReader presents legacy records: the TRC
// event names (those of this package's schemas where there is one, the
// record's own name for definitions), with the legacy records' fields:
// strings resolved (String, not PooledString), timestamps in ns.
var legacySchemas = [...]*Schema{
	LegacyPollStart: {Name: NamePollStart, HasTimestamp: true, Fields: []Field{
		{FieldWorkerID, Varint}, {FieldLocalQueue, U8}, {FieldTaskID, Varint}, {FieldSpawnLoc, String}}},
	LegacyPollEnd: {Name: NamePollEnd, HasTimestamp: true, Fields: []Field{{FieldWorkerID, Varint}}},
	LegacyWorkerPark: {Name: NameWorkerPark, HasTimestamp: true, Fields: []Field{
		{FieldWorkerID, Varint}, {FieldLocalQueue, U8}, {FieldCPUTimeNs, Varint}}},
	LegacyWorkerUnpark: {Name: NameWorkerUnpark, HasTimestamp: true, Fields: []Field{
		{FieldWorkerID, Varint}, {FieldLocalQueue, U8}, {FieldCPUTimeNs, Varint}, {FieldSchedWaitNs, Varint}}},
	LegacyQueueSample: {Name: NameQueueSample, HasTimestamp: true, Fields: []Field{{fieldGlobalQueue, U8}}},
	LegacySpawnLocationDef: {Name: LegacySpawnLocationDef.String(), Fields: []Field{
		{fieldID, U16}, {fieldLocation, String}}},
	LegacyTaskSpawn: {Name: NameTaskSpawn, HasTimestamp: true, Fields: []Field{
		{FieldTaskID, Varint}, {FieldSpawnLoc, String}}},
	LegacyWakeEvent: {Name: NameWakeEvent, HasTimestamp: true, Fields: []Field{
		{fieldWakerTaskID, Varint}, {fieldWokenTaskID, Varint}, {fieldTargetWorker, U8}}},
	LegacyCpuSample: {Name: NameCpuSample, HasTimestamp: true, Fields: []Field{
		{FieldWorkerID, Varint}, {FieldTid, U32}, {FieldSource, U8},
		{FieldThreadName, Optional(String)}, {FieldCallchain, StackFrames}}},
	LegacyCallframeDef: {Name: LegacyCallframeDef.String(), Fields: []Field{
		{FieldAddr, Varint}, {fieldSymbol, String}, {fieldLocation, Optional(String)}}},
	LegacyThreadNameDef: {Name: LegacyThreadNameDef.String(), Fields: []Field{
		{FieldTid, U32}, {FieldName, String}}},
	LegacySegmentMetadata: {Name: NameSegmentMetadata, HasTimestamp: true, Fields: []Field{
		{FieldEntries, StringMap}}},
	LegacyTaskTerminate: {Name: NameTaskTerminate, HasTimestamp: true, Fields: []Field{
		{FieldTaskID, Varint}}},
}

// legacySchema returns the schema records of code c are presented under,
// or nil for a code with none.
func legacySchema(c LegacyCode) *Schema {
	if int(c) < len(legacySchemas) {
		return legacySchemas[c]
	}
	return nil
}

// LegacyEventName returns the event name a legacy record code is presented
// under, so that counts and filters read the same for both layouts.
func LegacyEventName(c LegacyCode) string {
	if s := legacySchema(c); s != nil {
		return s.Name
	}
	return c.String()
}

// LegacyEventReader reads a TOKIOTRC file as events. Records keep their
// file order and become the events of their TRC counterparts:
//   - timestamps are ns since the recorder started, the 32-bit µs
//     wrap-around undone (a SegmentMetadata's is its own ts_ns, v18 only);
//   - spawn locations and thread names are resolved from the definitions
//     read so far (a sample of an unnamed thread has no thread_name);
//   - CPU times and waits are in ns;
//   - definitions are events too: SpawnLocationDef, ThreadNameDef and
//     CallframeDef (fields addr, symbol and location), without timestamp.
//
// The typed readers read these events as they read TRC ones; a
// CallframeDef reads as a SymbolTableEntry.
type LegacyEventReader struct {
	lr    *LegacyReader
	rec   LegacyRecord
	clk   legacyClock
	names map[uint32]string
	locs  map[uint16]string
}

// NewLegacyEventReader reads the header of a TOKIOTRC file (see
// NewLegacyReader).
func NewLegacyEventReader(r io.Reader) (*LegacyEventReader, error) {
	lr, err := NewLegacyReader(r)
	if err != nil {
		return nil, err
	}
	return &LegacyEventReader{lr: lr, names: map[uint32]string{}, locs: map[uint16]string{}}, nil
}

// Version returns the version from the header.
func (r *LegacyEventReader) Version() uint32 { return r.lr.Version() }

// ReadEvent decodes the next record into ev, reusing its memory as
// Reader.ReadEvent does. Errors are those of LegacyReader.Read: io.EOF
// after the last record, a *LegacyError otherwise, and sticky.
func (r *LegacyEventReader) ReadEvent(ev *Event) error {
	if err := r.lr.Read(&r.rec); err != nil {
		return err
	}
	r.event(ev)
	return nil
}

// ReadSample reads the next record as ReadEvent does, except that a
// CpuSample is read straight into s, and sample is true: ev then has its
// Schema and Timestamp but no Values. The fields are those ReadEvent gives
// the sample; s.E.Callchain is reused by the next record.
func (r *LegacyEventReader) ReadSample(ev *Event, s *CpuSampleRead) (sample bool, err error) {
	rec := &r.rec
	if err := r.lr.Read(rec); err != nil {
		return false, err
	}
	if rec.Code != LegacyCpuSample {
		r.event(ev)
		return false, nil
	}
	ts := r.ns(rec)
	// Field by field, not a whole new struct: most of it is the same
	// from one sample to the next, and writing it whole costs write
	// barriers while the collector runs.
	e := &s.E
	e.Timestamp, e.WorkerID, e.Tid, e.Source, e.CPU = ts, uint64(rec.Worker), rec.Tid, rec.Source, Opt[uint64]{}
	e.Callchain = rec.Frames
	name, ok := r.names[rec.Tid]
	e.ThreadName = Opt[string]{name, ok}
	if s.X != (CpuSampleExt{}) {
		s.X = CpuSampleExt{} // a legacy sample has none of perfprof's fields
	}
	s.StackID, s.Pooled = 0, false
	ev.Schema, ev.Timestamp, ev.Values = legacySchemas[LegacyCpuSample], ts, ev.Values[:0]
	return true, nil
}

// event presents the record just read as an event in ev.
func (r *LegacyEventReader) event(ev *Event) {
	rec := &r.rec
	s := legacySchema(rec.Code)
	ev.Schema = s
	ev.Timestamp = 0
	// Values are set in place, as Reader does: a whole Value per field
	// would copy more than the record holds.
	n := len(s.Fields)
	if cap(ev.Values) < n {
		ev.Values = append(ev.Values[:cap(ev.Values)], make([]Value, n-cap(ev.Values))...)
	}
	v := ev.Values[:n]
	ev.Values = v
	if s.HasTimestamp {
		ev.Timestamp = r.ns(rec)
	}
	switch rec.Code {
	case LegacyPollStart:
		setU(&v[0], Varint, uint64(rec.Worker))
		setU(&v[1], U8, uint64(rec.LocalQueue))
		setU(&v[2], Varint, uint64(rec.TaskID))
		setS(&v[3], r.locs[rec.SpawnLocID])
	case LegacyPollEnd:
		setU(&v[0], Varint, uint64(rec.Worker))
	case LegacyWorkerPark, LegacyWorkerUnpark:
		setU(&v[0], Varint, uint64(rec.Worker))
		setU(&v[1], U8, uint64(rec.LocalQueue))
		setU(&v[2], Varint, uint64(rec.CPUUs)*1000)
		if rec.Code == LegacyWorkerUnpark {
			setU(&v[3], Varint, uint64(rec.SchedWaitUs)*1000)
		}
	case LegacyQueueSample:
		setU(&v[0], U8, uint64(rec.GlobalQueue))
	case LegacySpawnLocationDef:
		r.locs[rec.SpawnLocID] = rec.Name
		setU(&v[0], U16, uint64(rec.SpawnLocID))
		setS(&v[1], rec.Name)
	case LegacyTaskSpawn:
		setU(&v[0], Varint, uint64(rec.TaskID))
		setS(&v[1], r.locs[rec.SpawnLocID])
	case LegacyWakeEvent:
		setU(&v[0], Varint, uint64(rec.Waker))
		setU(&v[1], Varint, uint64(rec.Woken))
		setU(&v[2], U8, uint64(rec.TargetWorker))
	case LegacyCpuSample:
		setU(&v[0], Varint, uint64(rec.Worker))
		setU(&v[1], U32, uint64(rec.Tid))
		setU(&v[2], U8, uint64(rec.Source))
		if name, ok := r.names[rec.Tid]; ok {
			setS(&v[3], name)
		} else {
			v[3] = Value{Type: String, Absent: true}
		}
		// rec.Frames is reused by the next record, as Event's slices are.
		v[4].Type, v[4].Absent, v[4].Frames = StackFrames, false, rec.Frames
	case LegacyCallframeDef:
		setU(&v[0], Varint, rec.Addr)
		setS(&v[1], rec.Symbol)
		if rec.HasLocation {
			setS(&v[2], rec.Location)
		} else {
			v[2] = Value{Type: String, Absent: true}
		}
	case LegacyThreadNameDef:
		r.names[rec.Tid] = rec.Name
		setU(&v[0], U32, uint64(rec.Tid))
		setS(&v[1], rec.Name)
	case LegacySegmentMetadata:
		m := make([]StringPair, len(rec.Metadata))
		for i, kv := range rec.Metadata {
			m[i] = StringPair{Key: kv.Key, Value: kv.Value}
		}
		v[0].Type, v[0].Absent, v[0].Map = StringMap, false, m
	case LegacyTaskTerminate:
		setU(&v[0], Varint, uint64(rec.TaskID))
	}
}

// ns returns the timestamp of rec in ns: its own ts_ns for a
// SegmentMetadata (v18; 0 before), none for a TaskSpawn or TaskTerminate
// before v15, which had no ts_us.
func (r *LegacyEventReader) ns(rec *LegacyRecord) uint64 {
	switch rec.Code {
	case LegacySegmentMetadata:
		return rec.TsNs
	case LegacyTaskSpawn, LegacyTaskTerminate:
		if r.lr.Version() < 15 {
			return 0
		}
	}
	return r.clk.ns(rec.TsUs)
}

func setU(v *Value, t FieldType, x uint64) { v.Type, v.Absent, v.U = t, false, x }

func setS(v *Value, s string) { v.Type, v.Absent, v.S = String, false, s }

// legacyClock turns the u32 µs timestamps of a legacy file into ns,
// unwrapping the 71-minute wrap-around.
type legacyClock struct {
	last  uint32
	epoch uint64
	seen  bool
}

func (c *legacyClock) ns(us uint32) uint64 {
	if c.seen && us < c.last && c.last-us > 1<<31 {
		c.epoch += 1 << 32
	}
	if !c.seen || us > c.last || c.last-us > 1<<31 {
		c.last = us
	}
	c.seen = true
	return (c.epoch + uint64(us)) * 1000
}
