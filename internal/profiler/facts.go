package profiler

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/perfprof/perfprof/internal/otelctx"
)

// The facts worker reads what the report needs to know of the targets
// beyond their records, off both the read loop and the report: the names
// of the threads the read loop saw (and their ids in a nested pid
// namespace, which the join needs) and the resource each process
// publishes (OTEP 4719). It publishes them on the process states, and the
// report reads them as they stand. The JVM worker and the JIT poller do the
// same for JVM perf maps and perf maps.

// threadRef is a thread of a process image.
type threadRef struct {
	st  *procState
	tid uint32
}

// maxToName bounds the threads waiting to be named: the worker names
// them within milliseconds, so only a process starting threads by the
// hundred thousand a second reaches it; their threads stay unnamed
// (Stats.UnnamedThreads).
const maxToName = 1 << 14

// factsInterval is how often the worker looks for process contexts due to
// be read again.
const factsInterval = time.Second

// catchUpWait bounds how long a report waits for the facts worker and the
// JIT poller to catch up with the records read before it (catchUp).
const catchUpWait = 250 * time.Millisecond

// tablesWait bounds how long a report with samples waiting for their
// unwind tables waits for the symbol worker to read them: a first parse of
// a large binary and its debug file takes a quarter of a second, seconds
// on a busy machine, and samples that go out before it keep the kernel's
// frame-pointer chain.
const tablesWait = 5 * time.Second

// catchUp has the facts worker name the threads seen so far and read the
// process contexts due (those of the processes attached since), the JIT
// poller read what the perf maps gained since its last poll, and, when
// samples wait for their unwind tables, the symbol worker read the tables
// of the processes that mapped code since it last did; it waits for them,
// at most catchUpWait (tablesWait for the tables): a report names the
// threads of its samples, and the JIT code compiled just before them, as
// they stand when it begins. The reads run on the workers, so a target
// whose files stall a read delays a report by that bound at most.
func (p *Profiler) catchUp() {
	select {
	case <-p.stop:
		return // Close read them (settle)
	default:
	}
	workers := []chan chan struct{}{p.factsNow, p.jitNow}
	wait := catchUpWait
	p.mu.Lock()
	if p.pendingBytes > 0 {
		workers, wait = append(workers, p.symNow), tablesWait
	}
	p.mu.Unlock()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	var waits []chan struct{}
	for _, worker := range workers {
		done := make(chan struct{})
		select {
		case worker <- done:
			waits = append(waits, done)
		case <-deadline.C:
			return
		}
	}
	for _, done := range waits {
		select {
		case <-done:
		case <-deadline.C:
			return
		}
	}
}

// processContextInterval is how often a process's published context is
// read again: SDKs publish it at start and seldom change it.
const processContextInterval = 10 * time.Second

// A process that publishes no context yet is read again after
// factsInterval, doubling up to processContextInterval: an SDK publishes
// when it starts, which can be a second or more after the process did
// (a JVM, a Node.js app loading its modules), and a process attached as
// it starts should not go ten seconds without its service.name.

// factsWorker names threads as the read loop sees them, and reads the
// process contexts of the live processes when due.
func (p *Profiler) factsWorker() {
	defer p.wg.Done()
	t := time.NewTicker(factsInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-p.factsKick:
			p.readThreadNames()
			p.readNewContexts()
		case done := <-p.factsNow:
			p.readThreadNames()
			p.readProcessContexts(false)
			close(done)
		case <-t.C:
			p.readThreadNames()
			p.readProcessContexts(false)
		}
	}
}

// readThreadNames reads the names of the threads seeThread queued and,
// for processes in nested pid namespaces, their ids there. It runs on the
// facts worker, and in the profiler's Close once the worker stopped.
func (e *engine) readThreadNames() {
	e.mu.Lock()
	queue := e.toName
	e.toName = nil
	execs := e.toExe
	e.toExe = nil
	e.mu.Unlock()
	for _, st := range execs {
		if p, err := e.procs.Read(st.info.Pid); err == nil && p.StartTime == st.info.StartTime {
			st.exe.Store(&p.Exe)
		}
	}
	if len(queue) == 0 {
		return
	}
	type named struct {
		name  string
		local uint32
	}
	out := make([]named, len(queue))
	for i, r := range queue {
		out[i].name, out[i].local = e.procs.Thread(r.st.key.pid, int(r.tid), r.st.ident.Nested)
	}
	e.mu.Lock()
	for i, r := range queue {
		st := r.st
		if st.threads[r.tid] == "" { // not named by a comm record since
			st.threads[r.tid] = out[i].name
		}
		if st.ident.Nested && out[i].local != 0 {
			putBounded(st.localTids, r.tid, out[i].local)
			e.ids.thread(st.key.pid, r.tid, out[i].local)
		}
	}
	e.mu.Unlock()
}

// exePath returns the path of the executable of st, "" when unknown.
func (st *procState) exePath() string {
	if p := st.exe.Load(); p != nil {
		return *p
	}
	return st.info.Exe
}

// pctxState is the process context a process publishes (OTEP 4719), as
// the facts worker read it last.
type pctxState struct {
	// facts is what the report reads; the rest is the facts worker's
	// (and Close's, once the worker stopped).
	facts atomic.Pointer[pctxFacts]
	read  time.Time     // the last read that settled
	next  time.Duration // how long after read it is read again
	at    uint64        // PublishedAt of facts
	// unread: the publication names a thread-context schema whose
	// threads could not be read yet (the object defining the variable
	// not loaded yet, as Node.js loads its addon at require time): the
	// span reader is asked again at each read, which comes sooner.
	unread bool
}

// pctxFacts is one publication of a process context, as the report uses
// it: immutable once stored.
type pctxFacts struct {
	attrs  map[string]any // the resource's attributes
	schema string         // threadlocal.schema_version, "" when none
	// keys is threadlocal.attribute_key_map: the names of the key
	// indexes of the process's thread context records.
	keys []string
}

// processContext returns the resource attributes st publishes, nil when
// none (or not read yet).
func (st *procState) processContext() map[string]any {
	if p := st.pctx.facts.Load(); p != nil {
		return p.attrs
	}
	return nil
}

// contextKeys returns the attribute key map of st's thread context
// records, nil when none is published.
func (st *procState) contextKeys() []string {
	if p := st.pctx.facts.Load(); p != nil {
		return p.keys
	}
	return nil
}

// readProcessContexts reads the process contexts of the live processes
// not read for processContextInterval; with gone, once those of every
// process never read (the profiler's Close, for processes that exited or
// ran little). A process whose new publication names a thread-context
// schema is attached to the span reader again: OTEP 4947 asks readers to
// look for the thread-local variable again then (it may be in a library
// loaded since the process was attached).
func (e *engine) readProcessContexts(gone bool) {
	var sts []*procState
	e.mu.Lock()
	e.toContext = nil // read here
	if gone {
		for _, st := range e.all {
			sts = append(sts, st)
		}
	} else {
		for _, st := range e.live {
			sts = append(sts, st)
		}
	}
	e.mu.Unlock()
	e.readContexts(sts, gone)
}

// readNewContexts reads the process contexts of the images readSoon
// queued.
func (e *engine) readNewContexts() {
	e.mu.Lock()
	sts := e.toContext
	e.toContext = nil
	e.mu.Unlock()
	e.readContexts(sts, false)
}

// readContexts reads the contexts of sts that are due (see
// readProcessContexts).
func (e *engine) readContexts(sts []*procState, gone bool) {
	for _, st := range sts {
		// At Close (gone) the span reader is closed already.
		if !st.readProcessContext(e, gone) || gone || e.plan.contexts == nil {
			continue
		}
		c := &st.pctx
		err := e.plan.contexts.Attach(st.info.Pid, c.facts.Load().schema)
		switch {
		case err == nil:
			c.unread = false
		case !c.unread:
			e.log.Info("The process announces OpenTelemetry thread contexts, but they cannot be read (tried again for a while); its samples are joined by thread and time", zap.Int("pid", st.info.Pid), zap.Error(err))
			c.unread = true
			c.next = factsInterval
		default:
			c.next = min(2*c.next, processContextInterval)
		}
	}
}

// readProcessContext reads the context st publishes when due: never read,
// or (unless once) read processContextInterval ago. It reports whether a
// new publication names a thread-context schema. A read that fails for
// another reason than "not published" (the process updating it, a read
// error) is tried again at the next pass; a process whose data reaches a
// bound (a memory map too long to read) is counted, and read as one that
// publishes nothing.
func (st *procState) readProcessContext(e *engine, once bool) (announce bool) {
	c := &st.pctx
	if !c.read.IsZero() && (once || time.Since(c.read) < c.next) {
		return false
	}
	r, err := otelctx.ProcessContext(st.info.Pid)
	bound := e.opts.Limits.Record(fmt.Sprintf("pid %d", st.info.Pid), err)
	if err == nil || bound || errors.Is(err, otelctx.ErrNotPublished) {
		c.read = time.Now()
	}
	switch {
	case err == nil:
		if r.PublishedAt != c.at || c.facts.Load() == nil {
			keys := r.KeyMap()
			// A record's key index is a byte: the names past 256 name
			// nothing (a hostile map may hold a megabyte of them).
			if len(keys) > 256 {
				keys = append([]string(nil), keys[:256]...)
			}
			c.facts.Store(&pctxFacts{attrs: r.Attributes, schema: r.SchemaVersion(), keys: keys})
		}
		// A new publication naming a schema announces thread contexts
		// (again); one that could not be read yet is tried again, as
		// often as readContexts set.
		announce = r.SchemaVersion() != "" && (r.PublishedAt != c.at || c.unread)
		c.at = r.PublishedAt
		if !c.unread {
			c.next = processContextInterval
		}
	case bound:
		c.facts.Store(nil)
		c.next = processContextInterval
	case errors.Is(err, otelctx.ErrNotPublished):
		c.facts.Store(nil)
		c.next = min(max(2*c.next, factsInterval), processContextInterval)
	}
	// Other errors (the process exited, a context being updated) keep
	// what was read.
	return announce
}
