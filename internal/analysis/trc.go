package analysis

import (
	"errors"
	"io"
	"strings"

	"github.com/perfprof/perfprof/internal/wire"
)

// Event kinds the loader understands.
const (
	kOther = iota
	kCPU
	kPollStart
	kPollEnd
	kPark
	kUnpark
	kSymbol
	kClock
	kMeta
	kSpan
)

// Field slots of a kind, resolved by name once per schema.
const (
	fWorker = iota
	fTid
	fSource
	fThreadName
	fCallchain
	fCPU
	fTraceID
	fSpanID
	fRoot
	fValue
	fState
	fPid
	fTask
	fSpawnLoc
	fAddr
	fSymName
	fDepth
	fSrcFile
	fSrcLine
	fRealtime
	fEntries
	fParent
	fName
	fDuration
	fService
	fSchedWait
	nSlots
)

var slotNames = [nSlots]string{
	fWorker: "worker_id", fTid: "tid", fSource: "source", fThreadName: "thread_name",
	fCallchain: "callchain", fCPU: "cpu", fTraceID: "trace_id", fSpanID: "span_id",
	fRoot: "span_root_name", fValue: "value_ns", fState: "thread_state", fPid: "pid",
	fTask: "task_id", fSpawnLoc: "spawn_loc", fAddr: "addr", fSymName: "symbol_name",
	fDepth: "inline_depth", fSrcFile: "source_file", fSrcLine: "source_line",
	fRealtime: "realtime_ns", fEntries: "entries", fParent: "parent_span_id", fName: "name",
	fDuration: "duration_ns", fService: "service", fSchedWait: "sched_wait_ns",
}

type kind struct {
	name    string
	k       int
	idx     [nSlots]int
	dropped []int // integer fields named dropped*/lost*
	count   int64
}

func (b *builder) kindOf(s *wire.Schema) *kind {
	if k, ok := b.kinds[s]; ok {
		return k
	}
	k := &kind{name: s.Name}
	switch s.Name {
	case wire.CpuSampleSchema.Name:
		k.k = kCPU
	case wire.PollStartSchema.Name:
		k.k = kPollStart
	case wire.PollEndSchema.Name:
		k.k = kPollEnd
	case wire.WorkerParkSchema.Name:
		k.k = kPark
	case wire.WorkerUnparkSchema.Name:
		k.k = kUnpark
	case wire.SymbolTableEntrySchema.Name:
		k.k = kSymbol
	case wire.ClockSyncSchema.Name:
		k.k = kClock
	case wire.SegmentMetadataSchema.Name:
		k.k = kMeta
	case wire.SpanSchema.Name:
		k.k = kSpan
	}
	for i := range k.idx {
		k.idx[i] = s.FieldIndex(slotNames[i])
	}
	for i, f := range s.Fields {
		n := strings.ToLower(f.Name)
		if (strings.HasPrefix(n, "dropped") || strings.HasPrefix(n, "lost")) && isInt(f.Type.Base()) {
			k.dropped = append(k.dropped, i)
		}
	}
	// A kind is only handled if its identifying fields are there.
	need := map[int][]int{
		kCPU:       {fCallchain},
		kPollStart: {fWorker},
		kPollEnd:   {fWorker},
		kPark:      {fWorker},
		kUnpark:    {fWorker},
		kSymbol:    {fAddr, fSymName},
		kClock:     {fRealtime},
		kMeta:      {fEntries},
		kSpan:      {fSpanID},
	}
	for _, f := range need[k.k] {
		if k.idx[f] < 0 {
			k.k = kOther
		}
	}
	b.kinds[s] = k
	b.kindOrder = append(b.kindOrder, k)
	return k
}

func isInt(t wire.FieldType) bool {
	switch t {
	case wire.Varint, wire.U8, wire.U16, wire.U32, wire.I64:
		return true
	}
	return false
}

// vu returns the integer value of slot i.
func vu(ev *wire.Event, i int) (uint64, bool) {
	if i < 0 {
		return 0, false
	}
	v := &ev.Values[i]
	if v.Absent {
		return 0, false
	}
	switch v.Type {
	case wire.Varint, wire.U8, wire.U16, wire.U32, wire.I64:
		return v.U, true
	}
	return 0, false
}

// vs returns the string value of slot i.
func vs(ev *wire.Event, i int) (string, bool) {
	if i < 0 {
		return "", false
	}
	v := &ev.Values[i]
	if v.Absent {
		return "", false
	}
	switch v.Type {
	case wire.String, wire.PooledString:
		return v.S, true
	}
	return "", false
}

// decodeTRC reads a TRC file into b. A truncated tail is not an error: it
// sets Truncated and the events before it are kept.
func (b *builder) decodeTRC(r io.Reader) error {
	rd := wire.NewReader(r)
	var ev wire.Event
	defer func() {
		st := rd.Stats()
		b.info.Bytes = st.Bytes
		b.info.Streams = st.Headers
	}()
	for {
		err := rd.ReadEvent(&ev)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				b.info.Truncated = true
				var fe *wire.FormatError
				if errors.As(err, &fe) {
					b.t.Warnings = append(b.t.Warnings, b.info.Path+": truncated at offset "+itoa(fe.FrameOffset)+
						" (the events before it are kept): "+err.Error())
				} else {
					b.t.Warnings = append(b.t.Warnings, b.info.Path+": truncated: "+err.Error())
				}
				return nil
			}
			return err
		}
		b.event(&ev)
	}
}

func (b *builder) event(ev *wire.Event) {
	k := b.kindOf(ev.Schema)
	k.count++
	ts := ev.Timestamp
	switch k.k {
	case kCPU:
		b.time(ts)
		b.cpuSample(k, ev)
	case kPollStart:
		b.time(ts)
		w, _ := vu(ev, k.idx[fWorker])
		task, _ := vu(ev, k.idx[fTask])
		loc, _ := vs(ev, k.idx[fSpawnLoc])
		b.pollStart(ts, w, task, loc)
	case kPollEnd:
		b.time(ts)
		w, _ := vu(ev, k.idx[fWorker])
		b.pollEnd(ts, w)
	case kPark:
		b.time(ts)
		w, _ := vu(ev, k.idx[fWorker])
		tid, _ := vu(ev, k.idx[fTid])
		b.park(ts, w, uint32(tid))
	case kUnpark:
		b.time(ts)
		w, _ := vu(ev, k.idx[fWorker])
		tid, _ := vu(ev, k.idx[fTid])
		wait, _ := vu(ev, k.idx[fSchedWait])
		b.unpark(ts, w, wait, uint32(tid))
	case kSymbol:
		addr, _ := vu(ev, k.idx[fAddr])
		name, _ := vs(ev, k.idx[fSymName])
		depth, _ := vu(ev, k.idx[fDepth])
		file, _ := vs(ev, k.idx[fSrcFile])
		line, _ := vu(ev, k.idx[fSrcLine])
		b.symbol(addr, depth, Frame{Func: name, File: file, Line: int(line)})
	case kClock:
		b.time(ts)
		rt, _ := vu(ev, k.idx[fRealtime])
		b.t.Clock = append(b.t.Clock, ClockSync{Mono: ts, Real: rt})
	case kMeta:
		// Older files stored epoch ns here: not a monotonic time.
		if ts < 1577836800_000000000 {
			b.time(ts)
		}
		for _, e := range ev.Values[k.idx[fEntries]].Map {
			b.info.Metadata = append(b.info.Metadata, KV{e.Key, e.Value})
			b.t.Metadata[e.Key] = e.Value
		}
	case kSpan:
		b.time(ts)
		b.span(k, ev)
	default:
		b.time(ts)
	}
	for _, i := range k.dropped {
		if v, ok := vu(ev, i); ok {
			b.t.Dropped[k.name+"."+ev.Schema.Fields[i].Name] += v
		}
	}
}

func (b *builder) cpuSample(k *kind, ev *wire.Event) {
	var s Sample
	s.Time = ev.Timestamp
	s.CPU = -1
	s.Link = -1
	w, ok := vu(ev, k.idx[fWorker])
	if !ok || w > NoWorker {
		w = NoWorker
	}
	s.Worker = uint32(w)
	if src, _ := vu(ev, k.idx[fSource]); src == SourceOffCPU {
		s.Source = SourceOffCPU // other values are read as 0, as upstream does
	}
	if c, ok := vu(ev, k.idx[fCPU]); ok {
		s.CPU = int32(c)
	}
	s.Value, _ = vu(ev, k.idx[fValue])
	if st, ok := vu(ev, k.idx[fState]); ok && st <= StateRunnable {
		s.State = uint8(st)
	}
	tid, _ := vu(ev, k.idx[fTid])
	pid, _ := vu(ev, k.idx[fPid])
	name, _ := vs(ev, k.idx[fThreadName])
	s.Thread = b.thread(uint32(tid), uint32(pid), name)
	if span, ok := vs(ev, k.idx[fSpanID]); ok {
		trace, _ := vs(ev, k.idx[fTraceID])
		root, _ := vs(ev, k.idx[fRoot])
		s.Link = b.link(Link{TraceID: trace, SpanID: span, RootName: root})
	} else if root, ok := vs(ev, k.idx[fRoot]); ok {
		s.Link = b.link(Link{RootName: root})
	}
	cc := &ev.Values[k.idx[fCallchain]]
	switch {
	case cc.Absent:
		s.Stack = b.internStack(nil)
	case cc.Type == wire.PooledStackFrames:
		s.Stack = b.pooledStack(cc.U, cc.Frames)
	default:
		s.Stack = b.internStack(cc.Frames)
	}
	b.t.Samples = append(b.t.Samples, s)
}

func (b *builder) span(k *kind, ev *wire.Event) {
	var sp Span
	sp.Start = ev.Timestamp
	sp.SpanID, _ = vs(ev, k.idx[fSpanID])
	sp.TraceID, _ = vs(ev, k.idx[fTraceID])
	sp.ParentID, _ = vs(ev, k.idx[fParent])
	sp.Name, _ = vs(ev, k.idx[fName])
	sp.Service, _ = vs(ev, k.idx[fService])
	sp.Duration, _ = vu(ev, k.idx[fDuration])
	tid, _ := vu(ev, k.idx[fTid])
	pid, _ := vu(ev, k.idx[fPid])
	sp.Tid, sp.Pid = uint32(tid), uint32(pid)
	sp.Worker = -1
	if w, ok := vu(ev, k.idx[fWorker]); ok {
		sp.Worker = int64(w)
	}
	if sp.End() > b.t.End {
		b.t.End = sp.End()
	}
	b.t.spanByID[sp.SpanID] = int32(len(b.t.Spans))
	b.t.Spans = append(b.t.Spans, sp)
}

// End returns the end time of the span.
func (s *Span) End() uint64 { return s.Start + s.Duration }
