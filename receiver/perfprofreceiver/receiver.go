package perfprofreceiver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/symbolize"
	"github.com/perfprof/perfprof/internal/tidmap"
	"github.com/perfprof/perfprof/receiver/perfprofreceiver/internal/metadata"
)

// perfprofReceiver is one instance per component ID, shared by its signals.
type perfprofReceiver struct {
	cfg        *Config
	set        receiver.Settings
	log        *zap.Logger
	profiles   xconsumer.Profiles
	traces     consumer.Traces
	telemetry  *metadata.TelemetryBuilder
	onShutdown func()

	session *perf.Session
	symbols *symbolize.Cache
	kernel  *symbolize.Kernel
	clock   *clock.Mapper

	// mu guards procs and buffered: the read loop holds it per record, the
	// report loop to take samples out and join them.
	mu       sync.Mutex
	procs    map[int]*procState
	buffered int
	windowA  uint64

	// spansMu guards the span index and the span resources. It is apart
	// from mu so that span ingest never waits for the read loop (which
	// may spend a while symbolizing a binary for the first time); when
	// both are held, mu is taken first.
	spansMu     sync.Mutex
	spans       *tidmap.Map
	watermark   uint64             // samples before it have been emitted
	resources   []pcommon.Resource // span resources, by handle
	resourceIdx map[string]int32
	pidResource map[int]int32 // resource handle by the process.pid spans named

	// flush asks the report loop for an early report when the buffer
	// reaches its bound.
	flush chan struct{}
	// sched is the context-switch accounting, nil without sched capture.
	sched *schedState

	grpcServer         *grpc.Server
	httpServer         *http.Server
	grpcAddr, httpAddr string // where they listen, once started
	serveWG            sync.WaitGroup
	// Counted under mu and added to the telemetry by countLosses, so that
	// the per-sample path does not call into the metrics SDK.
	newSamples, newOverflow int64

	startOnce sync.Once
	stopOnce  sync.Once
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	started   bool

	// chainBuf holds a callchain with a recovered leaf caller, reused
	// from sample to sample (guarded by mu).
	chainBuf []uint64

	lossMu                sync.Mutex // countLosses runs from the discovery and report loops
	lastLost, lastCorrupt uint64
}

// procState is one target process.
type procState struct {
	info    perf.Process
	sym     *symbolize.Process // nil when its maps could not be read
	threads map[uint32]string
	addrs   map[uint64]*loc // resolved addresses, shared by the stacks of all batches
	batch   *batch
	gone    bool // exited or detached; dropped after its last batch is sent
	// resource is the handle of the span resource of the process, -1 until
	// its spans are seen, so that every profile of it carries service.name,
	// also when none of a report's samples fell in a span.
	resource int32
}

// maxAddrCache bounds the per-process address cache; it is cleared when
// full (the binary-level cache in symbolize keeps the expensive part).
const maxAddrCache = 1 << 17

func newReceiver(cfg *Config, set receiver.Settings, onShutdown func()) (*perfprofReceiver, error) {
	tb, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, fmt.Errorf("create perfprof telemetry: %w", err)
	}
	return &perfprofReceiver{
		cfg:         cfg,
		set:         set,
		log:         set.Logger,
		telemetry:   tb,
		onShutdown:  onShutdown,
		procs:       map[int]*procState{},
		spans:       tidmap.New(tidmap.Options{MaxSpans: cfg.Correlation.MaxSpans}),
		resourceIdx: map[string]int32{},
		pidResource: map[int]int32{},
		flush:       make(chan struct{}, 1),
		clock:       clock.NewMapper(),
	}, nil
}

// Start opens the perf session and attaches the targets that exist now. It
// fails, and with it the collector, when perf events are denied or a
// configured pid does not exist.
func (r *perfprofReceiver) Start(ctx context.Context, host component.Host) error {
	var err error
	r.startOnce.Do(func() { err = r.start(ctx, host) })
	return err
}

// tracesConsumer is the traces pipeline the spans go on to, nil if none.
func (r *perfprofReceiver) tracesConsumer() consumer.Traces { return r.traces }

func (r *perfprofReceiver) start(ctx context.Context, host component.Host) (err error) {
	scope := perf.ScopeProcess
	if r.cfg.Scope == scopeSystem {
		scope = perf.ScopeSystem
	}
	r.session, err = perf.Open(perf.Options{
		Scope:        scope,
		Frequency:    r.cfg.Frequency,
		KernelStacks: r.cfg.KernelStacks,
		RingPages:    r.cfg.RingPages,
		Sched:        r.cfg.Sched.Enabled,
		StackUser:    r.stackUser(),
	})
	if err != nil {
		return fmt.Errorf("perfprof: %w%s", err, r.schedHint(err))
	}
	defer func() {
		if err != nil {
			r.session.Close()
			r.session = nil
		}
	}()
	if r.cfg.Sched.Enabled {
		r.sched = newSchedState(uint64(r.cfg.Sched.OffCPUInterval))
	}
	r.symbols = symbolize.NewCache(symbolize.Options{UnwindTables: r.cfg.RecoverLeafCaller})
	if r.cfg.KernelStacks {
		k, kerr := symbolize.LoadKernel()
		if errors.Is(kerr, symbolize.ErrKernelAddressesHidden) {
			r.log.Warn("Kernel symbol addresses are hidden (kernel.kptr_restrict); kernel frames stay unnamed. Run as root or set kernel.kptr_restrict=0.")
		} else if kerr != nil {
			r.log.Warn("Cannot read kernel symbols; kernel frames stay unnamed", zap.Error(kerr))
		}
		r.kernel = k
	}
	r.clock.Refresh()
	r.windowA = clock.Monotonic()

	for _, pid := range r.cfg.Targets.Pids {
		p, err := perf.ReadProcess(pid)
		if err != nil {
			return fmt.Errorf("perfprof: target pid %d: %w", pid, err)
		}
		if err := r.attach(p); err != nil {
			return fmt.Errorf("perfprof: %w", err)
		}
	}
	if len(r.cfg.Targets.Executables) > 0 {
		procs, err := perf.Scan(r.cfg.Targets.Executables)
		if err != nil {
			return fmt.Errorf("perfprof: %w", err)
		}
		for _, p := range procs {
			if err := r.attach(p); err != nil {
				if errors.Is(err, perf.ErrPermission) {
					return fmt.Errorf("perfprof: %w", err)
				}
				r.log.Warn("Cannot attach to process", zap.Int("pid", p.Pid), zap.Error(err))
			}
		}
	}

	if err := r.startServers(ctx, host); err != nil {
		r.stopServers(ctx)
		return fmt.Errorf("perfprof: %w", err)
	}
	attached := len(r.procs)
	loopCtx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.started = true
	r.wg.Add(3)
	go func() {
		defer r.wg.Done()
		if err := r.session.Read(r.handle); err != nil {
			r.log.Error("Reading perf rings failed; sampling stopped", zap.Error(err))
		}
	}()
	go func() {
		defer r.wg.Done()
		r.every(loopCtx, r.cfg.DiscoveryInterval, nil, r.discover)
	}()
	go func() {
		defer r.wg.Done()
		r.every(loopCtx, r.cfg.ReportInterval, r.flush, func() { r.report(loopCtx, false) })
	}()
	r.log.Info("perfprof receiver started",
		zap.String("scope", r.cfg.Scope), zap.Uint64("frequency_hz", r.cfg.Frequency),
		zap.Int("processes", attached))
	return nil
}

// schedHint adds, to a permission error while sched capture is on, that
// capture is what needs the privilege: the context-switch event samples in
// the kernel, which kernel.perf_event_paranoid=2 forbids without
// CAP_PERFMON, where on-CPU sampling of one's own processes is allowed.
func (r *perfprofReceiver) schedHint(err error) string {
	if !r.cfg.Sched.Enabled || !errors.Is(err, perf.ErrPermission) {
		return ""
	}
	return "; context-switch capture (sched.enabled) needs CAP_PERFMON or kernel.perf_event_paranoid <= 1: grant it, or set sched.enabled: false to profile on-CPU only"
}

// every runs fn every d, and also whenever kick delivers, until ctx ends.
func (r *perfprofReceiver) every(ctx context.Context, d time.Duration, kick <-chan struct{}, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		case <-kick:
			fn()
		}
	}
}

// attach starts sampling p. The process state exists before its first
// record can arrive.
func (r *perfprofReceiver) attach(p perf.Process) error {
	st := &procState{info: p, threads: map[uint32]string{}, addrs: map[uint64]*loc{}, batch: newBatch(), resource: -1}
	r.mu.Lock()
	if old, ok := r.procs[p.Pid]; ok && !old.gone {
		r.mu.Unlock()
		return nil
	}
	// The symbol cache is used by one goroutine at a time: under mu.
	if sp, err := r.symbols.Process(p.Pid); err == nil {
		st.sym = sp
	} else {
		r.log.Debug("Cannot read memory map; stacks stay unsymbolized", zap.Int("pid", p.Pid), zap.Error(err))
	}
	// A previous process with this pid may still have a batch to send: keep
	// it under its own key until the report.
	if old, ok := r.procs[p.Pid]; ok {
		r.procs[-p.Pid-1] = old
	}
	r.procs[p.Pid] = st
	r.mu.Unlock()
	if err := r.session.Attach(p.Pid); err != nil {
		r.mu.Lock()
		delete(r.procs, p.Pid)
		r.mu.Unlock()
		return fmt.Errorf("attach to pid %d (%s): %w%s", p.Pid, p.Comm, err, r.schedHint(err))
	}
	r.telemetry.ReceiverPerfprofProcesses.Add(context.Background(), 1)
	r.log.Info("Sampling process", zap.Int("pid", p.Pid), zap.String("executable", p.Exe), zap.String("comm", p.Comm))
	return nil
}

// discover releases targets that exited and attaches new processes of the
// target executables.
func (r *perfprofReceiver) discover() {
	r.mu.Lock()
	var live []perf.Process
	for pid, st := range r.procs {
		if pid > 0 && !st.gone {
			live = append(live, st.info)
		}
	}
	r.mu.Unlock()
	for _, p := range live {
		if !p.Alive() {
			r.release(p.Pid, "exited")
		}
	}
	if len(r.cfg.Targets.Executables) > 0 {
		procs, err := perf.Scan(r.cfg.Targets.Executables)
		if err != nil {
			r.log.Warn("Scanning for target processes failed", zap.Error(err))
		}
		for _, p := range procs {
			if r.session.Attached(p.Pid) {
				continue
			}
			if err := r.attach(p); err != nil {
				r.log.Warn("Cannot attach to process", zap.Int("pid", p.Pid), zap.Error(err))
			}
		}
	}
	r.session.Refresh()
	r.countLosses()
}

func (r *perfprofReceiver) release(pid int, why string) {
	r.session.Detach(pid)
	r.mu.Lock()
	if st, ok := r.procs[pid]; ok && !st.gone {
		st.gone = true
		r.telemetry.ReceiverPerfprofProcesses.Add(context.Background(), -1)
	}
	r.mu.Unlock()
	r.log.Info("Released process", zap.Int("pid", pid), zap.String("reason", why))
}

// countLosses moves the counters of the read loop and of the perf session
// into the collector's telemetry and logs losses.
func (r *perfprofReceiver) countLosses() {
	r.lossMu.Lock()
	defer r.lossMu.Unlock()
	st := r.session.Stats()
	ctx := context.Background()
	r.mu.Lock()
	samples, overflow := r.newSamples, r.newOverflow
	r.newSamples, r.newOverflow = 0, 0
	r.mu.Unlock()
	if samples > 0 {
		r.telemetry.ReceiverPerfprofSamples.Add(ctx, samples)
	}
	if overflow > 0 {
		r.telemetry.ReceiverPerfprofDroppedSamples.Add(ctx, overflow, metric.WithAttributes(attribute.String("reason", "buffer_full")))
		r.log.Warn("Samples dropped: twice correlation.max_buffered_samples were waiting for their spans",
			zap.Int64("dropped", overflow), zap.Int("max_buffered_samples", r.cfg.Correlation.MaxBufferedSamples))
	}
	if d := st.Lost - r.lastLost; d > 0 {
		r.telemetry.ReceiverPerfprofLostRecords.Add(ctx, int64(d))
		r.log.Warn("The kernel dropped perf records: a ring was full. Raise ring_pages or lower frequency.",
			zap.Uint64("lost", d), zap.Uint64("lost_total", st.Lost))
	}
	if d := st.Corrupt - r.lastCorrupt; d > 0 {
		r.telemetry.ReceiverPerfprofDroppedSamples.Add(ctx, int64(d), metric.WithAttributes(attribute.String("reason", "corrupt")))
	}
	r.lastLost, r.lastCorrupt = st.Lost, st.Corrupt
}

// handle runs on the read goroutine for every record of a target.
func (r *perfprofReceiver) handle(rec *perf.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch rec.Type {
	case perf.RecordSample:
		s := &rec.Sample
		st, ok := r.procs[int(s.Pid)]
		if !ok || len(s.Callchain) == 0 {
			return
		}
		if s.Kind == perf.EventSwitch {
			if r.sched != nil {
				r.handleSched(rec, st)
			}
			return
		}
		if max := r.cfg.Correlation.MaxBufferedSamples; r.buffered >= max {
			// Ask for an early report, which emits the oldest samples
			// without waiting for their spans; drop only past twice the
			// bound, when reports cannot keep up.
			select {
			case r.flush <- struct{}{}:
			default:
			}
			if r.buffered >= 2*max {
				r.newOverflow++
				return
			}
		}
		if _, ok := st.threads[s.Tid]; !ok {
			st.threads[s.Tid] = perf.ThreadName(int(s.Pid), int(s.Tid))
		}
		chain := s.Callchain
		if r.cfg.RecoverLeafCaller {
			chain = r.recoverLeafCaller(s, st)
		}
		idx := st.batch.internStack(chain, st.resolve(r))
		st.batch.samples = append(st.batch.samples, rawSample{time: s.Time, tid: s.Tid, cpu: s.CPU, stack: idx})
		r.buffered++
		r.newSamples++
		if r.sched != nil {
			r.handleSched(rec, st)
		}
	case perf.RecordSwitch, perf.RecordSwitchCPU:
		if st, ok := r.procs[int(rec.ID.Pid)]; ok && r.sched != nil {
			r.handleSched(rec, st)
		}
	case perf.RecordExit:
		if st, ok := r.procs[int(rec.Task.Pid)]; ok && r.sched != nil {
			r.handleSched(rec, st)
		}
	case perf.RecordComm:
		if st, ok := r.procs[int(rec.Comm.Pid)]; ok {
			st.threads[rec.Comm.Tid] = string(rec.Comm.Comm)
			if rec.Misc&perf.MiscCommExec != 0 && rec.Comm.Pid == rec.Comm.Tid {
				// A new program: its memory map is new too.
				st.info.Comm = string(rec.Comm.Comm)
				if p, err := perf.ReadProcess(int(rec.Comm.Pid)); err == nil {
					st.info.Exe = p.Exe
				}
				clear(st.addrs)
				if st.sym != nil {
					_ = st.sym.Refresh()
				}
			}
		}
	case perf.RecordMmap2:
		// New code mapped (dlopen, JIT): resolve it from a fresh map.
		if st, ok := r.procs[int(rec.Mmap2.Pid)]; ok && st.sym != nil && rec.Mmap2.Prot&0x4 != 0 {
			_ = st.sym.Refresh()
		}
	}
}

// resolve returns the function that turns a raw callchain of st into
// locations. Every address but the leaf is a return address: it is looked
// up one byte earlier, inside the call instruction, so that the caller's
// line is the line of the call.
func (st *procState) resolve(r *perfprofReceiver) func([]uint64) []*loc {
	return func(chain []uint64) []*loc {
		locs := make([]*loc, 0, len(chain))
		first := true
		perf.Frames(chain, func(addr uint64, kernel bool) {
			if l, ok := st.addrs[addr]; ok {
				locs = append(locs, l)
				first = false
				return
			}
			pc := addr
			if !first {
				pc--
			}
			first = false
			l := &loc{addr: addr, kernel: kernel}
			switch {
			case kernel:
				if r.kernel != nil {
					if f, ok := r.kernel.Lookup(pc); ok {
						l.frames = []symbolize.Frame{f}
					}
				}
				if len(l.frames) == 0 {
					l.frames = []symbolize.Frame{{Function: "[kernel]", SystemName: "[kernel]"}}
				}
			case st.sym != nil && !r.cfg.Symbolize:
				l.mapping = st.sym.MappingOf(pc)
			case st.sym != nil:
				res := st.sym.Lookup(pc)
				l.mapping, l.frames = res.Mapping, res.Frames
			}
			if len(st.addrs) >= maxAddrCache {
				clear(st.addrs)
			}
			st.addrs[addr] = l
			locs = append(locs, l)
		})
		return locs
	}
}

// report emits the samples that the correlation window has passed, joined
// to the spans that covered them. Younger samples wait for the next report,
// unless the buffer is over its bound: then the oldest go out early,
// unjoined. final (at shutdown) emits everything with the spans at hand.
func (r *perfprofReceiver) report(ctx context.Context, final bool) {
	now := clock.Monotonic()
	r.clock.Refresh()
	watermark := uint64(math.MaxUint64)
	if !final {
		watermark = 0
		if w := uint64(r.cfg.Correlation.Window); now > w {
			watermark = now - w
		}
	}
	var snaps []snapshot
	var jc joinCounts
	r.mu.Lock()
	r.spansMu.Lock()
	cut := watermark
	if max := r.cfg.Correlation.MaxBufferedSamples; !final && r.buffered > max {
		cut = r.earlyCut(watermark, max/2)
	}
	windowB := min(cut, now)
	remaining := 0
	if r.sched != nil {
		r.drainSched(now - min(now, reorderDelay))
		if final {
			r.drainSched(math.MaxUint64)
		}
	}
	for key, st := range r.procs {
		old := st.batch
		out, keep, moved := old.takeBefore(cut)
		st.batch = keep
		if r.sched != nil && moved != nil {
			r.sched.rebase(old, keep, moved)
		}
		remaining += len(keep.samples)
		if out != nil {
			out.threads = make(map[uint32]string)
			for _, s := range out.samples {
				if _, ok := out.threads[s.tid]; !ok {
					out.threads[s.tid] = st.threads[s.tid]
				}
			}
			snap := snapshot{pid: st.info.Pid, exe: st.info.Exe, comm: st.info.Comm, batch: out, windowA: r.windowA, windowB: windowB}
			snap.joins, snap.resource = r.join(st, out, watermark, &jc)
			snaps = append(snaps, snap)
		}
		if st.gone && len(st.batch.samples) == 0 {
			delete(r.procs, key)
		}
	}
	r.buffered = remaining
	r.windowA = windowB
	var forgotten, unmatched int
	if !final {
		forgotten, unmatched = r.spans.Forget(watermark)
		r.watermark = watermark
	}
	r.spansMu.Unlock()
	r.mu.Unlock()
	r.countLosses()
	r.countJoins(jc, unmatched)
	if forgotten > 0 {
		r.log.Debug("Spans behind the watermark forgotten", zap.Int("spans", forgotten), zap.Int("without_samples", unmatched))
	}
	if len(snaps) == 0 || r.profiles == nil {
		return
	}
	pd, n := buildProfiles(snaps, profileParams{frequency: r.cfg.Frequency, offCPUInterval: uint64(r.cfg.Sched.OffCPUInterval), toUnix: r.clock.Unix})
	r.log.Info("Emitting profiles",
		zap.Int("processes", len(snaps)), zap.Int("samples", n),
		zap.Int64("joined_to_spans", jc.span), zap.Int64("without_span", jc.noSpan), zap.Int64("emitted_early", jc.early))
	if err := r.profiles.ConsumeProfiles(ctx, pd); err != nil {
		r.telemetry.ReceiverPerfprofDroppedSamples.Add(context.Background(), int64(n), metric.WithAttributes(attribute.String("reason", "consumer_error")))
		r.log.Error("Profiles pipeline refused a report; its samples are dropped", zap.Int("samples", n), zap.Error(err))
	}
}

// earlyCut returns the time before which samples must go out now so that at
// most keep samples younger than the watermark stay buffered. Must be
// called with r.mu held.
func (r *perfprofReceiver) earlyCut(watermark uint64, keep int) uint64 {
	var times []uint64
	for _, st := range r.procs {
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

// joinCounts are the outcomes of one report's join.
type joinCounts struct{ span, noSpan, early int64 }

// join looks up, for every sample of b older than the watermark, the span
// that ran on its thread at its time. It returns the join of each sample
// and the span resource of the process: the one most of the joined samples
// share, else the one its spans named it by (process.pid) or last had.
// Must be called with r.mu and r.spansMu held.
func (r *perfprofReceiver) join(st *procState, b *batch, watermark uint64, c *joinCounts) ([]joinInfo, pcommon.Resource) {
	joins := make([]joinInfo, len(b.samples))
	votes := map[int32]int{}
	for i, s := range b.samples {
		j := &joins[i]
		j.worker = -1
		if w, ok := r.spans.Worker(s.tid); ok {
			j.worker = w
		}
		if s.time >= watermark {
			c.early++
			continue
		}
		sp := r.spans.Lookup(s.tid, s.time)
		if sp == nil {
			c.noSpan++
			continue
		}
		c.span++
		j.linked = true
		j.traceID, j.spanID = sp.TraceID, sp.SpanID
		if sp.WorkerID >= 0 {
			j.worker = sp.WorkerID
		}
		j.root = r.spans.LocalRoot(sp).Name
		if sp.Resource >= 0 {
			votes[sp.Resource]++
		}
	}
	best, bestN := int32(-1), 0
	for h, n := range votes {
		if n > bestN || (n == bestN && h < best) {
			best, bestN = h, n
		}
	}
	if best >= 0 {
		st.resource = best
	} else if h, ok := r.pidResource[st.info.Pid]; ok {
		st.resource = h
	}
	if st.resource < 0 || int(st.resource) >= len(r.resources) {
		return joins, pcommon.Resource{}
	}
	return joins, r.resources[st.resource]
}

func (r *perfprofReceiver) countJoins(c joinCounts, unmatched int) {
	ctx := context.Background()
	for _, o := range []struct {
		n    int64
		join string
	}{{c.span, "span"}, {c.noSpan, "no_span"}, {c.early, "early"}} {
		if o.n > 0 {
			r.telemetry.ReceiverPerfprofEmittedSamples.Add(ctx, o.n, metric.WithAttributes(attribute.String("join", o.join)))
		}
	}
	if unmatched > 0 {
		r.telemetry.ReceiverPerfprofSpansUnmatched.Add(ctx, int64(unmatched))
	}
	if c.early > 0 {
		r.log.Warn("Samples emitted before their spans could arrive: correlation.max_buffered_samples reached",
			zap.Int64("samples", c.early), zap.Int("max_buffered_samples", r.cfg.Correlation.MaxBufferedSamples))
	}
}

// Shutdown stops the OTLP servers and sampling, sends what is buffered
// (joined with the spans at hand) and releases everything.
func (r *perfprofReceiver) Shutdown(ctx context.Context) error {
	r.stopOnce.Do(func() {
		if r.onShutdown != nil {
			r.onShutdown()
		}
		if !r.started {
			if r.session != nil {
				r.session.Close()
			}
			r.telemetry.Shutdown()
			return
		}
		r.stopServers(ctx)
		r.cancel()
		r.session.Close()
		r.wg.Wait()
		r.mu.Lock()
		for _, st := range r.procs {
			if !st.gone {
				st.gone = true
				r.telemetry.ReceiverPerfprofProcesses.Add(ctx, -1)
			}
		}
		r.mu.Unlock()
		r.report(ctx, true)
		_ = r.symbols.Close()
		r.telemetry.Shutdown()
	})
	return nil
}
