package analysistest

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/wire"
)

// Names of the request program's functions and spans.
const (
	ParseFunc    = "app.parse"    // leaf of every request's on-CPU samples
	CompressFunc = "app.compress" // leaf of the slow requests' extra samples
	QueryFunc    = "db.query"     // where a request's child span blocks
	UploadSpan   = "POST /upload" // the requests with a slow tail
	ItemsSpan    = "GET /items"   // the requests without one
	QuerySpan    = "db.query"     // child span of every request
)

// Addresses of the request program (apart from the Synth program's).
const (
	addrParse    = 0x501000
	addrCompress = 0x502000
	addrServe    = 0x503000
	addrQuery    = 0x504000
)

// Requests describes a synthetic trace of request spans on worker
// threads: a realistic shape for span selections. Requests run back to
// back, round-robin over the workers. Request r is a span (UploadSpan for
// even r, ItemsSpan for odd r) with Typical on-CPU samples in ParseFunc,
// then a child span QuerySpan of QueryNs during which the thread is
// blocked (one off-CPU sample of QueryNs in QueryFunc), then Gap ns that
// no sample stands for. Every SlowEvery-th upload is slow: SlowExtra more
// on-CPU samples, in CompressFunc.
type Requests struct {
	Requests  int
	Workers   int
	Period    uint64 // ns between two on-CPU samples; the sample period
	Typical   int
	SlowEvery int // 0: no slow requests
	SlowExtra int
	QueryNs   uint64
	Gap       uint64
	Start     uint64
}

// DefaultRequests is 2 000 requests on 4 workers at 999 Hz: 10% of the
// uploads are slow, with 3× their usual on-CPU time in CompressFunc.
func DefaultRequests() Requests {
	return Requests{Requests: 2000, Workers: 4, Period: 1_001_001, Typical: 10, SlowEvery: 10, SlowExtra: 30,
		QueryNs: 4_000_000, Gap: 500_000, Start: 1_000_000_000_000}
}

// SpanTruth is one span of a Requests trace and what it holds, its child's
// samples included.
type SpanTruth struct {
	TraceID, SpanID, ParentID, Name string
	Tid                             uint32
	Start, Duration                 uint64
	OnCPU, OffCPU                   int    // samples
	BlockedNs                       uint64 // off-CPU ns
	Compress                        int    // on-CPU samples in CompressFunc
	Slow                            bool
}

// RequestsTruth is what a Requests trace holds.
type RequestsTruth struct {
	Spans   []SpanTruth // requests and their children, by start
	Samples int
}

// reqEvent is one sample of a Requests trace and the trace it is linked to.
type reqEvent struct {
	ts    uint64
	smp   sample
	trace string
}

// timeline lays out the requests: samples by time, spans by start.
func (q Requests) timeline() ([]reqEvent, RequestsTruth) {
	var tr RequestsTruth
	var evs []reqEvent
	W := max(q.Workers, 1)
	cursor := make([]uint64, W)
	for w := range cursor {
		cursor[w] = q.Start + uint64(w)*q.Period/uint64(W)
	}
	serve := []uint64{addrServe, addrWorker, addrMain}
	uploads := 0
	for r := 0; r < q.Requests; r++ {
		w := r % W
		tid := uint32(2000 + w)
		name := ItemsSpan
		slow := false
		if r%2 == 0 {
			name = UploadSpan
			slow = q.SlowEvery > 0 && uploads%q.SlowEvery == q.SlowEvery-1
			uploads++
		}
		traceID := fmt.Sprintf("%032x", 0xa000+r)
		req := SpanTruth{TraceID: traceID, SpanID: fmt.Sprintf("%016x", 2*r+1), Name: name, Tid: tid,
			Start: cursor[w], Slow: slow}
		child := SpanTruth{TraceID: traceID, SpanID: fmt.Sprintf("%016x", 2*r+2), ParentID: req.SpanID,
			Name: QuerySpan, Tid: tid}
		t := req.Start + q.Period/2
		emit := func(leaf uint64, n int) {
			for range n {
				evs = append(evs, reqEvent{ts: t, trace: traceID, smp: sample{ts: t, worker: 255, tid: tid,
					name: fmt.Sprintf("worker-%d", w), stack: append([]uint64{leaf}, serve...), span: req.SpanID}})
				t += q.Period
				req.OnCPU++
			}
		}
		emit(addrParse, q.Typical)
		if slow {
			emit(addrCompress, q.SlowExtra)
			req.Compress = q.SlowExtra
		}
		child.Start = t
		child.Duration = q.QueryNs
		evs = append(evs, reqEvent{ts: t, trace: traceID, smp: sample{ts: t, worker: 255, tid: tid,
			name: fmt.Sprintf("worker-%d", w), stack: append([]uint64{addrKernel, addrQuery}, serve...), span: child.SpanID,
			source: 1, state: 1, valueNs: q.QueryNs}})
		child.OffCPU, child.BlockedNs = 1, q.QueryNs
		req.OffCPU, req.BlockedNs = 1, q.QueryNs
		req.Duration = t + q.QueryNs + q.Gap - req.Start
		cursor[w] = req.Start + req.Duration + q.Period/3
		tr.Samples += req.OnCPU + req.OffCPU
		tr.Spans = append(tr.Spans, req, child)
	}
	slices.SortStableFunc(evs, func(a, b reqEvent) int { return cmp.Compare(a.ts, b.ts) })
	slices.SortStableFunc(tr.Spans, func(a, b SpanTruth) int { return cmp.Compare(a.Start, b.Start) })
	return evs, tr
}

// WriteFile writes the trace to path as one TRC segment.
func (q Requests) WriteFile(path string) (RequestsTruth, error) {
	f, err := os.Create(path)
	if err != nil {
		return RequestsTruth{}, err
	}
	defer f.Close()
	tr, err := q.WriteTRC(f)
	if err != nil {
		return tr, err
	}
	return tr, f.Close()
}

// WriteTRC writes the trace as one TRC segment: clock sync, metadata
// (with the sample period), symbols, then spans and samples in time order.
func (q Requests) WriteTRC(out io.Writer) (RequestsTruth, error) {
	evs, tr := q.timeline()
	spans := tr.Spans
	byID := map[string]SpanTruth{}
	for _, s := range spans {
		byID[s.SpanID] = s
	}
	bw := bufio.NewWriterSize(out, 1<<20)
	w := wire.NewWriter(bw)
	errs := []error{
		w.WriteClockSync(wire.ClockSyncEvent{Timestamp: q.Start - 1000, RealtimeNs: 1_780_000_000_000_000_000}),
		w.WriteSegmentMetadata(wire.SegmentMetadataEvent{Timestamp: q.Start - 1000, Entries: []wire.StringPair{
			{Key: convention.MetaService, Value: "requests"}, {Key: convention.MetaSamplePeriod, Value: fmt.Sprint(q.Period)}}}),
	}
	e := func(addr uint64, name, file string, line uint64) wire.SymbolTableEntry {
		return wire.SymbolTableEntry{Addr: addr, SymbolName: name, SourceFile: file, SourceLine: line}
	}
	for _, s := range []wire.SymbolTableEntry{
		e(addrParse, ParseFunc, "app/parse.go", 11), e(addrCompress, CompressFunc, "app/compress.go", 22),
		e(addrServe, "app.serve", "app/serve.go", 33), e(addrQuery, QueryFunc, "db/query.go", 44),
		e(addrWorker, WorkerFunc, "runtime/worker.go", 50), e(addrMain, MainFunc, "main.go", 60),
		e(addrKernel, KernelFunc, "kernel", 0),
	} {
		errs = append(errs, w.WriteSymbolTableEntry(s))
	}
	for _, err := range errs {
		if err != nil {
			return tr, err
		}
	}
	// Spans go in at their start, among the samples.
	next := 0
	writeSpansUntil := func(ts uint64) error {
		for ; next < len(spans) && spans[next].Start <= ts; next++ {
			s := spans[next]
			if err := w.Write(SpanSchema, s.Start, wire.PooledStringValue(s.TraceID), wire.PooledStringValue(s.SpanID),
				opt(wire.PooledStringValue(s.ParentID), s.ParentID != ""), wire.PooledStringValue(s.Name),
				wire.VarintValue(s.Duration), wire.U32Value(s.Tid), wire.Absent,
				wire.PooledStringValue("requests"), wire.U32Value(4242)); err != nil {
				return err
			}
		}
		return nil
	}
	for _, ev := range evs {
		if err := writeSpansUntil(ev.ts); err != nil {
			return tr, err
		}
		sm := ev.smp
		root := byID[sm.span].Name
		if p := byID[sm.span].ParentID; p != "" {
			root = byID[p].Name
		}
		if err := w.Write(CpuSampleSchema, sm.ts, wire.VarintValue(sm.worker), wire.U32Value(sm.tid), wire.U8Value(sm.source),
			wire.PooledStringValue(sm.name), wire.PooledStackValue(sm.stack), wire.VarintValue(uint64(sm.tid%2)),
			wire.PooledStringValue(ev.trace), wire.PooledStringValue(sm.span), wire.PooledStringValue(root),
			opt(wire.VarintValue(sm.valueNs), sm.valueNs > 0), opt(wire.U8Value(sm.state), sm.source == 1),
			wire.U32Value(4242), wire.Absent, wire.Absent, wire.Absent); err != nil {
			return tr, err
		}
	}
	if err := writeSpansUntil(^uint64(0)); err != nil {
		return tr, err
	}
	if err := w.Flush(); err != nil {
		return tr, err
	}
	return tr, bw.Flush()
}
