package profiler

import (
	"encoding/binary"
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"go.uber.org/zap"

	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/counter"
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/symbolize"
	"github.com/perfprof/perfprof/internal/tidmap"
	"github.com/perfprof/perfprof/internal/unwind"
)

// engine is the state behind a Profiler, without its goroutines: records go
// in through handle, spans through AddSpans, reports come out of take. The
// read loop calls handle for every record, so handle takes no lock but mu
// and reads nothing: no file, no symbolization.
type engine struct {
	opts  Options
	plan  plan
	procs Procs
	log   *zap.Logger
	clock *clock.Mapper
	syms  *symbols
	// tel holds what the engine counts for telemetry (counts.go).
	tel *counter.Set

	// mu guards the registry of process images and their batches, the
	// sched state and the counters of the read loop.
	mu sync.Mutex
	registry
	buffered int           // samples in all batches
	windowA  uint64        // start of the next report window, CLOCK_MONOTONIC
	sched    *schedState   // nil without sched capture
	flush    chan struct{} // asks for an early report at the buffer bound
	counts   readCounts    // cumulative
	// rediscover asks for discovery now: a target's pid was reused.
	rediscover chan struct{}
	// jvmQueue holds the JVMs to ask for their perf maps (requestJVM).
	jvmQueue chan jvmAsk
	// toName holds the threads seen whose names the facts worker reads
	// (seeThread); factsKick wakes it.
	toName []threadRef
	// toExe holds the images exec'd whose executable the worker reads.
	toExe []*procState
	// toContext holds the images attached or exec'd whose process
	// context the worker reads first.
	toContext []*procState
	factsKick chan struct{}
	// reportMu makes reports one at a time. It guards what only a report
	// reads and writes: held, and the thread roles of the processes.
	reportMu sync.Mutex
	// held are what a report held back for its JVM's answer (take).
	held  []taken
	chain []uint64 // scratch for addSchedGroup
	// unw finds the user stacks of samples, counting in
	// counts.unwind.
	unw *unwind.Walker
	// pendingBytes is what the pending queues of all processes hold (see
	// pending.go).
	pendingBytes int64

	// spansMu guards the span index. It is apart from mu so that span
	// ingest never waits for the read loop; when both are held, mu is
	// taken first.
	spansMu   sync.Mutex
	spans     *tidmap.Map
	watermark uint64   // samples before it have been taken
	names     pidNames // the resource the spans of each pid named

	// contexts holds the span contexts read at sample time, nil without
	// Options.Contexts.
	contexts *contextStore
	// ids maps the ids spans name their threads by to the collector's.
	ids *spanIDs
}

// jitBump is a change of a perf map's generation seen by a poll: its new
// lines were written after after (when the poll before began), so the
// samples taken until then belong to generation before.
type jitBump struct {
	before symbolize.Gen
	after  uint64
}

// maxJITBumps bounds the changes kept per process: samples are read well
// within a second, and a map changes less often than it is polled.
const maxJITBumps = 64

// genAt returns the generation of the perf map of st at time t. Called
// with mu held.
func (st *procState) genAt(t uint64) symbolize.Gen {
	gen := st.jitGen
	if len(st.jitBumps) == 0 {
		return gen
	}
	for k := len(st.jitBumps) - 1; k >= 0 && t <= st.jitBumps[k].after; k-- {
		gen = st.jitBumps[k].before
	}
	return gen
}

// readCounts are what the read loop counts that telemetry does not carry
// (those it does are in tel).
type readCounts struct {
	execs  int64 // programs replaced by exec
	unwind UnwindStats
}

func newEngine(opts Options, pl plan) *engine {
	e := &engine{
		opts:       opts,
		plan:       pl,
		procs:      pl.procs,
		log:        opts.Logger,
		clock:      clock.NewMapper(),
		tel:        counter.NewSet(),
		registry:   registry{live: map[int]*procState{}, all: map[procKey]*procState{}},
		flush:      make(chan struct{}, 1),
		rediscover: make(chan struct{}, 1),
		jvmQueue:   make(chan jvmAsk, 64),
		factsKick:  make(chan struct{}, 1),
		spans:      tidmap.New(tidmap.Options{MaxSpans: opts.MaxSpans}),
	}
	e.ids = newSpanIDs(pl.procs, opts.Logger)
	e.syms = newSymbols(opts, pl.procs)
	e.unw = unwind.NewWalker(opts.Unwind, opts.RecoverLeafCaller, &e.counts.unwind)
	if pl.contexts != nil {
		e.contexts = &contextStore{}
	}
	if pl.perf.Sched {
		e.sched = newSchedState(uint64(opts.OffCPUInterval))
		e.sched.tracker.SetMinBlock(uint64(opts.SchedMinBlock))
	}
	e.windowA = clock.Monotonic()
	return e
}

// seeThread notes a thread seen for the first time, for the facts worker
// to read its name and, in a process of a nested pid namespace, its id
// there, for the spans that name it by that id (readThreadNames). It reads
// nothing: it runs on the read loop. Called with mu held.
func (e *engine) seeThread(st *procState, tid uint32) {
	_, seen := st.threads[tid]
	if !st.ident.Nested {
		if seen {
			return
		}
	} else if _, asked := st.localTids[tid]; asked {
		return
	}
	if !seen {
		st.threads[tid] = ""
	}
	if st.ident.Nested {
		if st.localTids == nil {
			st.localTids = map[uint32]uint32{}
		}
		putBounded(st.localTids, tid, 0)
	}
	if len(e.toName) >= maxToName {
		e.tel.Add(cUnnamedThreads, 1)
		return
	}
	e.toName = append(e.toName, threadRef{st, tid})
	select {
	case e.factsKick <- struct{}{}:
	default:
	}
}

// handle takes one record of a target. It runs on the read loop.
func (e *engine) handle(rec *perf.Record) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch rec.Type {
	case perf.RecordSample:
		s := &rec.Sample
		st := e.owner(s.Pid, s.Time)
		if st == nil {
			if e.live[int(s.Pid)] != nil {
				e.tel.Add(cPidReused, 1)
			}
			return
		}
		if len(s.Callchain) == 0 {
			return
		}
		if s.Kind == perf.EventSwitch {
			if e.sched != nil {
				e.handleSched(rec, st)
			}
			return
		}
		if max := e.opts.MaxBufferedSamples; e.buffered >= max {
			// Ask for an early report, which takes the oldest samples
			// without waiting for their spans; drop only past twice the
			// bound, when reports cannot keep up.
			select {
			case e.flush <- struct{}{}:
			default:
			}
			if e.buffered >= 2*max {
				e.tel.Add(CountBufferFull, 1)
				return
			}
		}
		e.seeThread(st, s.Tid)
		chain, leaf, wait := e.unw.Sample(st.unwinder.Load(), s)
		// A sample whose tables are not read yet waits for them, with
		// the kernel's chain meanwhile, if the pending queue has room.
		queue := wait && e.pendingRoom(st, len(s.StackUser))
		idx := st.batch.intern(chain, leaf, st.genAt(s.Time))
		st.batch.samples = append(st.batch.samples, rawSample{time: s.Time, tid: s.Tid, cpu: s.CPU, stack: idx})
		if queue {
			e.queuePending(st, s)
		}
		e.buffered++
		e.tel.Add(cSamples, 1)
		if e.sched != nil {
			e.handleSched(rec, st)
		}
	case perf.RecordSwitch, perf.RecordSwitchCPU:
		if st := e.owner(rec.ID.Pid, rec.ID.Time); st != nil && e.sched != nil {
			e.handleSched(rec, st)
		}
	case perf.RecordFork:
		if rec.Task.Pid == rec.Task.Tid {
			e.forked(rec.Task.Pid, rec.Task.Time)
		}
	case perf.RecordExit:
		if st := e.owner(rec.Task.Pid, rec.Task.Time); st != nil && e.sched != nil {
			e.handleSched(rec, st)
		}
	case perf.RecordComm:
		st := e.owner(rec.Comm.Pid, rec.ID.Time)
		if st == nil {
			return
		}
		st.threads[rec.Comm.Tid] = string(rec.Comm.Comm)
		// An exec before the attach is the one that made the image
		// discovery found (its record can be read after the attach: the
		// rings are read late, one CPU after the other). Taking it for a
		// new image would read the process anew and ask a JVM again.
		if rec.Misc&perf.MiscCommExec != 0 && rec.Comm.Pid == rec.Comm.Tid && rec.ID.Time >= st.attachedAt {
			e.exec(st, string(rec.Comm.Comm), rec.ID.Time)
		}
	case perf.RecordMmap2:
		// New code mapped (dlopen, JIT): the map must be read again before
		// the next stacks are symbolized. The symbol worker does it soon,
		// off this loop.
		if st := e.owner(rec.Mmap2.Pid, rec.ID.Time); st != nil && rec.Mmap2.Prot&unix.PROT_EXEC != 0 {
			st.mapsDirty = true
			e.syms.kick()
		}
	}
}

// pollJIT reads what the live processes added to their perf maps, so that
// the samples read next are named as the maps stand now, and reports
// whether any has one. A process without a map costs a failed open a
// second.
func (e *engine) pollJIT() bool {
	found := false
	for _, st := range e.liveStates() {
		if e.pollOne(st) {
			found = true
		}
	}
	return found
}

// pollFound reads what the perf maps found so far gained, of the processes
// with samples to report, live or not.
func (e *engine) pollFound() {
	e.mu.Lock()
	var sts []*procState
	for _, st := range e.all {
		if st.jit.Found() {
			sts = append(sts, st)
		}
	}
	e.mu.Unlock()
	for _, st := range sts {
		e.pollOne(st)
	}
}

// pollOne reads what st added to its perf map and notes when the
// generation changed; it reports whether st has a map.
func (e *engine) pollOne(st *procState) bool {
	start := clock.Monotonic()
	gen, err := st.jit.Update()
	if err != nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if gen != st.jitGen {
		if len(st.jitBumps) == maxJITBumps {
			st.jitBumps = slices.Delete(st.jitBumps, 0, 1)
		}
		st.jitBumps = append(st.jitBumps, jitBump{before: st.jitGen, after: st.jitPolled})
		st.jitGen = gen
	}
	st.jitPolled = start
	return true
}

// hintPerfMap says, once per process, how to name the JIT frames of a
// process without a perf map.
func (e *engine) hintPerfMap(st *procState, jit JITStats) {
	if st.hinted.Swap(true) {
		return
	}
	e.log.Warn("Frames in JIT code have no names: the process has no perf map (/tmp/perf-PID.map). "+
		"Node.js: run it with --perf-basic-prof; a JVM (JDK 17+): set jvm.perf_map: true; Python 3.12+: run it with -X perf.",
		zap.Int("pid", st.info.Pid), zap.String("comm", st.info.Comm), zap.Int64("unnamed_frames", jit.Unnamed))
}

// dirtyProcesses returns the live processes whose memory map changed, and
// marks them clean: the caller reads their maps.
func (e *engine) dirtyProcesses() []*procState {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*procState
	for _, st := range e.live {
		if st.mapsDirty {
			st.mapsDirty = false
			out = append(out, st)
		}
	}
	return out
}

// ne is the byte order of stack copies, the machine's.
var ne = binary.NativeEndian
