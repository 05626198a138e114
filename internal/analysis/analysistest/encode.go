package analysistest

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/wire"
)

// Schemas of perfprof's events (docs/trace-conventions.md), as the
// exporter writes them.
var (
	CpuSampleSchema = wire.CpuSampleExtSchema
	SpanSchema      = wire.SpanSchema
)

func opt(v wire.Value, ok bool) wire.Value {
	if !ok {
		return wire.Absent
	}
	return v
}

// WriteTRC writes the trace as one TRC segment: clock sync, metadata,
// symbols, spans, then per sample slot the polls and samples. Each
// StreamEvery events a new stream starts (0 = one stream).
func (s Synth) WriteTRC(out io.Writer) (Truth, error) {
	samples, polls, tr := s.timeline()
	bw := bufio.NewWriter(out)
	w := wire.NewWriter(bw)
	if err := s.writeTRC(w, samples, polls); err != nil {
		return tr, err
	}
	if err := w.Flush(); err != nil {
		return tr, err
	}
	return tr, bw.Flush()
}

func (s Synth) writeTRC(w *wire.Writer, samples []sample, polls []poll) error {
	errs := []error{
		w.WriteClockSync(wire.ClockSyncEvent{Timestamp: s.Start - 1000, RealtimeNs: 1_780_000_000_000_000_000}),
		w.WriteSegmentMetadata(wire.SegmentMetadataEvent{Timestamp: s.Start - 1000, Entries: []wire.StringPair{
			{Key: convention.MetaService, Value: "synth"}, {Key: convention.MetaWorkers, Value: "0,1"},
			{Key: convention.MetaSamplePeriod, Value: fmt.Sprint(s.Period)}}}),
	}
	for _, e := range symbols() {
		errs = append(errs, w.WriteSymbolTableEntry(e))
	}
	end := s.Start + 100*s.Period*uint64(len(samples)+1)
	for _, sp := range []struct{ id, name string }{{HotSpanID, HotSpan}, {ColdSpanID, ColdSpan}} {
		errs = append(errs, w.Write(SpanSchema, s.Start, wire.PooledStringValue(TraceID), wire.PooledStringValue(sp.id),
			wire.Absent, wire.PooledStringValue(sp.name), wire.VarintValue(end-s.Start), wire.Absent, wire.Absent,
			wire.PooledStringValue("synth"), wire.U32Value(4242)))
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	for _, e := range ordered(samples, polls) {
		var err error
		switch e.kind {
		case 0:
			p := polls[e.i]
			err = w.WritePollStart(wire.PollStartEvent{Timestamp: p.start, WorkerID: p.worker, TaskID: p.task, SpawnLoc: "app/handle.go:40:1"})
		case 2:
			p := polls[e.i]
			err = w.WritePollEnd(wire.PollEndEvent{Timestamp: p.end, WorkerID: p.worker})
		case 1:
			sm := samples[e.i]
			err = w.Write(CpuSampleSchema, sm.ts, wire.VarintValue(sm.worker), wire.U32Value(sm.tid), wire.U8Value(sm.source),
				wire.PooledStringValue(sm.name), wire.PooledStackValue(sm.stack), wire.VarintValue(uint64(sm.tid%2)),
				opt(wire.PooledStringValue(TraceID), sm.span != ""), opt(wire.PooledStringValue(sm.span), sm.span != ""),
				opt(wire.PooledStringValue(RootName), sm.span != ""), opt(wire.VarintValue(sm.valueNs), sm.valueNs > 0),
				opt(wire.U8Value(sm.state), sm.source == 1), wire.U32Value(4242), wire.Absent, wire.Absent, wire.Absent)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// event is one event of the synthetic timeline: a poll start or end, or a
// sample, by index.
type event struct {
	ts   uint64
	kind int // 0 poll start, 1 sample, 2 poll end
	i    int
}

// ordered returns the events of the timeline in time order, polls starting
// before the samples at the same time and ending after them.
func ordered(samples []sample, polls []poll) []event {
	var evs []event
	for i, p := range polls {
		evs = append(evs, event{p.start, 0, i}, event{p.end, 2, i})
	}
	for i, sm := range samples {
		evs = append(evs, event{sm.ts, 1, i})
	}
	sort.SliceStable(evs, func(i, j int) bool {
		if evs[i].ts != evs[j].ts {
			return evs[i].ts < evs[j].ts
		}
		return evs[i].kind < evs[j].kind
	})
	return evs
}

// WriteLegacy writes the trace as a TOKIOTRC v13 file (timestamps in µs
// since Start; no spans, no off-CPU values, no inlined frames: the hot
// address is named HotFunc directly).
func (s Synth) WriteLegacy(out io.Writer) (Truth, error) {
	samples, polls, tr := s.timeline()
	bw := bufio.NewWriter(out)
	lw, err := wire.NewLegacyWriter(bw, 13)
	if err != nil {
		return tr, err
	}
	var defs wire.LegacyDefs
	syms := map[uint64]wire.SymbolTableEntry{}
	for _, e := range symbols() {
		if e.InlineDepth == 0 {
			syms[e.Addr] = e
		}
	}
	hot := syms[addrHot]
	hot.SymbolName = HotFunc
	syms[addrHot] = hot
	us := func(ts uint64) uint32 { return uint32((ts - s.Start + 1_000_000) / 1000) }
	for _, e := range ordered(samples, polls) {
		var err error
		switch e.kind {
		case 0:
			p := polls[e.i]
			if err = defs.EnsureSpawnLoc(lw, 1, "app/handle.go:40:1"); err == nil {
				err = lw.Write(&wire.LegacyRecord{Code: wire.LegacyPollStart, TsUs: us(p.start), Worker: uint8(p.worker), TaskID: uint32(p.task), SpawnLocID: 1})
			}
		case 2:
			p := polls[e.i]
			err = lw.Write(&wire.LegacyRecord{Code: wire.LegacyPollEnd, TsUs: us(p.end), Worker: uint8(p.worker)})
		case 1:
			sm := samples[e.i]
			for _, a := range sm.stack {
				if sy, ok := syms[a]; ok && err == nil {
					err = defs.EnsureCallframe(lw, a, sy.SymbolName, fmt.Sprintf("%s:%d", sy.SourceFile, sy.SourceLine), true)
				}
			}
			if err == nil {
				err = defs.EnsureThreadName(lw, sm.tid, sm.name)
			}
			if err == nil {
				err = lw.Write(&wire.LegacyRecord{Code: wire.LegacyCpuSample, TsUs: us(sm.ts), Worker: uint8(sm.worker),
					Tid: sm.tid, Source: sm.source, Frames: sm.stack})
			}
		}
		if err != nil {
			return tr, err
		}
	}
	return tr, bw.Flush()
}

// WriteFile writes the trace to path: TRC, or TOKIOTRC if legacy; gzipped
// if the name ends in .gz.
func (s Synth) WriteFile(path string, legacy bool) (Truth, error) {
	f, err := os.Create(path)
	if err != nil {
		return Truth{}, err
	}
	defer f.Close()
	var w io.Writer = f
	var zw *gzip.Writer
	if filepath.Ext(path) == ".gz" {
		zw = gzip.NewWriter(f)
		w = zw
	}
	var tr Truth
	if legacy {
		tr, err = s.WriteLegacy(w)
	} else {
		tr, err = s.WriteTRC(w)
	}
	if err != nil {
		return tr, err
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return tr, err
		}
	}
	return tr, f.Close()
}
