package profiler

import (
	"fmt"
	"math"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/symbolize"
	"github.com/perfprof/perfprof/internal/unwind"
)

// The registry is the set of target process images and what tells them
// apart: which process has each pid now, the images exec replaced, the
// processes gone whose samples are not yet taken, and when a pid passed
// to another process (fork records, discovery). Its state is guarded by
// engine.mu, the lock the read loop takes per record.

// registry holds the process images. Guarded by engine.mu.
type registry struct {
	live map[int]*procState     // the process that has each pid now
	all  map[procKey]*procState // every process with samples to report, live or not
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
	// roles name the threads the runtime left unnamed (see threadRole);
	// guarded by engine.reportMu.
	roles map[uint32]string
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
	unwinder atomic.Pointer[unwind.Unwinder]
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
		e.tel.Add(cProcesses, -1)
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
	e.tel.Add(cProcesses, 1)
	e.readSoon(st)
	return st, true
}

// dropProcess undoes addProcess when attaching failed.
func (e *engine) dropProcess(st *procState) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.live[st.key.pid] == st {
		delete(e.live, st.key.pid)
		e.tel.Add(cProcesses, -1)
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
	e.tel.Add(cProcesses, -1)
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
	e.readSoon(st)
}

// readSoon has the facts worker read the process context of an image
// attached or exec'd now, rather than at its next pass, so that its first
// report names its service. Called with mu held.
func (e *engine) readSoon(st *procState) {
	if len(e.toContext) < maxToName {
		e.toContext = append(e.toContext, st)
	}
	select {
	case e.factsKick <- struct{}{}:
	default:
	}
}

func (st *procState) String() string {
	return fmt.Sprintf("pid %d (%s)", st.info.Pid, st.info.Comm)
}

// lastGone returns the process of pid released last whose samples are
// still to be reported: a group read after its process was released (it
// exited between two reads of the ring) is its. Called with mu held.
func (e *engine) lastGone(pid int) *procState {
	var last *procState
	for k, st := range e.all {
		if k.pid == pid && st.gone && !st.removed && (last == nil || k.start > last.key.start || k.start == last.key.start && k.gen > last.key.gen) {
			last = st
		}
	}
	return last
}
