// Package analysistest writes trace files with known contents for tests of
// the analysis package and the perfprof CLI, and finds the shared test data.
// It follows docs/trace-conventions.md, so its files look like the
// exporter's: CPU samples with perfprof's extra fields, SpanEvents, worker
// polls, symbol tables written before use.
package analysistest

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/perfprof/perfprof/internal/wire"
)

// RepoRoot returns the directory holding go.mod, walking up from the
// working directory.
func RepoRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// Shared returns the path of a file in the design repository's testdata,
// which is cloned as a sibling of this repository (../shared/testdata). It
// fails the test if the file is missing: the tests that use it must not
// pass silently.
func Shared(tb testing.TB, name string) string {
	tb.Helper()
	p := filepath.Join(RepoRoot(tb), "..", "shared", "testdata", name)
	if _, err := os.Stat(p); err != nil {
		tb.Fatalf("shared test data: %v (the design repository must be cloned next to this one as ../shared)", err)
	}
	return p
}

// DemoTrace is the dial9 demo trace and what the spec and a full decode
// say it holds.
const DemoTrace = "dial9-demo-trace.bin"

// Demo trace facts (trace-format.md §A.10, and the per-kind counts of a
// full decode, which the spec's "about 210k events" rounds).
const (
	DemoRawBytes      = 4047237
	DemoHeaders       = 14
	DemoEvents        = 210639
	DemoCpuSamples    = 6949
	DemoPolls         = 36801
	DemoParks         = 6304
	DemoSymbolEntries = 992
	DemoWorkers       = 2
)

// Names of the synthetic program's functions.
const (
	HotFunc     = "app.hot"     // leaf of the hot stacks, inlined into app.compute (TRC)
	ComputeFunc = "app.compute" // owns the hot address
	HandleFunc  = "app.handle"  // caller of the hot and cold leaves
	ColdFunc    = "app.cold"    // leaf of the cold stacks
	ReadFunc    = "app.read"    // where blocked samples wait
	FlushFunc   = "app.flush"   // leaf of the non-worker thread
	WorkerFunc  = "runtime.worker"
	MainFunc    = "main"
	KernelFunc  = "schedule"
	HotSpan     = "GET /hot"
	ColdSpan    = "GET /cold"
	RootName    = "server"
	UnknownAddr = 0xdead0 // a frame of the cold stacks without symbol
)

// Addresses of the synthetic program.
const (
	addrHot    = 0x401000
	addrCold   = 0x402000
	addrHandle = 0x403000
	addrWorker = 0x404000
	addrMain   = 0x405000
	addrRead   = 0x406000
	addrFlush  = 0x407000
	addrKernel = 0xffffffff81a28b97
)

// Span ids of the synthetic spans (16 hex digits, as the exporter writes).
const (
	TraceID    = "0af7651916cd43dd8448eb211c80319c"
	HotSpanID  = "00000000000000a1"
	ColdSpanID = "00000000000000b1"
)

// Synth describes a synthetic trace. Worker w's samples are Period apart;
// its polls are back to back, ten samples long, except one long poll of
// worker 0 of LongPollSamples samples.
type Synth struct {
	OnCPU           int     // on-CPU samples on the workers
	HotShare        float64 // share of them whose leaf is HotFunc
	Other           int     // on-CPU samples on a non-worker thread (FlushFunc)
	Blocked         int     // off-CPU samples, thread_state blocked, BlockedNs each
	BlockedNs       uint64
	Runnable        int // off-CPU samples, thread_state runnable, value_ns = (i+1)*1000
	Workers         int
	Start           uint64 // timestamp of the first sample (ns)
	Period          uint64 // ns between two samples of a worker
	LongPollSamples int    // > 10 makes poll 3 of worker 0 that long
}

// DefaultSynth is a small synthetic trace: 1000 worker samples, 37% hot.
func DefaultSynth() Synth {
	return Synth{OnCPU: 1000, HotShare: 0.37, Other: 100, Blocked: 40, BlockedNs: 2_000_000,
		Runnable: 100, Workers: 2, Start: 1_000_000_000_000, Period: 100_000, LongPollSamples: 50}
}

// Truth is what a Synth trace holds.
type Truth struct {
	OnCPU, OffCPU int // all on-CPU samples (workers and other), all off-CPU samples
	Hot           int // on-CPU samples with leaf HotFunc
	Cold          int // on-CPU worker samples with leaf ColdFunc
	Other         int
	Blocked       int
	BlockedNs     uint64 // total off-CPU ns of the blocked samples
	RunnableNs    []uint64
	Polls         int
	LongPoll      PollTruth // the long poll
	PerWorker     map[uint32]int
}

// PollTruth is one poll and the samples inside it.
type PollTruth struct {
	Worker        uint64
	Start, End    uint64
	OnCPU, OffCPU int
	Hot           int
}

// sample is one sample of the synthetic timeline.
type sample struct {
	ts      uint64
	worker  uint64
	tid     uint32
	name    string
	stack   []uint64
	source  uint8
	state   uint8
	valueNs uint64
	span    string // span id, "" if none
	spanNm  string
}

type poll struct {
	worker     uint64
	start, end uint64
	task       uint64
}

// blockedSlot is the first sample slot of the blocked samples: inside the
// long poll.
const blockedSlot = 30

func (s Synth) workerTid(w uint64) uint32 { return 1000 + uint32(w) }

// timeline lays the trace out and computes its truth.
func (s Synth) timeline() ([]sample, []poll, Truth) {
	tr := Truth{PerWorker: map[uint32]int{}}
	hot := []uint64{addrHot, addrHandle, addrWorker, addrMain}
	cold := []uint64{addrCold, UnknownAddr, addrHandle, addrWorker, addrMain}
	blocked := []uint64{addrKernel, addrRead, addrHandle, addrWorker, addrMain}
	flush := []uint64{addrFlush, addrMain}
	W := uint64(max(s.Workers, 1))
	var out []sample
	local := make([]uint64, W) // next sample slot per worker
	for j := 0; j < s.OnCPU; j++ {
		w := uint64(j) % W
		i := local[w]
		local[w]++
		isHot := int(float64(j+1)*s.HotShare) > int(float64(j)*s.HotShare)
		sm := sample{ts: s.Start + i*s.Period + s.Period/4, worker: w, tid: s.workerTid(w),
			name: fmt.Sprintf("tokio-rt-worker-%d", w)}
		if isHot {
			sm.stack, sm.span, sm.spanNm = hot, HotSpanID, HotSpan
			tr.Hot++
		} else {
			sm.stack, sm.span, sm.spanNm = cold, ColdSpanID, ColdSpan
			tr.Cold++
		}
		tr.PerWorker[uint32(w)]++
		out = append(out, sm)
	}
	for j := 0; j < s.Blocked; j++ {
		w := uint64(j) % W
		i := uint64(j) / W
		out = append(out, sample{ts: s.Start + (blockedSlot+i)*s.Period + 3*s.Period/4, worker: w, tid: s.workerTid(w),
			name: fmt.Sprintf("tokio-rt-worker-%d", w), stack: blocked, source: 1, state: 1, valueNs: s.BlockedNs,
			span: ColdSpanID, spanNm: ColdSpan})
		tr.Blocked++
		tr.BlockedNs += s.BlockedNs
	}
	for j := 0; j < s.Runnable; j++ {
		v := uint64(j+1) * 1000
		out = append(out, sample{ts: s.Start + uint64(j)*s.Period + s.Period/2, worker: 255, tid: 999,
			name: "flush", stack: flush, source: 1, state: 2, valueNs: v})
		tr.RunnableNs = append(tr.RunnableNs, v)
	}
	for j := 0; j < s.Other; j++ {
		out = append(out, sample{ts: s.Start + uint64(j)*s.Period + s.Period/3, worker: 255, tid: 999,
			name: "flush", stack: flush})
	}
	tr.Other = s.Other
	tr.OnCPU = s.OnCPU + s.Other
	tr.OffCPU = s.Blocked + s.Runnable

	// Polls: back to back, ten sample slots each, covering every slot used.
	var polls []poll
	slots := uint64(0)
	for w := range W {
		slots = max(slots, local[w], blockedSlot+uint64(s.Blocked)/W+1)
	}
	task := uint64(1)
	for w := range W {
		// k counts sample slots; poll 3 of worker 0 is the long one.
		for k, idx := uint64(0), 0; k < slots; idx++ {
			n := uint64(10)
			if w == 0 && idx == 3 && s.LongPollSamples > 10 {
				n = uint64(s.LongPollSamples)
			}
			p := poll{worker: w, start: s.Start + k*s.Period, end: s.Start + (k+n)*s.Period - 1, task: task}
			task++
			polls = append(polls, p)
			k += n
		}
	}
	tr.Polls = len(polls)
	for _, p := range polls {
		if p.end-p.start+1 > 10*s.Period {
			tr.LongPoll = PollTruth{Worker: p.worker, Start: p.start, End: p.end}
			for _, sm := range out {
				if sm.worker == p.worker && sm.ts >= p.start && sm.ts < p.end {
					if sm.source == 1 {
						tr.LongPoll.OffCPU++
					} else {
						tr.LongPoll.OnCPU++
						if sm.spanNm == HotSpan {
							tr.LongPoll.Hot++
						}
					}
				}
			}
		}
	}
	return out, polls, tr
}

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

// Symbols of the synthetic program, as SymbolTableEntry events: the hot
// address holds app.compute with app.hot inlined into it.
func symbols() []wire.SymbolTableEntry {
	e := func(addr uint64, name string, depth uint64, file string, line uint64) wire.SymbolTableEntry {
		return wire.SymbolTableEntry{Addr: addr, SymbolName: name, InlineDepth: depth, SourceFile: file, SourceLine: line}
	}
	return []wire.SymbolTableEntry{
		e(addrHot, ComputeFunc, 0, "app/compute.go", 10),
		e(addrHot, HotFunc, 1, "app/hot.go", 20),
		e(addrCold, ColdFunc, 0, "app/cold.go", 30),
		e(addrHandle, HandleFunc, 0, "app/handle.go", 40),
		e(addrWorker, WorkerFunc, 0, "runtime/worker.go", 50),
		e(addrMain, MainFunc, 0, "main.go", 60),
		e(addrRead, ReadFunc, 0, "app/read.go", 70),
		e(addrFlush, FlushFunc, 0, "app/flush.go", 80),
		e(addrKernel, KernelFunc, 0, "kernel", 0),
	}
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
			{Key: "service", Value: "synth"}, {Key: "runtime.perfprof", Value: "0,1"},
			{Key: "perfprof.sample_period_ns", Value: fmt.Sprint(s.Period)}}}),
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
				opt(wire.U8Value(sm.state), sm.source == 1), wire.U32Value(4242))
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

// Big describes a large directory of segments for load measurements.
type Big struct {
	Dir         string
	Bytes       int64 // total size to write, about
	SegmentSize int64 // about, per segment (default 100 MB)
	Stacks      int   // distinct stacks (default 300), 16 frames each
	Gzip        bool
}

// BigResult is what WriteBig wrote.
type BigResult struct {
	Files   []string
	Samples int64
	Polls   int64
	Bytes   int64 // on disk
}

// WriteBig writes segments PREFIX.N.bin(.gz) into b.Dir, in parallel, each
// like an exporter segment: clock sync and metadata streams, then batches
// of about 1 MiB, each a fresh stream with its own pools (CPU samples of 8
// threads, 4 of them workers with polls; every other sample linked to a
// span), then the symbol table.
func WriteBig(b Big, parallel int) (BigResult, error) {
	if b.SegmentSize == 0 {
		b.SegmentSize = 100 << 20
	}
	if b.Stacks == 0 {
		b.Stacks = 300
	}
	nseg := int((b.Bytes + b.SegmentSize - 1) / b.SegmentSize)
	// A fixed program: 1000 functions, stacks of 16 of them.
	const nfunc = 1000
	stacks := make([][]uint64, b.Stacks)
	x := uint64(88172645463325252)
	rnd := func() uint64 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x }
	for i := range stacks {
		st := make([]uint64, 16)
		for j := range st {
			st[j] = 0x400000 + (rnd()%nfunc)*0x100 + rnd()%0x40
		}
		stacks[i] = st
	}
	type res struct {
		samples, polls, bytes int64
		err                   error
	}
	results := make([]res, nseg)
	files := make([]string, nseg)
	sem := make(chan struct{}, max(parallel, 1))
	done := make(chan int)
	for i := range nseg {
		name := filepath.Join(b.Dir, fmt.Sprintf("trace.%d.bin", i))
		if b.Gzip {
			name += ".gz"
		}
		files[i] = name
		go func() {
			sem <- struct{}{}
			defer func() { <-sem; done <- i }()
			results[i].samples, results[i].polls, results[i].bytes, results[i].err = writeBigSegment(name, b, i, stacks)
		}()
	}
	for range nseg {
		<-done
	}
	out := BigResult{Files: files}
	for _, r := range results {
		if r.err != nil {
			return out, r.err
		}
		out.Samples += r.samples
		out.Polls += r.polls
		out.Bytes += r.bytes
	}
	return out, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func writeBigSegment(name string, b Big, seg int, stacks [][]uint64) (samples, polls, size int64, err error) {
	f, err := os.Create(name)
	if err != nil {
		return 0, 0, 0, err
	}
	defer f.Close()
	var dst io.Writer = f
	var zw *gzip.Writer
	if b.Gzip {
		zw, _ = gzip.NewWriterLevel(f, gzip.BestSpeed)
		dst = zw
	}
	cw := &countingWriter{w: dst}
	bw := bufio.NewWriterSize(cw, 1<<20)
	w := wire.NewWriter(bw)
	ts := uint64(1_000_000_000_000) + uint64(seg)*60_000_000_000
	if err := w.WriteClockSync(wire.ClockSyncEvent{Timestamp: ts, RealtimeNs: 1_780_000_000_000_000_000 + ts}); err != nil {
		return 0, 0, 0, err
	}
	w.Reset()
	w.WriteSegmentMetadata(wire.SegmentMetadataEvent{Timestamp: ts, Entries: []wire.StringPair{
		{Key: "service", Value: "big"}, {Key: "runtime.perfprof", Value: "0,1,2,3"}}})
	w.WriteClockSync(wire.ClockSyncEvent{Timestamp: ts, RealtimeNs: 1_780_000_000_000_000_000 + ts})
	names := [8]string{"tokio-rt-worker-0", "tokio-rt-worker-1", "tokio-rt-worker-2", "tokio-rt-worker-3",
		"blocking-0", "blocking-1", "flush", "main"}
	spanIDs := make([]string, 64)
	for i := range spanIDs {
		spanIDs[i] = fmt.Sprintf("%016x", uint64(seg)<<32|uint64(i+1))
	}
	x := uint64(seg)*2654435761 + 1
	rnd := func() uint64 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x }
	var pollOpen [4]bool
	const perBatch = 30000
	for n := 0; ; n++ {
		if n%perBatch == 0 {
			if err := w.Flush(); err != nil {
				return 0, 0, 0, err
			}
			if cw.n >= b.SegmentSize {
				break
			}
			if n > 0 {
				w.Reset()
			}
		}
		ts += 10_000 + rnd()%20_000
		th := n % 8
		if th < 4 && n%16 < 8 {
			// Workers alternate polls: start on one sample, end on the next.
			var err error
			if pollOpen[th] {
				err = w.WritePollEnd(wire.PollEndEvent{Timestamp: ts, WorkerID: uint64(th)})
				polls++
			} else {
				err = w.WritePollStart(wire.PollStartEvent{Timestamp: ts, WorkerID: uint64(th), TaskID: rnd() % 1000, SpawnLoc: "src/main.rs:10:5"})
			}
			if err != nil {
				return 0, 0, 0, err
			}
			pollOpen[th] = !pollOpen[th]
		}
		worker := uint64(255)
		if th < 4 {
			worker = uint64(th)
		}
		st := stacks[rnd()%uint64(len(stacks))]
		linked := n%2 == 0
		span := spanIDs[rnd()%uint64(len(spanIDs))]
		var src uint8
		if n%10 == 9 {
			src = 1
		}
		err := w.Write(CpuSampleSchema, ts, wire.VarintValue(worker), wire.U32Value(uint32(1000+th)), wire.U8Value(src),
			wire.PooledStringValue(names[th]), wire.PooledStackValue(st), wire.VarintValue(uint64(th%2)),
			opt(wire.PooledStringValue(TraceID), linked), opt(wire.PooledStringValue(span), linked),
			opt(wire.PooledStringValue(RootName), linked), opt(wire.VarintValue(50_000+rnd()%100_000), src == 1),
			opt(wire.U8Value(uint8(1+rnd()%2)), src == 1), wire.U32Value(4242))
		if err != nil {
			return 0, 0, 0, err
		}
		samples++
	}
	// The symbol table, appended to the last batch (as dial9 does).
	for i := range 1000 {
		a := uint64(0x400000 + i*0x100)
		for off := uint64(0); off < 0x40; off++ {
			if err := w.WriteSymbolTableEntry(wire.SymbolTableEntry{Addr: a + off, SymbolName: fmt.Sprintf("app::module%d::function%d", i%17, i),
				SourceFile: fmt.Sprintf("src/module%d.rs", i%17), SourceLine: uint64(10 + i)}); err != nil {
				return 0, 0, 0, err
			}
		}
	}
	if err := w.Flush(); err != nil {
		return 0, 0, 0, err
	}
	if err := bw.Flush(); err != nil {
		return 0, 0, 0, err
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return 0, 0, 0, err
		}
	}
	st, err := f.Stat()
	if err != nil {
		return 0, 0, 0, err
	}
	return samples, polls, st.Size(), f.Close()
}
