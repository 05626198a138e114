package analysistest

import (
	"fmt"

	"github.com/perfprof/perfprof/internal/wire"
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
