package profiler

import (
	"math"
	"slices"

	"go.uber.org/zap"

	"github.com/perfprof/perfprof/internal/sched"
)

// taken is one process's samples split off for a report, not yet
// symbolized.
type taken struct {
	st         *procState
	b          *batch
	links      []Link
	threads    map[uint32]string
	resource   int32
	refreshMap bool
	// gone is st.gone when taken: the read loop and discovery set it
	// under mu, which the symbolization runs without.
	gone bool
}

// take splits off, joins and symbolizes the samples older than watermark
// (all of them when final), and returns them by process. now is the
// CLOCK_MONOTONIC time of the report. Younger samples wait for the next
// take, unless the buffer is over its bound: then the oldest go out early,
// unjoined.
func (e *engine) take(now, watermark uint64, final bool) []Snapshot {
	// Samples taken before their process's unwind tables were read go
	// out unwound when the tables can be read (see pending.go).
	e.unwindQueued()
	// Split under mu, which the read loop takes per record: that part is a
	// copy of the samples. The join and the symbolization run after it.
	var out []taken
	e.mu.Lock()
	cut := watermark
	if max := e.opts.MaxBufferedSamples; !final && e.buffered > max {
		cut = e.earlyCut(watermark, max/2)
	}
	windowA, windowB := e.windowA, min(cut, now)
	if e.sched != nil {
		e.drainSched(now - min(now, reorderDelay))
		if final {
			e.drainSched(math.MaxUint64)
		}
	}
	remaining := 0
	for key, st := range e.all {
		if len(st.pending.samples) > 0 {
			e.settleBefore(st, cut)
		}
		old := st.batch
		b, keep, moved := old.takeBefore(cut)
		st.batch = keep
		if e.sched != nil && moved != nil {
			e.sched.rebase(old, keep, moved)
		}
		if moved != nil {
			st.pending.rebase(old, keep, moved)
		}
		remaining += len(keep.samples)
		if b != nil && st.endedAt != 0 {
			b = e.dropReused(st, b)
		}
		if b != nil && st.movedOut > 0 {
			b = dropMoved(st, b)
		}
		if b != nil {
			t := taken{st: st, b: b, threads: map[uint32]string{}, refreshMap: st.mapsDirty, gone: st.gone}
			st.mapsDirty = false
			for _, s := range b.samples {
				if _, ok := t.threads[s.tid]; !ok {
					t.threads[s.tid] = st.threads[s.tid]
				}
			}
			out = append(out, t)
		}
		if st.gone && len(st.batch.samples) == 0 {
			delete(e.all, key)
			st.removed = true
		}
	}
	e.buffered = remaining
	e.windowA = windowB
	e.mu.Unlock()

	var jc JoinCounts
	e.spansMu.Lock()
	for i := range out {
		t := &out[i]
		t.links = e.join(t.st, t.b, watermark, &jc)
		t.resource = t.st.resource
	}
	if !final {
		_, unmatched := e.spans.Forget(watermark)
		e.spanCounts.Unmatched += int64(unmatched)
		e.watermark = watermark
	}
	if e.contexts != nil {
		e.contexts.mu.Lock()
		e.contexts.forget(cut - min(cut, contextGrace))
		e.contexts.mu.Unlock()
	}
	e.joinCounts.Span += jc.Span
	for i, n := range jc.Read {
		e.joinCounts.Read[i] += n
	}
	e.joinCounts.NoSpan += jc.NoSpan
	e.joinCounts.Ambiguous += jc.Ambiguous
	e.joinCounts.Early += jc.Early
	e.joinCounts.OtherProcess += jc.OtherProcess
	e.spansMu.Unlock()

	// Symbolize without either lock: the read loop and span ingest go on.
	var refresh []*procState
	for _, t := range out {
		if t.refreshMap {
			refresh = append(refresh, t.st)
		}
	}
	if len(refresh) > 0 {
		// As the symbol worker does: a process attached since
		// unwindQueued gets its unwinder, and what it queued is unwound.
		e.readTables(func() []*procState { return refresh })
	}
	snaps := make([]Snapshot, 0, len(out))
	var jit JITStats
	for _, t := range out {
		sn, j := e.snapshot(t, windowA, windowB)
		snaps = append(snaps, sn)
		jit.add(j)
	}
	e.syms.addJIT(jit)
	e.syms.trim()
	return snaps
}

// snapshot symbolizes what was taken of one process. A JVM whose JIT
// frames or threads are not all named is asked for its perf map and
// thread names, and the stacks named again.
func (e *engine) snapshot(t taken, windowA, windowB uint64) (Snapshot, JITStats) {
	stacks, jit := e.syms.resolve(t.st, t.b)
	if e.opts.JVMPerfMap && needsJVM(t.st, t.threads, jit.Unnamed) && e.askJVM(t.st, "report", false) {
		e.pollOne(t.st)
		before := jit.Unnamed
		stacks, jit = e.syms.resolve(t.st, t.b)
		t.st.jvmHelped(jit.Unnamed < before, e.opts.JVMRefreshInterval)
	}
	if names := t.st.jvmNames(); names != nil {
		for tid := range t.threads {
			if name, ok := names[tid]; ok {
				t.threads[tid] = name
			}
		}
	}
	e.nameThreads(t, stacks)
	pctx, announce := t.st.processContext(t.gone, e.opts.Limits)
	if announce && e.plan.contexts != nil {
		if err := e.plan.contexts.Attach(t.st.info.Pid); err != nil {
			e.log.Info("The process announces OpenTelemetry thread contexts, but they cannot be read; its samples are joined by thread and time", zap.Int("pid", t.st.info.Pid), zap.Error(err))
		}
	}
	if jit.Unnamed > 0 && !t.st.jit.Found() {
		e.hintPerfMap(t.st, jit)
	}
	s := Snapshot{
		Pid:         t.st.info.Pid,
		Exe:         t.st.info.Exe,
		Comm:        t.st.info.Comm,
		StartTime:   t.st.info.StartTime,
		ContainerID: t.st.ident.Cgroup.ContainerID,
		PodUID:      t.st.ident.Cgroup.PodUID,
		Resource:    t.resource,
		Start:       e.clock.Unix(windowA),
		End:         e.clock.Unix(windowB),
		Samples:     make([]Sample, len(t.b.samples)),
		Stacks:      stacks,
		Threads:     t.threads,

		ProcessContext: pctx,
	}
	for i, r := range t.b.samples {
		s.Samples[i] = Sample{
			Time:   e.clock.Unix(r.time),
			Weight: r.weight,
			Tid:    r.tid,
			CPU:    r.cpu,
			Stack:  r.stack,
			State:  sched.State(r.state),
			Link:   t.links[i],
		}
	}
	return s, jit
}

// earlyCut returns the time before which samples must go out now so that
// at most keep samples younger than the watermark stay buffered. Called
// with mu held.
func (e *engine) earlyCut(watermark uint64, keep int) uint64 {
	var times []uint64
	for _, st := range e.all {
		for _, s := range st.batch.samples {
			if s.time >= watermark {
				times = append(times, s.time)
			}
		}
	}
	if len(times) <= keep {
		return watermark
	}
	slices.Sort(times)
	return times[len(times)-keep]
}

// nameThreads names the threads that the runtime left with the process's
// name by their roles (see threadRole), found in any of their stacks and
// kept for the life of the process.
func (e *engine) nameThreads(t taken, stacks [][]*Location) {
	st := t.st
	st.rolesMu.Lock()
	defer st.rolesMu.Unlock()
	for _, s := range t.b.samples {
		if s.stack < 0 || s.tid == uint32(st.info.Pid) || t.threads[s.tid] != st.info.Comm {
			continue
		}
		if _, ok := st.roles[s.tid]; ok {
			continue
		}
		if role := threadRole(stacks[s.stack]); role != "" {
			if st.roles == nil {
				st.roles = map[uint32]string{}
			}
			st.roles[s.tid] = role
		}
	}
	for tid, role := range st.roles {
		if name, ok := t.threads[tid]; ok && name == st.info.Comm {
			t.threads[tid] = role
		}
	}
}

// dropReused returns the samples of b taken before another process was
// forked with the pid of st, nil when none: the read loop reads the rings
// of the CPUs one after the other, so samples of the new process can come
// before the fork record that says whose they are. b is left as it is (the
// sched state may refer to it). Called with mu held.
func (e *engine) dropReused(st *procState, b *batch) *batch {
	n := 0
	for _, s := range b.samples {
		if s.time < st.endedAt {
			n++
		}
	}
	if n == len(b.samples) {
		return b
	}
	e.counts.pidReused += int64(len(b.samples) - n)
	if n == 0 {
		return nil
	}
	out := &batch{samples: make([]rawSample, 0, n), stacks: b.stacks}
	for _, s := range b.samples {
		if s.time < st.endedAt {
			out.samples = append(out.samples, s)
		}
	}
	return out
}
