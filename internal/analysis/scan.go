package analysis

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/perfprof/perfprof/internal/wire"
)

// Schemas under which Scan presents legacy records: the TRC names (wire's
// schemas' where wire has one, the legacy name for definitions), legacy
// field layouts (strings resolved, timestamps in ns).
var (
	legacySchemas = map[wire.LegacyCode]*wire.Schema{
		wire.LegacyPollStart: {Name: wire.PollStartSchema.Name, HasTimestamp: true, Fields: []wire.Field{
			{Name: "worker_id", Type: wire.Varint}, {Name: "local_queue", Type: wire.U8}, {Name: "task_id", Type: wire.Varint},
			{Name: "spawn_loc", Type: wire.String}}},
		wire.LegacyPollEnd: {Name: wire.PollEndSchema.Name, HasTimestamp: true, Fields: []wire.Field{{Name: "worker_id", Type: wire.Varint}}},
		wire.LegacyWorkerPark: {Name: wire.WorkerParkSchema.Name, HasTimestamp: true, Fields: []wire.Field{
			{Name: "worker_id", Type: wire.Varint}, {Name: "local_queue", Type: wire.U8}, {Name: "cpu_time_ns", Type: wire.Varint}}},
		wire.LegacyWorkerUnpark: {Name: wire.WorkerUnparkSchema.Name, HasTimestamp: true, Fields: []wire.Field{
			{Name: "worker_id", Type: wire.Varint}, {Name: "local_queue", Type: wire.U8}, {Name: "cpu_time_ns", Type: wire.Varint},
			{Name: "sched_wait_ns", Type: wire.Varint}}},
		wire.LegacyQueueSample: {Name: "QueueSampleEvent", HasTimestamp: true, Fields: []wire.Field{{Name: "global_queue", Type: wire.U8}}},
		wire.LegacySpawnLocationDef: {Name: wire.LegacySpawnLocationDef.String(), Fields: []wire.Field{
			{Name: "id", Type: wire.U16}, {Name: "location", Type: wire.String}}},
		wire.LegacyTaskSpawn: {Name: "TaskSpawnEvent", HasTimestamp: true, Fields: []wire.Field{
			{Name: "task_id", Type: wire.Varint}, {Name: "spawn_loc", Type: wire.String}}},
		wire.LegacyWakeEvent: {Name: "WakeEventEvent", HasTimestamp: true, Fields: []wire.Field{
			{Name: "waker_task_id", Type: wire.Varint}, {Name: "woken_task_id", Type: wire.Varint}, {Name: "target_worker", Type: wire.U8}}},
		wire.LegacyCpuSample: {Name: wire.CpuSampleSchema.Name, HasTimestamp: true, Fields: []wire.Field{
			{Name: "worker_id", Type: wire.Varint}, {Name: "tid", Type: wire.U32}, {Name: "source", Type: wire.U8},
			{Name: "thread_name", Type: wire.Optional(wire.String)}, {Name: "callchain", Type: wire.StackFrames}}},
		wire.LegacyCallframeDef: {Name: wire.LegacyCallframeDef.String(), Fields: []wire.Field{
			{Name: "addr", Type: wire.Varint}, {Name: "symbol", Type: wire.String}, {Name: "location", Type: wire.Optional(wire.String)}}},
		wire.LegacyThreadNameDef: {Name: wire.LegacyThreadNameDef.String(), Fields: []wire.Field{
			{Name: "tid", Type: wire.U32}, {Name: "name", Type: wire.String}}},
		wire.LegacySegmentMetadata: {Name: wire.SegmentMetadataSchema.Name, HasTimestamp: true, Fields: []wire.Field{
			{Name: "entries", Type: wire.StringMap}}},
		wire.LegacyTaskTerminate: {Name: "TaskTerminateEvent", HasTimestamp: true, Fields: []wire.Field{
			{Name: "task_id", Type: wire.Varint}}},
	}
)

// ScanInfo describes a scanned file.
type ScanInfo struct {
	Format    string
	Gzip      bool
	Truncated error // non-nil if the file ends inside a record; the events before it were scanned
}

// Scan calls fn for every event of one file, in file order. Legacy records
// are presented as events named like their TRC counterparts, with
// timestamps in ns since the recorder started and definitions resolved. An
// error of fn stops the scan and is returned.
func Scan(path string, fn func(ev *wire.Event) error) (ScanInfo, error) {
	o, err := open(path, nil)
	if err != nil {
		return ScanInfo{}, err
	}
	defer o.Close()
	info := ScanInfo{Format: o.format, Gzip: o.gzip}
	wrap := func(err error) (ScanInfo, error) {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			info.Truncated = fmt.Errorf("%s: %w", path, err)
			return info, nil
		}
		return info, fmt.Errorf("%s: %w", path, err)
	}
	if o.format == FormatTRC {
		rd := wire.NewReader(o.r)
		var ev wire.Event
		for {
			err := rd.ReadEvent(&ev)
			if err == io.EOF {
				return info, nil
			}
			if err != nil {
				return wrap(err)
			}
			if err := fn(&ev); err != nil {
				return info, err
			}
		}
	}
	lr, err := wire.NewLegacyReader(o.r)
	if err != nil {
		return wrap(err)
	}
	var (
		rec   wire.LegacyRecord
		ev    wire.Event
		clk   legacyClock
		names = map[uint32]string{}
		locs  = map[uint16]string{}
	)
	for {
		err := lr.Read(&rec)
		if err == io.EOF {
			return info, nil
		}
		if err != nil {
			return wrap(err)
		}
		s := legacySchemas[rec.Code]
		if s == nil {
			continue
		}
		ev.Schema = s
		ev.Timestamp = 0
		ev.Values = ev.Values[:0]
		ts := func() { ev.Timestamp = clk.ns(rec.TsUs) }
		add := func(v wire.Value) { ev.Values = append(ev.Values, v) }
		switch rec.Code {
		case wire.LegacyPollStart:
			ts()
			add(wire.VarintValue(uint64(rec.Worker)))
			add(wire.U8Value(rec.LocalQueue))
			add(wire.VarintValue(uint64(rec.TaskID)))
			add(wire.StringValue(locs[rec.SpawnLocID]))
		case wire.LegacyPollEnd:
			ts()
			add(wire.VarintValue(uint64(rec.Worker)))
		case wire.LegacyWorkerPark, wire.LegacyWorkerUnpark:
			ts()
			add(wire.VarintValue(uint64(rec.Worker)))
			add(wire.U8Value(rec.LocalQueue))
			add(wire.VarintValue(uint64(rec.CPUUs) * 1000))
			if rec.Code == wire.LegacyWorkerUnpark {
				add(wire.VarintValue(uint64(rec.SchedWaitUs) * 1000))
			}
		case wire.LegacyQueueSample:
			ts()
			add(wire.U8Value(rec.GlobalQueue))
		case wire.LegacySpawnLocationDef:
			locs[rec.SpawnLocID] = rec.Name
			add(wire.U16Value(rec.SpawnLocID))
			add(wire.StringValue(rec.Name))
		case wire.LegacyTaskSpawn:
			if lr.Version() >= 15 {
				ts()
			}
			add(wire.VarintValue(uint64(rec.TaskID)))
			add(wire.StringValue(locs[rec.SpawnLocID]))
		case wire.LegacyWakeEvent:
			ts()
			add(wire.VarintValue(uint64(rec.Waker)))
			add(wire.VarintValue(uint64(rec.Woken)))
			add(wire.U8Value(rec.TargetWorker))
		case wire.LegacyCpuSample:
			ts()
			add(wire.VarintValue(uint64(rec.Worker)))
			add(wire.U32Value(rec.Tid))
			add(wire.U8Value(rec.Source))
			if n, ok := names[rec.Tid]; ok {
				add(wire.StringValue(n))
			} else {
				add(wire.Absent)
			}
			add(wire.StackValue(slices.Clone(rec.Frames)))
		case wire.LegacyCallframeDef:
			add(wire.VarintValue(rec.Addr))
			add(wire.StringValue(rec.Symbol))
			if rec.HasLocation {
				add(wire.StringValue(rec.Location))
			} else {
				add(wire.Absent)
			}
		case wire.LegacyThreadNameDef:
			names[rec.Tid] = rec.Name
			add(wire.U32Value(rec.Tid))
			add(wire.StringValue(rec.Name))
		case wire.LegacySegmentMetadata:
			ev.Timestamp = rec.TsNs
			m := make([]wire.StringPair, len(rec.Metadata))
			for i, kv := range rec.Metadata {
				m[i] = wire.StringPair{Key: kv.Key, Value: kv.Value}
			}
			add(wire.StringMapValue(m))
		case wire.LegacyTaskTerminate:
			if lr.Version() >= 15 {
				ts()
			}
			add(wire.VarintValue(uint64(rec.TaskID)))
		}
		if err := fn(&ev); err != nil {
			return info, err
		}
	}
}

// Symbols reads the symbol table of one file (SymbolTableEntry events, or
// legacy CallframeDef records): address -> frames, outermost first.
func Symbols(path string) (map[uint64][]Frame, error) {
	b := newBuilder(path)
	_, err := Scan(path, func(ev *wire.Event) error {
		switch ev.Schema.Name {
		case wire.SymbolTableEntrySchema.Name:
			k := b.kindOf(ev.Schema)
			if k.k == kSymbol {
				b.event(ev)
			}
		case legacySchemas[wire.LegacyCallframeDef].Name:
			if ev.Schema != legacySchemas[wire.LegacyCallframeDef] {
				return nil
			}
			f := Frame{Func: ev.Values[1].S}
			if !ev.Values[2].Absent {
				f.File, f.Line = splitLoc(ev.Values[2].S)
			}
			b.symbol(ev.Values[0].U, 0, f)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make(map[uint64][]Frame, len(b.syms))
	for a, es := range b.syms {
		slices.SortFunc(es, func(x, y symEntry) int { return cmp.Compare(x.depth, y.depth) })
		fs := make([]Frame, len(es))
		for i, e := range es {
			fs[i] = e.f
		}
		out[a] = fs
	}
	return out, nil
}
