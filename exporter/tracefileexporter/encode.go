package tracefileexporter

import (
	"encoding/hex"
	"slices"
	"strconv"

	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/wire"
	"github.com/perfprof/perfprof/pkg/pprofiledict"
)

// chains resolves the addresses of the batch's locations and returns them
// with each stack's callchain (leaf first), in the exporter's buffers:
// valid until the next batch. Called with e.mu held.
func (e *traceFile) chains(b *batch) (addrs []uint64, chains [][]uint64) {
	addrs = slices.Grow(e.addrBuf[:0], len(b.locs))[:len(b.locs)]
	for i := range b.locs {
		addrs[i] = e.addrs.resolve(b.key(i), b.locs[i].addr)
	}
	flat := slices.Grow(e.chainBuf[:0], len(b.stackLocs))[:len(b.stackLocs)]
	for j, li := range b.stackLocs {
		flat[j] = addrs[li]
	}
	chains = slices.Grow(e.chainsBuf[:0], len(b.stackEnd))[:len(b.stackEnd)]
	start := int32(0)
	for i, end := range b.stackEnd {
		chains[i] = flat[start:end:end]
		start = end
	}
	e.addrBuf, e.chainBuf, e.chainsBuf = addrs, flat, chains
	return addrs, chains
}

// encode writes batch b as one TRC stream: the symbols its stacks need and
// the segment lacks (timestamp 0), the context attribute sets its samples
// need and the segment lacks, then its events in time order.
func (e *traceFile) encode(w *wire.Writer, b *batch, c *eventCounts) error {
	addrs, chains := e.chains(b)
	for i := range b.locs {
		a, l := addrs[i], &b.locs[i]
		if e.emitted[a] || len(l.frames) == 0 {
			continue
		}
		// pprof lists inlined functions first and their caller last; the
		// symbol table counts inline depth from the outermost function.
		for d := range l.frames {
			f := l.frames[len(l.frames)-1-d]
			err := w.WriteSymbolTableEntry(wire.SymbolTableEntry{Addr: a, SymbolName: f.name,
				InlineDepth: uint64(d), SourceFile: f.file, SourceLine: f.line})
			if err != nil {
				return err
			}
			c.symbols++
		}
		e.emitted[a] = true
	}
	left, err := e.ctxSets.assign(w, b)
	c.ctxLeftOut += left
	if err != nil {
		return err
	}

	named := map[uint32]string{} // thread names already in this stream
	// The trace format spells ids in hex: each link's, once per batch, as
	// its samples are many.
	if e.linkHex == nil {
		e.linkHex = map[pprofiledict.Link][2]string{}
	}
	clear(e.linkHex)
	linkHex := func(l pprofiledict.Link) (string, string) {
		h, ok := e.linkHex[l]
		if !ok {
			h = [2]string{hex.EncodeToString(l.TraceID[:]), hex.EncodeToString(l.SpanID[:])}
			e.linkHex[l] = h
		}
		return h[0], h[1]
	}
	for _, ev := range b.evs {
		var err error
		switch ev.kind {
		case kSample:
			g := &b.groups[ev.idx]
			s := wire.CpuSampleEvent{Timestamp: ev.ts, WorkerID: g.worker, Tid: g.tid, Source: g.source,
				Callchain: chains[g.stack], CPU: g.cpu}
			if g.name != "" {
				if n, ok := named[g.tid]; !ok || n != g.name {
					s.ThreadName = wire.Some(g.name)
					named[g.tid] = g.name
				}
			}
			var x wire.CpuSampleExt
			if g.link.Linked() {
				trace, span := linkHex(g.link)
				x.TraceID = wire.Some(trace)
				if !g.link.SpanID.IsEmpty() {
					x.SpanID = wire.Some(span)
				}
			}
			if g.root != "" {
				x.SpanRootName = wire.Some(g.root)
			}
			if g.source == convention.SourceOffCPU {
				x.ValueNs = wire.Some(ev.val)
				if g.state != 0 {
					x.ThreadState = wire.Some(g.state)
				}
			}
			x.Pid = g.pid
			if g.cpuDelta > 0 {
				x.CPUTimeDeltaNs = wire.Some(g.cpuDelta)
			}
			if g.linkSource != "" {
				x.LinkSource = wire.Some(g.linkSource)
			}
			x.ContextSetID = g.set
			err = w.WriteCpuSampleExt(s, x)
			c.samples++
		case kSpanClose:
			s := &b.spans[ev.idx]
			sc := wire.SpanClose{Timestamp: s.end, InstanceID: s.inst, StartNs: s.start, Name: s.name,
				TraceID: hex.EncodeToString(s.trace[:]), SpanID: hex.EncodeToString(s.span[:]),
				WorkerID: s.worker, Pid: s.pid}
			if !s.parent.IsEmpty() {
				sc.ParentSpanID = wire.Some(hex.EncodeToString(s.parent[:]))
			}
			if s.tid.Valid {
				sc.Tid = wire.Some(uint64(s.tid.V))
			}
			if s.service != "" {
				sc.Service = wire.Some(s.service)
			}
			if s.parentInst != 0 {
				sc.ParentInstanceID = wire.Some(s.parentInst)
			}
			if s.entered {
				sc.FirstEnterNs, sc.ActiveNs = wire.Some(s.start), s.end-s.start
			}
			if s.attrs[1] > s.attrs[0] {
				sc.Attributes = b.spanAttrs[s.attrs[0]:s.attrs[1]]
			}
			err = w.WriteSpanClose(sc)
			c.spans++
		case kSpanEnter:
			s := &b.spans[ev.idx]
			in := wire.SpanInterval{Timestamp: ev.ts, InstanceID: s.inst, Tid: uint64(s.tid.V),
				WorkerID: s.worker, Name: s.name}
			if s.parentInst != 0 {
				in.ParentID = wire.Some(s.parentInst)
			}
			err = w.WriteSpanEnter(in)
		case kSpanExit:
			s := &b.spans[ev.idx]
			err = w.WriteSpanExit(wire.SpanInterval{Timestamp: ev.ts, InstanceID: s.inst, Tid: uint64(s.tid.V), Name: s.name})
		case kPollStart:
			s := &b.spans[ev.idx]
			err = w.WritePollStart(wire.PollStartEvent{Timestamp: ev.ts, WorkerID: s.worker.V,
				TaskID: taskID(s.span), SpawnLoc: s.spawnLoc})
			c.polls++
		case kPollEnd:
			err = w.WritePollEnd(wire.PollEndEvent{Timestamp: ev.ts, WorkerID: b.spans[ev.idx].worker.V})
		case kPark:
			s := &b.spans[ev.idx]
			err = w.WriteWorkerPark(wire.WorkerParkEvent{Timestamp: ev.ts, WorkerID: s.worker.V, Tid: s.tid.V})
			c.parks++
		case kUnpark:
			s := &b.spans[ev.idx]
			err = w.WriteWorkerUnpark(wire.WorkerUnparkEvent{Timestamp: ev.ts, WorkerID: s.worker.V,
				CPUTimeNs: s.cpuTimeNs, Tid: s.tid.V})
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// encodeLegacy writes batch b as TOKIOTRC records, with the definitions
// each record needs written first if the file lacks them.
func (e *traceFile) encodeLegacy(w *wire.LegacyWriter, defs *wire.LegacyDefs, b *batch, c *eventCounts) error {
	addrs, chains := e.chains(b)
	for i, ch := range chains {
		if len(ch) > wire.LegacyMaxFrames {
			chains[i] = ch[:wire.LegacyMaxFrames] // leaf first: the outermost frames go
		}
	}
	defined := make([]bool, len(b.locs)) // CallframeDef ensured in this batch
	us := func(ts uint64) uint32 {
		if ts < e.legacyBase {
			return 0
		}
		return uint32((ts - e.legacyBase) / 1000) // wraps as the recorder's did
	}
	worker := func(id uint64) uint8 { return uint8(min(id, convention.NoWorker)) }
	for _, ev := range b.evs {
		rec := wire.LegacyRecord{TsUs: us(ev.ts)}
		switch ev.kind {
		case kSample:
			g := &b.groups[ev.idx]
			for _, li := range b.stack(g.stack)[:len(chains[g.stack])] {
				if defined[li] || len(b.locs[li].frames) == 0 {
					continue
				}
				l := &b.locs[li]
				f := l.frames[len(l.frames)-1] // the function owning the address
				loc := f.file
				if f.line > 0 {
					loc += ":" + strconv.FormatUint(f.line, 10)
				}
				if err := defs.EnsureCallframe(w, addrs[li], truncate(f.name), truncate(loc), f.file != ""); err != nil {
					return err
				}
				defined[li] = true
			}
			if g.name != "" {
				if err := defs.EnsureThreadName(w, g.tid, truncate(g.name)); err != nil {
					return err
				}
			}
			if len(b.stack(g.stack)) > wire.LegacyMaxFrames {
				c.truncated++
			}
			rec.Code, rec.Worker, rec.Tid, rec.Source, rec.Frames = wire.LegacyCpuSample, worker(g.worker), g.tid, g.source, chains[g.stack]
			c.samples++
		case kPollStart:
			s := &b.spans[ev.idx]
			id, ok := e.spawnLocs[s.spawnLoc]
			if !ok {
				id = uint16(min(len(e.spawnLocs), 0xFFFF))
				if len(e.spawnLocs) < 0xFFFF {
					e.spawnLocs[s.spawnLoc] = id
				}
			}
			if err := defs.EnsureSpawnLoc(w, id, truncate(s.spawnLoc)); err != nil {
				return err
			}
			rec.Code, rec.Worker, rec.TaskID, rec.SpawnLocID = wire.LegacyPollStart, worker(s.worker.V), uint32(taskID(s.span)), id
			c.polls++
		case kPollEnd:
			rec.Code, rec.Worker = wire.LegacyPollEnd, worker(b.spans[ev.idx].worker.V)
		case kPark:
			rec.Code, rec.Worker = wire.LegacyWorkerPark, worker(b.spans[ev.idx].worker.V)
			c.parks++
		case kUnpark:
			s := &b.spans[ev.idx]
			rec.Code, rec.Worker, rec.CPUUs = wire.LegacyWorkerUnpark, worker(s.worker.V), uint32(min(s.cpuTimeNs/1000, 1<<32-1))
		default:
			continue // spans have no legacy form
		}
		if err := w.Write(&rec); err != nil {
			return err
		}
	}
	return nil
}

// truncate cuts s to what a legacy string can hold.
func truncate(s string) string {
	if len(s) >= wire.LegacyMaxString {
		return s[:wire.LegacyMaxString-1]
	}
	return s
}
