package profiler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/perfprof/perfprof/internal/hotspot"
)

// jvmTimeout bounds one request to a JVM: the first attach starts its
// attach listener (a few ms), a perf map of a large code cache takes
// longer to write.
const jvmTimeout = 5 * time.Second

// jvmState is what the engine knows of a target as a JVM.
type jvmState struct {
	// checked is the JVM worker's, which alone asks: IsJVM was asked.
	checked bool
	// mu guards when the JVM is asked next. An ask is made without it, so
	// a report can ask for one without waiting for one under way.
	mu      sync.Mutex
	lastAsk time.Time
	// wait is the least time between two requests: JVMRefreshInterval,
	// doubled (up to 32 times) while requests name no more frames, as for
	// JIT code the map never names.
	wait time.Duration
	// queued: an ask is queued for the JVM worker or under way.
	queued bool
	// names are the full names of its threads (comm is cut at 15 bytes),
	// by tid, as of lastAsk. Not under mu: a report reads them without
	// waiting.
	names atomic.Pointer[map[uint32]string]
	// off: not a JVM, or not to be asked again (see askJVM).
	off atomic.Bool
}

// jvmNames returns the full thread names of a JVM target, nil for others.
func (st *procState) jvmNames() map[uint32]string {
	if p := st.jvm.names.Load(); p != nil {
		return *p
	}
	return nil
}

// jvmAsk is an ask queued for the JVM worker, and why it is made.
type jvmAsk struct {
	st  *procState
	why string
}

// requestJVM asks the JVM worker to ask st for its perf map and thread
// names, unless it was asked less than its wait ago, an ask is queued or
// under way, or st is no JVM to ask. It never waits: a report calls it. It
// reports whether the ask was queued.
func (e *engine) requestJVM(st *procState, why string) bool {
	j := st.jvm
	if !e.opts.JVMPerfMap || j.off.Load() {
		return false
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.wait == 0 {
		j.wait = e.opts.JVMRefreshInterval
	}
	if j.queued || time.Since(j.lastAsk) < j.wait {
		return false
	}
	select {
	case e.jvmQueue <- jvmAsk{st, why}:
		j.queued = true
		return true
	default: // the next report asks again
		return false
	}
}

// askJVM asks the target, when it is a HotSpot JVM, to write its perf map
// anew, reads its thread names and the map; it runs on the JVM worker, for
// the processes attached and those requestJVM queued. It reports whether
// the map was written.
func (e *engine) askJVM(st *procState, why string) bool {
	j := st.jvm
	defer func() {
		j.mu.Lock()
		j.queued = false
		j.mu.Unlock()
	}()
	pid := st.info.Pid
	// A reply too long, too slow, or not a reply, and a memory map too
	// long to read, are counted (limits.AttachReply, FileTooLarge).
	subject := fmt.Sprintf("pid %d", pid)
	if !j.checked {
		j.checked = true
		ok, err := hotspot.IsJVM(pid)
		e.opts.Limits.Record(subject, err)
		if !ok || err != nil {
			j.off.Store(true)
		}
	}
	if j.off.Load() {
		return false
	}
	j.mu.Lock()
	j.lastAsk = time.Now()
	j.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), jvmTimeout)
	defer cancel()
	start := time.Now()
	if err := hotspot.PerfMap(ctx, pid); err != nil {
		bound := e.opts.Limits.Record(subject, err)
		if bound || errors.Is(err, hotspot.ErrNoAttach) || errors.Is(err, context.DeadlineExceeded) {
			// A JVM that refuses attach (-XX:+DisableAttachMechanism,
			// -Xrs before its listener started) is not asked again: each
			// try may make it print a thread dump. Nor is a process whose
			// reply reached a bound (too long, too slow, not a reply): a
			// JVM answers Compiler.perfmap with a line, and each ask of
			// one that streams would cost a read up to the bound.
			j.off.Store(true)
			e.log.Warn("Cannot ask the JVM for its perf map; its JIT frames stay unnamed", zap.Int("pid", pid), zap.Error(err))
		} else {
			e.log.Warn("Asking the JVM for its perf map failed; will ask again", zap.Int("pid", pid), zap.Error(err))
		}
		return false
	}
	st.jit.Reread()
	took := time.Since(start)
	if names, err := hotspot.ThreadNames(ctx, pid); err == nil {
		m := make(map[uint32]string, len(names))
		for tid, name := range names {
			m[uint32(tid)] = name
		}
		j.names.Store(&m)
	} else {
		e.opts.Limits.Record(subject, err)
		e.log.Debug("Cannot read the JVM's thread names", zap.Int("pid", pid), zap.Error(err))
	}
	e.log.Debug("Asked the JVM for its perf map", zap.Int("pid", pid), zap.String("why", why), zap.Duration("took", took))
	e.pollOne(st)
	return true
}

// jvmHelped adapts the time to the next request to a JVM to whether the
// last one named frames that were unnamed.
func (st *procState) jvmHelped(helped bool, base time.Duration) {
	j := st.jvm
	j.mu.Lock()
	defer j.mu.Unlock()
	if helped {
		j.wait = base
	} else {
		j.wait = min(2*j.wait, 32*base)
	}
}

// needsJVM reports whether a report of st names threads the JVM has not
// named yet, or has JIT frames its perf map does not name.
func needsJVM(st *procState, threads map[uint32]string, unnamed int64) bool {
	if unnamed > 0 {
		return true
	}
	names := st.jvmNames()
	for tid, comm := range threads {
		if _, ok := names[tid]; !ok && len(comm) == 15 {
			return true
		}
	}
	return false
}
