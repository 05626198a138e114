package analysis

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/perfprof/perfprof/internal/wire"
)

// eventReader is what both layouts are read through: wire.Reader for TRC,
// wire.LegacyEventReader for TOKIOTRC, whose records it presents as the
// TRC events they stand for. The loader reads with ReadSample, which
// gives most CPU samples in their typed form directly.
type eventReader interface {
	ReadEvent(ev *wire.Event) error
	ReadSample(ev *wire.Event, s *wire.CpuSampleRead) (bool, error)
}

// events opens the event reader of an opened file, and says its version.
func (o *opened) events() (eventReader, uint32, error) {
	if o.format == FormatTRC {
		return wire.NewReader(o.r), 1, nil
	}
	lr, err := wire.NewLegacyEventReader(o.r)
	if err != nil {
		return nil, 0, err
	}
	return lr, lr.Version(), nil
}

// kind is what the builder knows of one schema: the typed form its events
// read as, and its counters of dropped data.
type kind struct {
	s       *wire.Schema
	name    string
	l       *wire.Layout
	dropped []int // integer fields named dropped*/lost*
	count   int64
}

func (b *builder) kindOf(s *wire.Schema) *kind {
	// Runs of one kind (samples, mostly) skip the map.
	if k := b.lastKind; k != nil && k.s == s {
		return k
	}
	if k, ok := b.kinds[s]; ok {
		b.lastKind = k
		return k
	}
	k := &kind{s: s, name: s.Name, l: wire.LayoutOf(s)}
	for i, f := range s.Fields {
		n := strings.ToLower(f.Name)
		if (strings.HasPrefix(n, "dropped") || strings.HasPrefix(n, "lost")) && isInt(f.Type.Base()) {
			k.dropped = append(k.dropped, i)
		}
	}
	b.kinds[s] = k
	b.kindOrder = append(b.kindOrder, k)
	b.lastKind = k
	return k
}

func isInt(t wire.FieldType) bool {
	switch t {
	case wire.Varint, wire.U8, wire.U16, wire.U32, wire.I64:
		return true
	}
	return false
}

// decode reads the events of one file into b. A truncated tail is not an
// error: it sets Truncated and the events before it are kept.
func (b *builder) decode(rd eventReader) error {
	if r, ok := rd.(*wire.Reader); ok {
		defer func() {
			st := r.Stats()
			b.info.Bytes = st.Bytes
			b.info.Streams = st.Headers
		}()
	}
	var ev wire.Event
	var cs wire.CpuSampleRead
	for {
		sample, err := rd.ReadSample(&ev, &cs)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				return err
			}
			b.info.Truncated = true
			b.t.Warnings = append(b.t.Warnings, b.truncated(err))
			return nil
		}
		if sample {
			k := b.kindOf(ev.Schema)
			k.count++
			b.time(ev.Timestamp)
			b.sample(&cs)
			continue
		}
		b.event(&ev)
	}
}

// truncated is the warning for a file cut inside an event or record.
func (b *builder) truncated(err error) string {
	var fe *wire.FormatError
	var le *wire.LegacyError
	switch {
	case errors.As(err, &fe):
		return b.info.Path + ": truncated at offset " + itoa(fe.FrameOffset) + " (the events before it are kept): " + err.Error()
	case errors.As(err, &le):
		return fmt.Sprintf("%s: truncated (the records before it are kept): %v", b.info.Path, err)
	}
	return b.info.Path + ": truncated: " + err.Error()
}

func (b *builder) event(ev *wire.Event) {
	k := b.kindOf(ev.Schema)
	k.count++
	ts := ev.Timestamp
	switch k.l.Kind {
	case wire.KindCpuSample:
		b.time(ts)
		var cs wire.CpuSampleRead
		k.l.CpuSample(ev, &cs.E, &cs.X)
		cs.StackID, cs.Pooled = k.l.StackID(ev)
		b.sample(&cs)
	case wire.KindPollStart:
		b.time(ts)
		p := k.l.PollStart(ev)
		b.pollStart(ts, p.WorkerID, p.TaskID, p.SpawnLoc)
	case wire.KindPollEnd:
		b.time(ts)
		b.pollEnd(ts, k.l.PollEnd(ev).WorkerID)
	case wire.KindWorkerPark:
		b.time(ts)
		p := k.l.WorkerPark(ev)
		b.park(ts, p.WorkerID, p.Tid)
	case wire.KindWorkerUnpark:
		b.time(ts)
		u := k.l.WorkerUnpark(ev)
		b.unpark(ts, u.WorkerID, u.SchedWaitNs, u.Tid)
	case wire.KindSymbol:
		s := k.l.Symbol(ev)
		b.symbol(s.Addr, s.InlineDepth, Frame{Func: s.SymbolName, File: s.SourceFile, Line: int(s.SourceLine)})
	case wire.KindClockSync:
		b.time(ts)
		b.t.Clock = append(b.t.Clock, ClockSync{Mono: ts, Real: k.l.ClockSync(ev).RealtimeNs})
	case wire.KindSegmentMetadata:
		// Older files stored epoch ns here, and a legacy file's ts_ns is
		// not on its clock: neither is a time of the trace.
		if !k.l.Legacy && ts < 1577836800_000000000 {
			b.time(ts)
		}
		for _, e := range k.l.SegmentMetadata(ev).Entries {
			b.info.Metadata = append(b.info.Metadata, KV{e.Key, e.Value})
			b.t.Metadata[e.Key] = e.Value
		}
	case wire.KindSpan:
		b.time(ts)
		b.span(k.l.Span(ev))
	case wire.KindSpanClose:
		b.time(ts)
		b.spanClose(k.l.SpanClose(ev))
	case wire.KindContextAttributeSet:
		b.time(ts)
		b.contextSet(k.l.ContextAttributeSet(ev))
	default:
		b.time(ts)
	}
	for _, i := range k.dropped {
		if v := &ev.Values[i]; !v.Absent && isInt(v.Type) {
			b.t.Dropped[k.name+"."+ev.Schema.Fields[i].Name] += v.U
		}
	}
}

// sample adds a CPU sample in its typed form.
func (b *builder) sample(cs *wire.CpuSampleRead) {
	e, x := &cs.E, &cs.X
	s := TraceSample{Time: e.Timestamp, Worker: uint32(min(e.WorkerID, NoWorker)), CPU: -1, Link: -1}
	if e.Source == SourceOffCPU {
		s.Source = SourceOffCPU // other values are read as 0, as upstream does
	}
	if e.CPU.Valid {
		s.CPU = int32(e.CPU.V)
	}
	s.Value = x.ValueNs.V
	if x.ThreadState.Valid && x.ThreadState.V <= StateRunnable {
		s.State = x.ThreadState.V
	}
	s.Thread = b.thread(e.Tid, x.Pid.V, e.ThreadName.V)
	attrs := b.contextAttrs(x.ContextSetID)
	if x.SpanID.Valid {
		s.Link = b.link(Link{TraceID: x.TraceID.V, SpanID: x.SpanID.V, RootName: x.SpanRootName.V, Attrs: attrs})
	} else if x.SpanRootName.Valid || attrs != 0 {
		s.Link = b.link(Link{RootName: x.SpanRootName.V, Attrs: attrs})
	}
	if cs.Pooled {
		s.Stack = b.pooledStack(cs.StackID, e.Callchain)
	} else {
		s.Stack = b.internStack(e.Callchain)
	}
	if len(b.t.Samples) >= sampleChunk {
		b.sampleChunks = append(b.sampleChunks, b.t.Samples)
		b.t.Samples = make([]TraceSample, 0, sampleChunk)
	}
	b.t.Samples = append(b.t.Samples, s)
}

func (b *builder) span(e wire.SpanEvent) {
	sp := Span{Start: e.Timestamp, SpanID: e.SpanID, TraceID: e.TraceID, ParentID: e.ParentSpanID.V,
		Name: e.Name, Service: e.Service.V, Duration: e.DurationNs, Tid: e.Tid.V, Pid: e.Pid.V, Worker: NoWorkerID}
	if e.WorkerID.Valid {
		sp.Worker = int64(e.WorkerID.V)
	}
	if sp.End() > b.t.End {
		b.t.End = sp.End()
	}
	b.t.spanByID[sp.SpanID] = int32(len(b.t.Spans))
	b.t.Spans = append(b.t.Spans, sp)
}

// spanClose adds a span from its close event (dial9's span contract):
// the lifecycle [start_timestamp_ns, close), the OTel ids as a SpanEvent's.
// Enter and exit events are not read: a span's interval is its lifecycle.
func (b *builder) spanClose(e wire.SpanClose) {
	se := wire.SpanEvent{Timestamp: min(e.StartNs, e.Timestamp), TraceID: e.TraceID, SpanID: e.SpanID,
		ParentSpanID: e.ParentSpanID, Name: e.Name, DurationNs: e.Timestamp - min(e.StartNs, e.Timestamp),
		WorkerID: e.WorkerID, Service: e.Service, Pid: e.Pid}
	if e.Tid.Valid {
		se.Tid = wire.Some(uint32(min(e.Tid.V, 1<<32-1)))
	}
	b.span(se)
}

// End returns the end time of the span.
func (s *Span) End() uint64 { return s.Start + s.Duration }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
