package profiler

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"go.uber.org/zap"

	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/symbolize"
	"github.com/perfprof/perfprof/internal/tidmap"
)

// engine is the state behind a Profiler, without its goroutines: records go
// in through handle, spans through addSpans, reports come out of take. The
// read loop calls handle for every record, so handle takes no lock but mu
// and does nothing slow: no symbolization, no binary reads.
type engine struct {
	opts  Options
	plan  plan
	procs Procs
	log   *zap.Logger
	clock *clock.Mapper
	syms  *symbols

	// mu guards the process states and their batches, the sched state
	// and the counters of the read loop.
	mu       sync.Mutex
	live     map[int]*procState     // the process that has each pid now
	all      map[procKey]*procState // every process with samples to report, live or not
	buffered int                    // samples in all batches
	windowA  uint64                 // start of the next report window, CLOCK_MONOTONIC
	sched    *schedState            // nil without sched capture
	flush    chan struct{}          // asks for an early report at the buffer bound
	counts   readCounts             // cumulative
	// rediscover asks for discovery now: a target's pid was reused.
	rediscover chan struct{}
	// jvmQueue holds the JVMs to ask for their perf maps (requestJVM).
	jvmQueue chan jvmAsk
	// toName holds the threads seen whose names the facts worker reads
	// (seeThread); factsKick wakes it.
	toName     []threadRef
	spareNames []threadRef // toName's last backing array, reused
	// toExe holds the images exec'd whose executable the worker reads.
	toExe []*procState
	factsKick  chan struct{}
	// namingMu is held by a pass of readThreadNames.
	namingMu sync.Mutex
	// held are what a report held back for its JVM's answer (take).
	heldMu sync.Mutex
	held   []taken
	attached   int      // processes attached now
	chain      []uint64 // scratch for addSchedGroup
	// unwFrames and unwChain are scratch for unwindCopy, unwRows its
	// cache of unwinding rules.
	unwFrames, unwChain []uint64
	unwRows             symbolize.RowCache
	// pendingBytes is what the pending queues of all processes hold (see
	// pending.go).
	pendingBytes int64

	// spansMu guards the span index. It is apart from mu so that span
	// ingest never waits for the read loop; when both are held, mu is
	// taken first.
	spansMu    sync.Mutex
	spans      *tidmap.Map
	watermark  uint64     // samples before it have been taken
	names      pidNames   // the resource the spans of each pid named
	spanCounts SpanCounts // cumulative
	joinCounts JoinCounts // cumulative

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

// readCounts are what the read loop counts.
type readCounts struct {
	samples    int64 // on-CPU samples accepted
	bufferFull int64 // dropped at twice MaxBufferedSamples
	execs      int64 // programs replaced by exec
	// pidReused: samples of a process forked with a target's pid after
	// the target exited, before discovery attached it (dropped).
	pidReused int64
	// Of the eBPF scheduler program's groups: those made off-CPU
	// samples, those of them whose switch-out was not captured, and those
	// of processes no longer attached (dropped).
	offCPU, offCPUUncaptured, offCPUUnattached int64
	unwind                                     UnwindStats
	// unnamedThreads: threads seen while maxToName waited to be named,
	// left unnamed.
	unnamedThreads int64
}

// procKey names one process image: a pid is reused by later processes
// (start time tells them apart) and a process that execs becomes another
// program (gen counts its execs).
type procKey struct {
	pid   int
	start uint64
	gen   uint32
}

// procState is one target process image. The fields below sym are the
// symbol side, guarded by symbols.mu; the rest by engine.mu.
type procState struct {
	key     procKey
	info    perf.Process
	ident   Identity // where it runs: pid namespace, cgroups
	threads map[uint32]string
	// localTids holds, for a process of a nested pid namespace, the
	// threads whose id in that namespace was looked up (0: not found).
	localTids map[uint32]uint32
	batch     *batch
	gone      bool // exited, detached or exec'ed; dropped once its last batch is taken
	// attachedAt is when the engine took the process on (CLOCK_MONOTONIC),
	// after it was found: a process forked later with its pid is another.
	attachedAt uint64
	// endedAt is when another process was forked with its pid, 0 until
	// then: records of the pid from then on are the other's, until
	// discovery releases this one and attaches that.
	endedAt uint64
	removed bool // dropped: late sched events must not add to it
	// mapsDirty says code was mapped since the memory map was read.
	mapsDirty bool
	// resource is the caller's handle of the span resource of the
	// process, -1 until its spans are seen, so that every snapshot of it
	// names its service, also when none of its samples fell in a span.
	// Guarded by spansMu: the join sets it.
	resource int32
	// unnamed: the process has exited, and what spans name its pid by
	// now is another's (guarded by spansMu).
	unnamed bool
	// pending holds the samples taken before unwinder was stored, until
	// it is (see pending.go).
	pending pendingQueue
	// movedOut counts the samples of the batch that moveQueued moved to
	// the image that exec'd after this one; they are dropped when taken.
	movedOut int

	// jit is the process's perf map, which the JIT poller keeps current.
	// jitGen is its generation at the last poll, which began at
	// jitPolled; jitBumps say when it changed, so that a sample is named
	// by the map as it stood when the sample was taken, not read.
	jit       *symbolize.PerfMap
	jitGen    symbolize.Gen
	jitPolled uint64
	jitBumps  []jitBump
	hinted    atomic.Bool // hintPerfMap said its piece
	jvm       *jvmState
	// roles name the threads the runtime left unnamed (see threadRole).
	rolesMu sync.Mutex
	roles   map[uint32]string
	// pctx is the process context the process publishes, as the facts
	// worker read it last (see readProcessContext).
	pctx pctxState

	// exe is the executable of an image exec'd, as the facts worker read
	// it; nil until then (info.Exe is the one before the exec).
	exe atomic.Pointer[string]

	sym *procSymbols
	// unwinder unwinds the stacks of the process on the read loop; the
	// symbol worker replaces it when the memory map changes. nil until
	// its tables are read (the samples taken until then wait in
	// pending), and without stack copies.
	unwinder atomic.Pointer[symbolize.Unwinder]
}

func newEngine(opts Options, pl plan) *engine {
	e := &engine{
		opts:       opts,
		plan:       pl,
		procs:      pl.procs,
		log:        opts.Logger,
		clock:      clock.NewMapper(),
		live:       map[int]*procState{},
		all:        map[procKey]*procState{},
		flush:      make(chan struct{}, 1),
		rediscover: make(chan struct{}, 1),
		jvmQueue:   make(chan jvmAsk, 64),
		factsKick:  make(chan struct{}, 1),
		spans:      tidmap.New(tidmap.Options{MaxSpans: opts.MaxSpans}),
	}
	e.ids = newSpanIDs(pl.procs, opts.Logger)
	e.syms = newSymbols(opts, pl.procs)
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

// addProcess makes the state of p live, before its first record can
// arrive. A previous process with the same pid stays until its samples
// are taken. It reports false when p is live already.
func (e *engine) addProcess(p perf.Process, ident Identity) (*procState, bool) {
	started := bootTicksToMono(p.StartTime)
	e.mu.Lock()
	defer e.mu.Unlock()
	old := e.live[p.Pid]
	if old != nil {
		if old.info.StartTime == p.StartTime {
			return old, false
		}
		old.gone = true // pid reused: the old process has exited
		e.attached--
	}
	// Spans that named the pid before p started named another process.
	e.spansMu.Lock() // after mu, as everywhere
	if h, ok := e.names.forget(p.Pid, started); ok && old != nil && old.resource < 0 {
		old.resource = h
	}
	if old != nil {
		old.unnamed = true
	}
	e.spansMu.Unlock()
	st := &procState{
		key:        procKey{pid: p.Pid, start: p.StartTime},
		info:       p,
		ident:      ident,
		attachedAt: clock.Monotonic(),
		threads:    map[uint32]string{},
		batch:      newBatch(),
		resource:   -1,
		jit:        symbolize.NewPerfMap(p.Pid, e.opts.Limits),
		jvm:        &jvmState{},
		sym:        &procSymbols{},
	}
	e.live[p.Pid] = st
	e.all[st.key] = st
	e.attached++
	return st, true
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
		e.counts.unnamedThreads++
		return
	}
	e.toName = append(e.toName, threadRef{st, tid})
	select {
	case e.factsKick <- struct{}{}:
	default:
	}
}

// dropProcess undoes addProcess when attaching failed.
func (e *engine) dropProcess(st *procState) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.live[st.key.pid] == st {
		delete(e.live, st.key.pid)
		e.attached--
		e.ids.remove(st.key.pid)
	}
	if len(st.batch.samples) == 0 {
		delete(e.all, st.key)
		st.removed = true
	}
	st.gone = true
}

// endProcess undoes addProcess when st had exited before it was attached:
// the records read since are of the process that took its pid. Its
// samples are dropped at the next report.
func (e *engine) endProcess(st *procState) {
	e.mu.Lock()
	st.endedAt = st.attachedAt
	e.mu.Unlock()
	e.dropProcess(st)
}

// releaseProcess marks the live process of pid gone; its samples are
// still reported. It reports whether there was one.
func (e *engine) releaseProcess(pid int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.live[pid]
	if st == nil {
		return false
	}
	delete(e.live, pid)
	st.gone = true
	e.attached--
	e.ids.remove(pid)
	// The name its spans gave it goes with it; its last samples keep it.
	e.spansMu.Lock() // after mu, as everywhere
	if h, ok := e.names.forget(pid, math.MaxUint64); ok && st.resource < 0 {
		st.resource = h
	}
	st.unnamed = true
	e.spansMu.Unlock()
	// A process that takes the pid next gets its own bounds logged.
	e.opts.Limits.Forget(fmt.Sprintf("pid %d", pid))
	return true
}

// liveProcesses returns what identifies the live processes.
func (e *engine) liveProcesses() []perf.Process {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]perf.Process, 0, len(e.live))
	for _, st := range e.live {
		out = append(out, st.info)
	}
	return out
}

// owner returns the live process that a record of pid at time t belongs
// to, nil when none: when the target exited and another process was
// forked with its pid, the records of that one are not the target's.
// Called with mu held.
func (e *engine) owner(pid uint32, t uint64) *procState {
	st := e.live[int(pid)]
	if st == nil || (st.endedAt != 0 && t >= st.endedAt) {
		return nil
	}
	return st
}

// forked notes a process forked with pid at t: every process that had
// the pid and was attached before t had exited by then, and the records of
// pid from t on are of the new process, which discovery attaches now if it
// is a target. That includes the images a process had before an exec, and
// processes released since: the read loop reads the rings of the CPUs one
// after the other, so the fork record can come after samples of the new
// process, and after discovery released the old; the samples are dropped
// when taken (dropReused). Called with mu held.
func (e *engine) forked(pid uint32, t uint64) {
	for key, st := range e.all {
		if key.pid != int(pid) || st.attachedAt >= t || (st.endedAt != 0 && st.endedAt <= t) {
			continue
		}
		st.endedAt = t
		if e.live[key.pid] == st {
			select {
			case e.rediscover <- struct{}{}:
			default:
			}
		}
	}
}

// reusedBy notes that discovery found the pid of a released target held
// by another process, which started at start (clock ticks since boot): the
// target had exited by then, and the records of the pid since are the
// other's. It bounds what a missed fork record would have (forked): the
// session drops the records of a pid once it is released. Start times
// are in ticks of 10 ms, floored: a target's samples in its last 10 ms
// may go too.
func (e *engine) reusedBy(pid int, start uint64) {
	t := bootTicksToMono(start)
	e.mu.Lock()
	defer e.mu.Unlock()
	for key, st := range e.all {
		// Attached after t: it had started by then, so the start
		// time's floor is all that puts t first.
		if key.pid != pid || key.start == start || st.attachedAt >= t {
			continue
		}
		if st.endedAt == 0 || t < st.endedAt {
			st.endedAt = t
		}
	}
}

// userHZ is the unit of process start times in /proc (USER_HZ, 100 on
// every architecture Linux runs perf on).
const userHZ = 100

// bootTicksToMono converts a time in clock ticks since boot to
// CLOCK_MONOTONIC: the two differ by the time the machine was suspended.
func bootTicksToMono(ticks uint64) uint64 {
	var boot, mono unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot)
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono)
	// Read one after the other, they differ by a little either way
	// when the machine never slept.
	suspended := uint64(max(boot.Nano()-mono.Nano(), 0))
	ns := ticks * (1e9 / userHZ)
	return ns - min(ns, suspended)
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
				e.counts.pidReused++
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
				e.counts.bufferFull++
				return
			}
		}
		e.seeThread(st, s.Tid)
		chain, leaf, queue := s.Callchain, uint64(0), false
		switch {
		case e.opts.Unwind != UnwindFramePointer:
			chain, leaf, queue = e.unwindSample(st, s)
		case e.opts.RecoverLeafCaller:
			leaf = leafCandidate(s)
		}
		idx := st.batch.intern(chain, leaf, st.genAt(s.Time))
		st.batch.samples = append(st.batch.samples, rawSample{time: s.Time, tid: s.Tid, cpu: s.CPU, stack: idx})
		if queue {
			e.queuePending(st, s)
		}
		e.buffered++
		e.counts.samples++
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
		if rec.Misc&perf.MiscCommExec != 0 && rec.Comm.Pid == rec.Comm.Tid {
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

// exec replaces a live process image by a new program at t: the samples
// taken so far belong to the old image, whose memory map (read before)
// names their addresses and whose unwinder unwinds those it queued; later
// ones to the new image, whose map and tables the symbol worker reads, its
// samples queued until then. Called with mu held.
func (e *engine) exec(old *procState, comm string, t uint64) {
	info := old.info
	info.Comm = comm
	e.spansMu.Lock() // after mu, as everywhere
	resource := old.resource
	e.spansMu.Unlock()
	st := &procState{
		key:        procKey{pid: info.Pid, start: info.StartTime, gen: old.key.gen + 1},
		info:       info,
		ident:      old.ident,
		attachedAt: old.attachedAt,
		threads:    old.threads,
		localTids:  old.localTids,
		batch:      newBatch(),
		resource:   resource,
		mapsDirty:  true,
		jit:        symbolize.NewPerfMap(info.Pid, e.opts.Limits),
		jvm:        &jvmState{},
		sym:        &procSymbols{},
	}
	old.gone = true
	e.moveQueued(old, st, t)
	e.settleExec(old)
	e.live[info.Pid] = st
	e.all[st.key] = st
	e.counts.execs++
	e.syms.kick()
	// Its executable is read by the facts worker, off the read loop;
	// until then it is the one before the exec.
	e.toExe = append(e.toExe, st)
	select {
	case e.factsKick <- struct{}{}:
	default:
	}
}

// liveStates returns the states of the live processes.
func (e *engine) liveStates() []*procState {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*procState, 0, len(e.live))
	for _, st := range e.live {
		out = append(out, st)
	}
	return out
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

// leafCandidate returns the word at SP of an on-CPU sample whose leaf may
// not have pushed its frame yet, 0 when there is none. Whether it is the
// leaf's caller is for the binary's unwind tables to say, at symbolization.
func leafCandidate(s *perf.Sample) uint64 {
	if len(s.StackUser) < 8 {
		return 0
	}
	var leafPC uint64
	reached := false
	// InsertLeafCaller checks the chain and the stack copy, and calls back
	// for the leaf pc only when the word at SP could be inserted.
	perf.InsertLeafCaller(nil, s.Callchain, s.StackUser, func(pc uint64) bool {
		leafPC, reached = pc, true
		return false
	})
	if !reached {
		return 0
	}
	// The registers must describe the same leaf as the chain.
	if ip, ok := s.UserIP(); !ok || ip != leafPC {
		return 0
	}
	return ne.Uint64(s.StackUser)
}

// ne reads the stack copy, which is in the machine's byte order.
var ne = binary.NativeEndian

func (st *procState) String() string {
	return fmt.Sprintf("pid %d (%s)", st.info.Pid, st.info.Comm)
}
