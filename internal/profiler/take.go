package profiler

import (
	"math"
	"slices"

	"github.com/perfprof/perfprof/internal/sched"
)

// taken is one process's samples split off for a report, not yet
// symbolized.
type taken struct {
	st       *procState
	b        *batch
	joined   joined
	threads  map[uint32]string
	resource int32
	// gone is st.gone when taken: the read loop and discovery set it
	// under mu, which the symbolization runs without.
	gone bool
	// windowA and windowB bound the report window it was taken in.
	windowA, windowB uint64
	// unnamed counts the JIT frames that the perf map left unnamed when
	// the report held it back for its JVM's answer (see take).
	unnamed int64
}

// take splits off, joins and symbolizes the samples older than watermark
// (all of them when final), and returns them by process. now is the
// CLOCK_MONOTONIC time of the report. Younger samples wait for the next
// take, unless the buffer is over its bound: then the oldest go out early,
// unjoined.
func (e *engine) take(now, watermark uint64, final bool) []Snapshot {
	e.reportMu.Lock()
	defer e.reportMu.Unlock()
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
			t := taken{st: st, b: b, threads: map[uint32]string{}, gone: st.gone, windowA: windowA, windowB: windowB}
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

	e.spansMu.Lock()
	for i := range out {
		t := &out[i]
		t.joined = e.join(t.st, t.b, watermark)
		if t.joined.resource >= 0 {
			t.st.resource = t.joined.resource
		}
		t.resource = t.st.resource
	}
	if !final {
		_, unmatched := e.spans.Forget(watermark)
		e.tel.Add(cSpansUnmatched, int64(unmatched))
		e.watermark = watermark
	}
	if e.contexts != nil {
		e.contexts.mu.Lock()
		e.contexts.forget(cut - min(cut, contextGrace))
		e.contexts.mu.Unlock()
	}
	e.spansMu.Unlock()

	// Symbolize without either lock: the read loop and span ingest go on.
	// What a report held back for its JVM's answer goes out now, named by
	// the perf map the JVM wrote since; what this one holds back goes out
	// with the next.
	held := e.held
	e.held = nil
	snaps := make([]Snapshot, 0, len(held)+len(out))
	var jit JITStats
	for _, t := range held {
		sn, j := e.snapshot(t)
		t.st.jvmHelped(j.Unnamed < t.unnamed, e.opts.JVMRefreshInterval)
		snaps = append(snaps, sn)
		jit.add(j)
	}
	var hold []taken
	for _, t := range out {
		sn, j := e.snapshot(t)
		// A JVM whose perf map does not name its JIT frames, or which has
		// not named its threads, is asked to write it anew by the JVM
		// worker, and its samples wait for the next report: at most once
		// per ask, and an ask at most every JVMRefreshInterval (longer
		// while asks name nothing more). The report asks no JVM itself:
		// one that takes jvmTimeout to answer would hold every target's
		// report.
		if !final && !t.gone && e.opts.JVMPerfMap && needsJVM(t.st, t.threads, j.Unnamed) && e.requestJVM(t.st, "report") {
			t.unnamed = j.Unnamed
			hold = append(hold, t)
			continue
		}
		if j.Unnamed > 0 && !t.st.jit.Found() {
			e.hintPerfMap(t.st, j)
		}
		snaps = append(snaps, sn)
		jit.add(j)
	}
	if len(hold) > 0 {
		e.held = append(e.held, hold...)
	}
	e.tel.Add(cJITNewest, jit.Frames-jit.Older-jit.Later-jit.Unnamed)
	e.tel.Add(cJITOlder, jit.Older)
	e.tel.Add(cJITLater, jit.Later)
	e.tel.Add(cJITUnnamed, jit.Unnamed)
	e.syms.trim()
	return snaps
}

// snapshot symbolizes what was taken of one process, with the facts known
// of it now: its memory map, perf map and JVM thread names, its threads'
// roles, the resource it publishes. It reads nothing of the process.
func (e *engine) snapshot(t taken) (Snapshot, JITStats) {
	stacks, jit := e.syms.resolve(t.st, t.b)
	threads := make(map[uint32]string, len(t.threads))
	for tid, name := range t.threads {
		threads[tid] = name
	}
	if names := t.st.jvmNames(); names != nil {
		for tid := range threads {
			if name, ok := names[tid]; ok {
				threads[tid] = name
			}
		}
	}
	t.threads = threads
	e.nameThreads(t, stacks)
	// One offset for the whole snapshot, handed on with it: a refresh of
	// the clock meanwhile does not split its times between two.
	clk := e.clock.Fixed()
	s := Snapshot{
		Pid:         t.st.info.Pid,
		Exe:         t.st.exePath(),
		Comm:        t.st.info.Comm,
		StartTime:   t.st.info.StartTime,
		ContainerID: t.st.ident.Cgroup.ContainerID,
		PodUID:      t.st.ident.Cgroup.PodUID,
		Resource:    t.resource,
		Start:       clk.Unix(t.windowA),
		End:         clk.Unix(t.windowB),
		ClockOffset: clk,
		Samples:     make([]Sample, len(t.b.samples)),
		Stacks:      stacks,
		Threads:     threads,

		ProcessContext: t.st.processContext(),
		ContextAttrs:   t.joined.attrs,
	}
	for i, r := range t.b.samples {
		weight := r.weight
		if t.joined.cpu != nil && t.joined.cpu[i] != 0 {
			weight = t.joined.cpu[i]
		}
		s.Samples[i] = Sample{
			Time:   clk.Unix(r.time),
			Weight: weight,
			Tid:    r.tid,
			CPU:    r.cpu,
			Stack:  r.stack,
			State:  sched.State(r.state),
			Link:   t.joined.links[i],
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
	e.tel.Add(cPidReused, int64(len(b.samples)-n))
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
