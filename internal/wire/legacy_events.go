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
	rec := &r.rec
	if err := r.lr.Read(rec); err != nil {
		return err
	}
	ev.Schema = legacySchema(rec.Code)
	ev.Timestamp = 0
	ev.Values = ev.Values[:0]
	ts := func() { ev.Timestamp = r.clk.ns(rec.TsUs) }
	add := func(v Value) { ev.Values = append(ev.Values, v) }
	switch rec.Code {
	case LegacyPollStart:
		ts()
		add(VarintValue(uint64(rec.Worker)))
		add(U8Value(rec.LocalQueue))
		add(VarintValue(uint64(rec.TaskID)))
		add(StringValue(r.locs[rec.SpawnLocID]))
	case LegacyPollEnd:
		ts()
		add(VarintValue(uint64(rec.Worker)))
	case LegacyWorkerPark, LegacyWorkerUnpark:
		ts()
		add(VarintValue(uint64(rec.Worker)))
		add(U8Value(rec.LocalQueue))
		add(VarintValue(uint64(rec.CPUUs) * 1000))
		if rec.Code == LegacyWorkerUnpark {
			add(VarintValue(uint64(rec.SchedWaitUs) * 1000))
		}
	case LegacyQueueSample:
		ts()
		add(U8Value(rec.GlobalQueue))
	case LegacySpawnLocationDef:
		r.locs[rec.SpawnLocID] = rec.Name
		add(U16Value(rec.SpawnLocID))
		add(StringValue(rec.Name))
	case LegacyTaskSpawn:
		if r.lr.Version() >= 15 {
			ts()
		}
		add(VarintValue(uint64(rec.TaskID)))
		add(StringValue(r.locs[rec.SpawnLocID]))
	case LegacyWakeEvent:
		ts()
		add(VarintValue(uint64(rec.Waker)))
		add(VarintValue(uint64(rec.Woken)))
		add(U8Value(rec.TargetWorker))
	case LegacyCpuSample:
		ts()
		add(VarintValue(uint64(rec.Worker)))
		add(U32Value(rec.Tid))
		add(U8Value(rec.Source))
		if n, ok := r.names[rec.Tid]; ok {
			add(StringValue(n))
		} else {
			add(Absent)
		}
		// rec.Frames is reused by the next record, as Event's slices are.
		add(StackValue(rec.Frames))
	case LegacyCallframeDef:
		add(VarintValue(rec.Addr))
		add(StringValue(rec.Symbol))
		if rec.HasLocation {
			add(StringValue(rec.Location))
		} else {
			add(Absent)
		}
	case LegacyThreadNameDef:
		r.names[rec.Tid] = rec.Name
		add(U32Value(rec.Tid))
		add(StringValue(rec.Name))
	case LegacySegmentMetadata:
		ev.Timestamp = rec.TsNs
		m := make([]StringPair, len(rec.Metadata))
		for i, kv := range rec.Metadata {
			m[i] = StringPair{Key: kv.Key, Value: kv.Value}
		}
		add(StringMapValue(m))
	case LegacyTaskTerminate:
		if r.lr.Version() >= 15 {
			ts()
		}
		add(VarintValue(uint64(rec.TaskID)))
	}
	return nil
}

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
