package profiler

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/perfprof/perfprof/internal/bpf"
	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/limits"
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/symbolize"
)

// Profiler samples the target processes and keeps what they did until it
// is taken. Its methods may be called from any goroutine.
type Profiler struct {
	*engine
	src Records

	stop chan struct{}
	// factsNow and jitNow ask the facts worker and the JIT poller for a
	// pass now, closing the channel sent when it is done (catchUp).
	// symNow does the same for the symbol worker.
	factsNow, jitNow, symNow chan chan struct{}
	wg                       sync.WaitGroup
	closeOnce                sync.Once
}

// Open starts sampling: it opens the source (a perf session unless
// Options.Records is set), attaches the pids and the running processes of
// the executables, and starts reading. It fails whole, releasing what it
// opened: when perf events are denied (errors.Is(err, perf.ErrPermission))
// or a pid does not exist (perf.ErrNoProcess).
func Open(opts Options) (_ *Profiler, err error) {
	opts.setDefaults()
	pl := newPlan(opts)
	src := opts.Records
	if src == nil {
		if err := perf.CheckProc(); err != nil {
			return nil, err
		}
		if opts.Contexts == nil {
			if err := pl.openEBPF(opts); err != nil {
				return nil, err
			}
		}
		s, err := perf.Open(pl.perf)
		if err != nil {
			if pl.labels != nil {
				pl.labels.release()
			}
			return nil, err
		}
		src = s
		if pf, ok := pl.procs.(procfs); ok && pf.scan == nil && opts.discovers() {
			pl.procs = newProcfs(opts.Logger)
		}
	}
	p := &Profiler{engine: newEngine(opts, pl), src: src, stop: make(chan struct{}), factsNow: make(chan chan struct{}), jitNow: make(chan chan struct{}), symNow: make(chan chan struct{})}
	defer func() {
		if err != nil {
			src.Close()
			if pl.contexts != nil {
				pl.contexts.Close()
			}
			if pl.labels != nil {
				pl.labels.release()
			}
			_ = p.syms.close()
			if pf, ok := pl.procs.(procfs); ok {
				pf.close()
			}
		}
	}()
	if opts.Perf.KernelStacks {
		p.syms.loadKernel()
	}
	p.clock.Refresh()
	for _, pid := range opts.Pids {
		proc, err := p.procs.Read(pid)
		if err != nil {
			return nil, fmt.Errorf("target pid %d: %w", pid, err)
		}
		if err := p.attach(proc); err != nil {
			return nil, err
		}
	}
	if opts.discovers() {
		procs, err := p.procs.Scan(opts.Executables, opts.cgroups())
		if err != nil {
			return nil, err
		}
		for _, proc := range procs {
			if err := p.attach(proc); err != nil {
				if errors.Is(err, perf.ErrPermission) {
					return nil, err
				}
				p.log.Warn("Cannot attach to process", zap.Int("pid", proc.Pid), zap.Error(err))
			}
		}
	}
	if l := pl.labels; l != nil && l.sched {
		l.mu.Lock()
		l.onSched = p.addSchedGroup
		l.mu.Unlock()
	}
	if pl.contexts != nil {
		p.wg.Add(1)
		go p.readContexts()
	}
	if pf, ok := p.plan.procs.(procfs); ok && pf.watch != nil && opts.discovers() {
		p.wg.Add(1)
		go p.watchStarts(pf)
	}
	if testHookStart != nil {
		testHookStart(p)
	}
	p.wg.Add(6)
	go p.factsWorker()
	go p.readLoop()
	go p.discoverLoop()
	go p.symbolWorker()
	go p.jitPoller()
	go p.jvmWorker()
	return p, nil
}

// testHookStart, set by tests, runs in Open before the workers start.
var testHookStart func(*Profiler)

// attach starts sampling a process. Its state exists before its first
// record can arrive, and its memory map is read now, while it runs.
func (p *Profiler) attach(proc perf.Process) error {
	// Read before its first record can arrive: a thread of a nested
	// process is looked up in its namespace when first seen.
	ident, err := p.procs.Identity(proc.Pid)
	if err != nil {
		p.log.Debug("Cannot read the pid namespace or cgroups of the process", zap.Int("pid", proc.Pid), zap.Error(err))
	}
	st, fresh := p.addProcess(proc, ident)
	if !fresh {
		return nil
	}
	// The span reader first: with per-CPU events its programs keep only
	// the samples of the processes it reads.
	var cerr error
	if c := p.plan.contexts; c != nil {
		cerr = c.Attach(proc.Pid, "")
		p.opts.Limits.Record(fmt.Sprintf("pid %d", proc.Pid), cerr)
		if errors.Is(cerr, errNotKept) {
			p.dropProcess(st)
			return fmt.Errorf("attach to pid %d (%s): %w", proc.Pid, proc.Comm, cerr)
		}
	}
	if err := p.src.Attach(proc.Pid); err != nil {
		if c := p.plan.contexts; c != nil {
			c.Detach(proc.Pid)
		}
		p.dropProcess(st)
		return fmt.Errorf("attach to pid %d (%s): %w", proc.Pid, proc.Comm, err)
	}
	// The process may have exited, and another have taken its pid,
	// between the scan that found it and its state (attachedAt): that
	// one's records are not its. A fork of the pid after attachedAt ends
	// it by its record (engine.forked); one before is seen only here.
	if now, err := p.procs.Read(proc.Pid); err != nil || now.StartTime != proc.StartTime {
		p.src.Detach(proc.Pid)
		if c := p.plan.contexts; c != nil {
			c.Detach(proc.Pid)
		}
		p.endProcess(st)
		return fmt.Errorf("attach to pid %d (%s): %w", proc.Pid, proc.Comm, perf.ErrNoProcess)
	}
	p.ids.add(proc.Pid, ident)
	p.syms.refresh([]*procState{st}, false)
	if p.opts.Unwind != UnwindFramePointer {
		// The symbol worker reads its unwind tables; until then its
		// samples wait for them (Stats.Unwind.Pending, pending.go).
		p.mu.Lock()
		st.mapsDirty = true
		p.mu.Unlock()
		p.syms.kick()
	}
	if proc.Exe == "" {
		// A process of another user hides its executable, root and
		// memory from a collector without CAP_SYS_PTRACE (ptrace access
		// mode read).
		if _, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", proc.Pid)); errors.Is(err, fs.ErrPermission) {
			p.log.Warn("Cannot read the process's executable, root or memory in /proc: reading a process of another user needs CAP_SYS_PTRACE. "+
				"Its binaries outside this collector's mount namespace stay unsymbolized, and the span its threads run is not read at sample time. "+
				"Grant it (setcap cap_perfmon,cap_bpf,cap_sys_ptrace+ep otelcol-perfprof; in Kubernetes securityContext.capabilities.add: [PERFMON, BPF, SYS_PTRACE]), "+
				"or run the collector as the target's user.", zap.Int("pid", proc.Pid), zap.Error(err))
		}
	}
	if cerr != nil {
		p.log.Info("The span a thread runs cannot be read in this process; its samples are joined by thread and time",
			zap.Int("pid", proc.Pid), zap.Error(cerr))
	}
	p.requestJVM(st, "attached")
	fields := []zap.Field{zap.Int("pid", proc.Pid), zap.String("executable", proc.Exe), zap.String("comm", proc.Comm)}
	if ident.Nested {
		fields = append(fields, zap.Int("pid_in_its_namespace", ident.LocalPid))
	}
	if c := ident.Cgroup; c.ContainerID != "" {
		fields = append(fields, zap.String("container.id", c.ContainerID))
		if c.PodUID != "" {
			fields = append(fields, zap.String("k8s.pod.uid", c.PodUID))
		}
	}
	p.log.Info("Sampling process", fields...)
	return nil
}

// readContexts stores the span contexts read at sample time until their
// samples are joined.
func (p *Profiler) readContexts() {
	defer p.wg.Done()
	if err := p.plan.contexts.Read(p.contexts.add); err != nil {
		p.log.Error("Reading span contexts failed; samples are joined by thread and time", zap.Error(err))
	}
}

func (p *Profiler) readLoop() {
	defer p.wg.Done()
	if err := p.src.Read(p.handle); err != nil {
		p.log.Error("Reading perf rings failed; sampling stopped", zap.Error(err))
	}
}

// discoverLoop runs discovery every DiscoveryInterval, and at once when a
// target's pid was reused: the new process is not sampled until then.
func (p *Profiler) discoverLoop() {
	defer p.wg.Done()
	every := p.opts.DiscoveryInterval
	t := time.NewTimer(clock.UntilBeat(every, every))
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			t.Reset(clock.UntilBeat(every, every))
		case <-p.rediscover:
		}
		p.discover()
	}
}

// discoverGap is the least time between two discoveries that the exec
// watcher asks for: every start, end and exec of a process or thread of
// the host is a record, and a host that starts thousands a second must
// not have discovery run for each.
const discoverGap = 100 * time.Millisecond

// watchStarts asks for discovery when the exec watcher sees processes
// start or exec (threads starting and ending, which wake it too, are only
// read), at most every discoverGap, so that a new process of a target
// executable is sampled from its first milliseconds rather than from the
// next scan: a process living a second lost half of it on average. It
// returns when the watcher is closed.
func (p *Profiler) watchStarts(pf procfs) {
	defer p.wg.Done()
	for {
		// No timeout: Close ends the wait.
		seen, err := pf.waitStart(0)
		if err != nil {
			return
		}
		select {
		case <-p.stop:
			return
		default:
		}
		if !seen {
			continue
		}
		if pf.pollStarts() {
			select {
			case p.rediscover <- struct{}{}:
			default:
			}
		}
		select {
		case <-p.stop:
			return
		case <-time.After(discoverGap):
		}
	}
}

// discover releases targets that exited and attaches new processes of the
// target executables.
func (p *Profiler) discover() {
	flushed := false
	for _, proc := range p.liveProcesses() {
		if !p.procs.Alive(proc) {
			// The scheduler program's last groups of the process are
			// in its ring: take them while the process is live.
			if p.plan.labels != nil && !flushed {
				p.plan.labels.flush()
				flushed = true
			}
			p.src.Detach(proc.Pid)
			if c := p.plan.contexts; c != nil {
				c.Detach(proc.Pid)
			}
			if p.releaseProcess(proc.Pid) {
				p.log.Info("Released process", zap.Int("pid", proc.Pid), zap.String("reason", "exited"))
			}
			if now, err := p.procs.Read(proc.Pid); err == nil && now.StartTime != proc.StartTime {
				p.reusedBy(proc.Pid, now.StartTime)
			}
		}
	}
	if p.opts.discovers() {
		procs, err := p.procs.Scan(p.opts.Executables, p.opts.cgroups())
		if err != nil {
			p.log.Warn("Scanning for target processes failed", zap.Error(err))
		}
		for _, proc := range procs {
			if p.src.Attached(proc.Pid) {
				continue
			}
			if err := p.attach(proc); err != nil {
				p.log.Warn("Cannot attach to process", zap.Int("pid", proc.Pid), zap.Error(err))
			}
		}
	}
	p.src.Refresh()
}

// symbolWorker reads the memory maps of processes that mapped new code, so
// that a process that exits soon after a dlopen still resolves, and the
// unwind tables of processes attached or exec'd, whose samples wait for
// them (see pending.go).
func (p *Profiler) symbolWorker() {
	defer p.wg.Done()
	for {
		select {
		case <-p.stop:
			return
		case <-p.syms.wake:
			p.readTables(p.dirtyProcesses)
		case done := <-p.symNow:
			p.readTables(p.dirtyProcesses)
			close(done)
		}
	}
}

// jitPollInterval is how often the perf maps of the targets are read. A
// sample is named by the map as it stood when the sample was read; a line
// written after the last poll names the code compiled just before it (see
// symbolize.PerfMap.Lookup), so the interval bounds how long a reused
// address can keep its old name. Without a perf map among the targets,
// they are looked for once a second.
const (
	jitPollInterval = 20 * time.Millisecond
	jitLookInterval = time.Second
)

// jitPoller keeps the perf maps of the targets current.
func (p *Profiler) jitPoller() {
	defer p.wg.Done()
	t := time.NewTimer(clock.UntilBeat(jitPollInterval, jitPollInterval))
	defer t.Stop()
	prompt := false
	for {
		select {
		case <-p.stop:
			return
		case done := <-p.jitNow:
			// A report: what the maps gained since the last poll names the
			// code compiled just before its last samples.
			p.pollFound()
			close(done)
		case <-t.C:
			found := p.pollJIT()
			if found {
				t.Reset(clock.UntilBeat(jitPollInterval, jitPollInterval))
			} else {
				t.Reset(clock.UntilBeat(jitLookInterval, jitLookInterval))
			}
			// A sample of JIT code is named by the map as it stood when
			// it was taken, told from the changes the poller saw
			// (maxJITBumps): its records must be read promptly.
			want := found
			if s, ok := p.src.(interface{ SetPrompt(bool) }); ok && want != prompt {
				s.SetPrompt(want)
				prompt = want
			}
		}
	}
}

// jvmWorker asks JVMs for their perf maps as they are attached and as
// reports find frames or threads their maps do not name (requestJVM): off
// the paths that attach and report, which must not wait for a JVM.
func (p *Profiler) jvmWorker() {
	defer p.wg.Done()
	for {
		select {
		case <-p.stop:
			return
		case a := <-p.jvmQueue:
			p.askJVM(a.st, a.why)
		}
	}
}

// Flush delivers when the samples waiting for the window reach
// MaxBufferedSamples: the caller should Take early.
func (p *Profiler) Flush() <-chan struct{} { return p.flush }

// Take returns, per process, the samples that the correlation window has
// passed, joined and symbolized. With final it takes everything, joined
// with the spans at hand.
func (p *Profiler) Take(final bool) []Snapshot {
	now := clock.Monotonic()
	p.clock.Refresh()
	watermark := uint64(math.MaxUint64)
	if !final {
		watermark = 0
		if w := uint64(p.opts.Window); now > w {
			watermark = now - w
		}
	}
	if p.plan.labels != nil {
		p.plan.labels.flush() // the records of the samples about to be joined
	}
	p.catchUp()
	return p.take(now, watermark, final)
}

// stopWorkers stops sampling and every goroutine of the profiler.
func (p *Profiler) stopWorkers() error {
	close(p.stop)
	err := p.src.Close()
	if c := p.plan.contexts; c != nil {
		err = errors.Join(err, c.Close())
	}
	if pf, ok := p.plan.procs.(procfs); ok {
		// Closing the watcher ends watchStarts' wait.
		err = errors.Join(err, pf.close())
	}
	p.wg.Wait()
	if p.plan.labels != nil {
		err = errors.Join(err, p.plan.labels.release())
	}
	return err
}

// settle brings the facts of the processes up to date for the last
// report, with the workers that keep them stopped: the names of the
// threads seen, the perf maps as they stand, the memory maps and unwind
// tables of the processes that mapped code since they were read, and the
// process context of those never read.
func (p *Profiler) settle() {
	p.readThreadNames()
	p.mu.Lock()
	var sts []*procState
	for _, st := range p.all {
		sts = append(sts, st)
	}
	p.mu.Unlock()
	p.pollFound()
	p.readTables(func() []*procState {
		p.mu.Lock()
		defer p.mu.Unlock()
		var dirty []*procState
		for _, st := range sts {
			if st.mapsDirty {
				st.mapsDirty = false
				dirty = append(dirty, st)
			}
		}
		return dirty
	})
	p.readProcessContexts(true)
}

// Stats are cumulative counters of a Profiler, for telemetry.
type Stats struct {
	Processes int // attached now
	// ProcessesHeld counts the process images the engine holds state
	// for: those attached, and those gone whose samples are not yet
	// taken. The state of an exited process (its threads, batch, perf
	// map, symbols, unwinder) is freed with it.
	ProcessesHeld int
	Samples       int64
	// BufferFull counts samples dropped at twice MaxBufferedSamples.
	BufferFull int64
	// PidReused counts samples dropped because a process was forked with
	// the pid of a target that exited, and was not attached yet: they
	// are not the target's.
	PidReused int64
	Execs     int64
	// UnnamedThreads counts threads left unnamed because maxToName
	// others waited to be named.
	UnnamedThreads int64
	Source         perf.Stats // records read, lost and corrupt
	SpansHeld      int        // spans in the join index now
	Spans          SpanCounts
	Joins          JoinCounts
	Symbols        symbolize.Stats
	JIT            JITStats
	EBPF           EBPFStats
	OffCPU         OffCPUStats
	Unwind         UnwindStats
	// Discovery counts the scans for target processes (with
	// Options.Executables or cgroups): how many read every process, and
	// the processes read.
	Discovery perf.ScanStats
	// Limits counts the bounds targets' data reached, by kind.
	Limits limits.Counts
}

// OffCPUStats say how context switches are captured, and what became of
// the scheduler program's groups.
type OffCPUStats struct {
	// Kernel: by the eBPF scheduler program; else Perf: by perf's
	// context-switch events; else off, and Reason says why.
	Kernel, Perf bool
	Reason       error
	// Samples counts the off-CPU samples made of the program's groups;
	// Uncaptured those of them whose switch-out was not captured (their
	// stack is the thread's latest captured, their span joined by thread
	// and time); Unattached the groups of processes no longer sampled,
	// dropped.
	Samples, Uncaptured, Unattached int64
}

// EBPFStats say whether the eBPF programs run, and what they counted.
type EBPFStats struct {
	// Active: the spanctx programs are attached to the sampling and
	// context-switch events. Otherwise Reason says why not.
	Active bool
	// PerCPU: with Active, targets are sampled by per-CPU events whose
	// samples of other processes the programs drop in the kernel, even
	// in ScopeProcess: per-thread events are not switched in and out.
	PerCPU  bool
	Reason  error
	Program bpf.Stats
}

// Stats returns the counters.
func (p *Profiler) Stats() Stats {
	t := p.tel
	s := Stats{Processes: int(t.Load(cProcesses)), Samples: t.Load(cSamples), BufferFull: t.Load(CountBufferFull),
		PidReused: t.Load(cPidReused), UnnamedThreads: t.Load(cUnnamedThreads)}
	s.OffCPU = OffCPUStats{Kernel: p.plan.schedKernel, Perf: p.sched != nil, Reason: p.plan.schedErr,
		Samples: t.Load(cOffCPU) + t.Load(cOffCPUEarlier), Uncaptured: t.Load(cOffCPUEarlier), Unattached: t.Load(cOffCPUUnattach)}
	s.Spans = SpanCounts{Indexed: t.Load(cSpansIndexed), Late: t.Load(cSpansLate), OverLimit: t.Load(cSpansOverLimit),
		Invalid: t.Load(cSpansInvalid), Future: t.Load(cSpansFuture), Unmapped: t.Load(cSpansUnmapped), Unmatched: t.Load(cSpansUnmatched)}
	s.Joins = JoinCounts{NoSpan: t.Load(cJoinNoSpan), Ambiguous: t.Load(cJoinAmbiguous), Early: t.Load(CountJoinEarly), OtherProcess: t.Load(cJoinOther)}
	for src, d := range cLinked {
		s.Joins.Read[src] = t.Load(d)
		s.Joins.Span += s.Joins.Read[src]
	}
	s.JIT = JITStats{Older: t.Load(cJITOlder), Later: t.Load(cJITLater), Unnamed: t.Load(cJITUnnamed)}
	s.JIT.Frames = t.Load(cJITNewest) + s.JIT.Older + s.JIT.Later + s.JIT.Unnamed
	p.mu.Lock()
	s.Execs, s.ProcessesHeld = p.counts.execs, len(p.all)
	s.Unwind = p.counts.unwind
	s.Unwind.Mode = p.opts.Unwind
	if p.opts.Unwind != UnwindFramePointer {
		s.Unwind.StackBytes = p.plan.perf.StackUser
	}
	p.mu.Unlock()
	p.spansMu.Lock()
	s.SpansHeld = p.spans.Len()
	p.spansMu.Unlock()
	s.Source = p.src.Stats()
	s.Symbols = p.syms.stats()
	if pf, ok := p.plan.procs.(procfs); ok {
		s.Discovery = pf.stats()
	}
	s.Limits = p.opts.Limits.Counts()
	s.EBPF.Reason = p.plan.ebpfErr
	if p.plan.labels != nil {
		s.EBPF.Active = true
		s.EBPF.PerCPU = p.plan.perf.Scope == perf.ScopeSystem
		s.EBPF.Program = p.plan.labels.stats()
	}
	return s
}

// Close stops sampling and returns everything still buffered, joined
// with the spans at hand and symbolized, then releases the symbol cache.
// Later calls return nothing.
func (p *Profiler) Close() ([]Snapshot, error) {
	var snaps []Snapshot
	var err error
	p.closeOnce.Do(func() {
		err = p.stopWorkers()
		p.mu.Lock()
		for pid, st := range p.live {
			st.gone = true
			delete(p.live, pid)
		}
		p.tel.Store(cProcesses, 0)
		p.mu.Unlock()
		p.settle()
		snaps = p.Take(true)
		err = errors.Join(err, p.syms.close())
	})
	return snaps, err
}
