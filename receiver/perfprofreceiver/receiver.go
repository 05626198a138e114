package perfprofreceiver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/receiverhelper"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/limits"
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/internal/unwind"
	"github.com/perfprof/perfprof/pkg/otlpserver"
	"github.com/perfprof/perfprof/receiver/perfprofreceiver/internal/metadata"
	"github.com/perfprof/perfprof/receiver/perfprofreceiver/internal/pdataprofiles"
	"github.com/perfprof/perfprof/receiver/perfprofreceiver/internal/spanconv"
)

// perfprofReceiver is one instance per component ID, shared by its signals:
// the engine, the OTLP servers that feed it spans, and the loop that turns
// its snapshots into profiles.
type perfprofReceiver struct {
	ebpfActive  bool // counted in receiver_perfprof_ebpf_programs{program=span_reader}
	schedActive bool // and {program=scheduler}
	// stopSpansOnce and flushOnce: each signal's part of the shutdown,
	// done when that signal stops (see flush), or by the last.
	stopSpansOnce, flushOnce sync.Once
	cfg                      *Config
	set                      receiver.Settings
	log                      *zap.Logger
	profiles                 xconsumer.Profiles
	traces                   consumer.Traces
	telemetry                *metadata.TelemetryBuilder

	prof *profiler.Profiler
	// source and procs replace the perf session and /proc in tests.
	source profiler.Records
	procs  profiler.Procs

	// spanConv turns OTLP spans into the engine's, and holds the span
	// resources, which profiles name by handle.
	spanConv *spanconv.Converter

	server *otlpserver.Server
	obs    map[string]*receiverhelper.ObsReport // by transport

	cancel context.CancelFunc
	wg     sync.WaitGroup

	statsMu sync.Mutex
	last    profiler.Stats // already turned into telemetry
}

func newReceiver(cfg *Config, set receiver.Settings) (*perfprofReceiver, error) {
	tb, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, fmt.Errorf("create perfprof telemetry: %w", err)
	}
	return &perfprofReceiver{
		cfg:       cfg,
		set:       set,
		log:       set.Logger,
		telemetry: tb,
		spanConv:  spanconv.New(cfg.Correlation.ThreadIDAttribute, cfg.Correlation.WorkerIDAttribute),
	}, nil
}

// start opens the engine, which attaches the targets that exist now, and
// the OTLP servers. It fails, and with it the collector, when perf events
// are denied or a configured pid does not exist.
func (r *perfprofReceiver) start(ctx context.Context, host component.Host) error {
	opts := r.cfg.options(r.log)
	opts.Records, opts.Procs = r.source, r.procs
	prof, err := profiler.Open(opts)
	if err != nil {
		return fmt.Errorf("perfprof: %w%s", err, r.schedHint(err))
	}
	r.prof = prof
	if st := prof.Stats(); st.EBPF.Active {
		r.telemetry.ReceiverPerfprofEbpfPrograms.Add(ctx, 1, metric.WithAttributes(attribute.String("program", "span_reader")))
		r.ebpfActive = true
		if st.OffCPU.Kernel {
			r.telemetry.ReceiverPerfprofEbpfPrograms.Add(ctx, 1, metric.WithAttributes(attribute.String("program", "scheduler")))
			r.schedActive = true
		}
	}
	if err := r.startServers(ctx, host); err != nil {
		r.stopServers(ctx)
		_, _ = prof.Close()
		return fmt.Errorf("perfprof: %w", err)
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Add(1)
	go r.loop(loopCtx)
	r.recordStats()
	r.log.Info("perfprof receiver started",
		zap.String("scope", r.cfg.Scope), zap.Uint64("frequency_hz", r.cfg.Frequency),
		zap.Int("processes", prof.Stats().Processes))
	return nil
}

// schedHint adds, to a permission error while sched capture is on, that
// capture is what needs the privilege: the context-switch event samples in
// the kernel, which kernel.perf_event_paranoid=2 forbids without
// CAP_PERFMON, where on-CPU sampling of one's own processes is allowed.
func (r *perfprofReceiver) schedHint(err error) string {
	if on, _ := r.cfg.Sched.enabled(); !on || !errors.Is(err, perf.ErrPermission) {
		return ""
	}
	return "; context-switch capture (sched.enabled) needs CAP_PERFMON or kernel.perf_event_paranoid <= 1: grant it, or set sched.enabled: false to profile on-CPU only"
}

// loop reports every report_interval, and early when the engine's buffer
// reaches its bound; between reports it moves the engine's counters into
// telemetry every discovery_interval, so that losses show promptly.
func (r *perfprofReceiver) loop(ctx context.Context) {
	defer r.wg.Done()
	// On beats of the clock, as the engine's loops (clock.UntilBeat).
	every, statsEvery := r.cfg.ReportInterval, r.cfg.DiscoveryInterval
	report := time.NewTimer(clock.UntilBeat(every, every))
	defer report.Stop()
	stats := time.NewTimer(clock.UntilBeat(statsEvery, statsEvery))
	defer stats.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-report.C:
			report.Reset(clock.UntilBeat(every, every))
			r.report(ctx)
		case <-r.prof.Flush():
			r.report(ctx)
		case <-stats.C:
			stats.Reset(clock.UntilBeat(statsEvery, statsEvery))
			r.recordStats()
		}
	}
}

// report emits the samples that the correlation window has passed.
func (r *perfprofReceiver) report(ctx context.Context) {
	snaps := r.prof.Take(false)
	r.recordStats()
	r.emit(ctx, snaps)
}

// emit sends snapshots down the profiles pipeline.
func (r *perfprofReceiver) emit(ctx context.Context, snaps []profiler.Snapshot) {
	if len(snaps) == 0 || r.profiles == nil {
		return
	}
	pd, n := pdataprofiles.Build(snaps, pdataprofiles.Params{
		Frequency:      r.cfg.Frequency,
		OffCPUInterval: uint64(r.cfg.Sched.OffCPUInterval),
		Resource:       r.spanConv.Resource,
	})
	r.log.Debug("Emitting profiles", zap.Int("processes", len(snaps)), zap.Int("samples", n))
	obs := r.obs["perf_event"]
	ctx = obs.StartProfilesOp(ctx)
	err := r.profiles.ConsumeProfiles(ctx, pd)
	// The collector counts profile samples as pprofile Sample records, one
	// per stack and span with all of its timestamps, as the exporters do.
	obs.EndProfilesOp(ctx, "pprofile", pd.SampleCount(), err)
	if err != nil {
		r.telemetry.ReceiverPerfprofDroppedSamples.Add(context.Background(), int64(n), metric.WithAttributes(attribute.String("reason", "consumer_error")))
		r.log.Error("Profiles pipeline refused a report; its samples are dropped", zap.Int("samples", n), zap.Error(err))
	}
}

// recordStats moves what the engine counted since the last call into the
// collector's telemetry, and logs losses.
func (r *perfprofReceiver) recordStats() {
	r.statsMu.Lock()
	defer r.statsMu.Unlock()
	st := r.prof.Stats()
	last := r.last
	r.last = st
	ctx := context.Background()
	add := func(c metric.Int64Counter, d int64, kv ...string) {
		if d <= 0 {
			return
		}
		attrs := make([]attribute.KeyValue, 0, len(kv)/2)
		for i := 0; i+1 < len(kv); i += 2 {
			attrs = append(attrs, attribute.String(kv[i], kv[i+1]))
		}
		c.Add(ctx, d, metric.WithAttributes(attrs...))
	}
	tb := r.telemetry
	if d := st.Processes - last.Processes; d != 0 {
		tb.ReceiverPerfprofProcesses.Add(ctx, int64(d))
	}
	add(tb.ReceiverPerfprofSamples, st.Samples-last.Samples)
	add(tb.ReceiverPerfprofDroppedSamples, st.BufferFull-last.BufferFull, "reason", "buffer_full")
	add(tb.ReceiverPerfprofDroppedSamples, int64(st.Source.Corrupt-last.Source.Corrupt), "reason", "corrupt")
	add(tb.ReceiverPerfprofLostRecords, int64(st.Source.Lost-last.Source.Lost))
	others := []profiler.LinkSource{profiler.SourceGoLabels, profiler.SourceThreadContext, profiler.SourceThreadLatest}
	byThread := func(j profiler.JoinCounts) int64 {
		n := j.Span
		for _, src := range others {
			n -= j.Read[src]
		}
		return n
	}
	add(tb.ReceiverPerfprofEmittedSamples, byThread(st.Joins)-byThread(last.Joins), "join", "span", "source", profiler.SourceThread.String())
	for _, src := range others {
		add(tb.ReceiverPerfprofEmittedSamples, st.Joins.Read[src]-last.Joins.Read[src], "join", "span", "source", src.String())
	}
	add(tb.ReceiverPerfprofEmittedSamples, st.Joins.NoSpan-last.Joins.NoSpan, "join", "no_span")
	add(tb.ReceiverPerfprofEmittedSamples, st.Joins.Ambiguous-last.Joins.Ambiguous, "join", "ambiguous")
	add(tb.ReceiverPerfprofEmittedSamples, st.Joins.Early-last.Joins.Early, "join", "early")
	add(tb.ReceiverPerfprofEmittedSamples, st.Joins.OtherProcess-last.Joins.OtherProcess, "join", "other_process")
	add(tb.ReceiverPerfprofDroppedSamples, st.PidReused-last.PidReused, "reason", "pid_reused")
	add(tb.ReceiverPerfprofSpansUnmatched, st.Spans.Unmatched-last.Spans.Unmatched)
	prog, lastProg := st.EBPF.Program, last.EBPF.Program
	add(tb.ReceiverPerfprofEbpfRecordsDropped, int64(prog.Dropped-lastProg.Dropped))
	add(tb.ReceiverPerfprofEbpfRuns, int64(prog.RunCount-lastProg.RunCount))
	add(tb.ReceiverPerfprofEbpfRunTime, int64(prog.RunTime-lastProg.RunTime))
	off, lastOff := st.OffCPU, last.OffCPU
	add(tb.ReceiverPerfprofOffCPUSamples, (off.Samples-off.Uncaptured)-(lastOff.Samples-lastOff.Uncaptured), "stack", "switch_out")
	add(tb.ReceiverPerfprofOffCPUSamples, off.Uncaptured-lastOff.Uncaptured, "stack", "earlier_switch_out")
	add(tb.ReceiverPerfprofOffCPUDropped, int64(prog.SchedDropped-lastProg.SchedDropped), "reason", "ring_full")
	add(tb.ReceiverPerfprofOffCPUDropped, off.Unattached-lastOff.Unattached, "reason", "not_attached")
	add(tb.ReceiverPerfprofOffCPUDropped, int64(prog.SchedNoState-lastProg.SchedNoState), "reason", "no_thread_state")
	add(tb.ReceiverPerfprofOffCPUHeld, int64(prog.SchedDeferred-lastProg.SchedDeferred), "reason", "max_rate")
	add(tb.ReceiverPerfprofOffCPUHeld, int64(prog.SchedShort-lastProg.SchedShort), "reason", "below_min_block")
	add(tb.ReceiverPerfprofSchedSwitchOuts, int64(prog.SchedCaptured-lastProg.SchedCaptured), "stack", "read")
	add(tb.ReceiverPerfprofSchedSwitchOuts, int64(prog.SchedUncaptured-lastProg.SchedUncaptured), "stack", "not_read")
	unw, lastUnw := st.Unwind, last.Unwind
	add(tb.ReceiverPerfprofUnwoundSamples, unw.Complete-lastUnw.Complete, "result", "complete")
	add(tb.ReceiverPerfprofUnwoundSamples, unw.Spliced-lastUnw.Spliced, "result", "spliced")
	// Samples unwound after waiting for their tables count under the
	// result of their unwinding; pending are those never unwound.
	add(tb.ReceiverPerfprofUnwoundSamples, unw.PendingUnread-lastUnw.PendingUnread, "result", "pending")
	add(tb.ReceiverPerfprofUnwoundSamples, unw.PendingOverflow-lastUnw.PendingOverflow, "result", "pending_overflow")
	add(tb.ReceiverPerfprofUnwoundSamples, unw.NoUserStack-lastUnw.NoUserStack, "result", "no_user_stack")
	for stop := range unw.Stopped {
		if stop != int(unwind.StopEnd) {
			add(tb.ReceiverPerfprofUnwoundSamples, unw.Stopped[stop]-lastUnw.Stopped[stop], "result", unwind.Stop(stop).String())
		}
	}
	jit, lastJIT := st.JIT, last.JIT
	add(tb.ReceiverPerfprofJitFrames, (jit.Frames-jit.Older-jit.Later-jit.Unnamed)-(lastJIT.Frames-lastJIT.Older-lastJIT.Later-lastJIT.Unnamed), "naming", "newest")
	add(tb.ReceiverPerfprofJitFrames, jit.Older-lastJIT.Older, "naming", "older")
	add(tb.ReceiverPerfprofJitFrames, jit.Later-lastJIT.Later, "naming", "later")
	add(tb.ReceiverPerfprofJitFrames, jit.Unnamed-lastJIT.Unnamed, "naming", "unnamed")
	for k := range limits.NumKinds {
		add(tb.ReceiverPerfprofTargetLimits, st.Limits[k]-last.Limits[k], "bound", k.String())
	}

	if d := st.BufferFull - last.BufferFull; d > 0 {
		r.log.Warn("Samples dropped: twice correlation.max_buffered_samples were waiting for their spans",
			zap.Int64("dropped", d), zap.Int("max_buffered_samples", r.cfg.Correlation.MaxBufferedSamples))
	}
	if d := st.Source.Lost - last.Source.Lost; d > 0 {
		r.log.Warn("The kernel dropped perf records: a ring was full. Raise ring_pages or lower frequency.",
			zap.Uint64("lost", d), zap.Uint64("lost_total", st.Source.Lost))
	}
	if d := prog.Dropped - lastProg.Dropped; d > 0 && lastProg.Dropped == 0 {
		r.log.Warn("The eBPF programs' ring buffer was full: some samples are joined by thread and time instead of the span read at the sample",
			zap.Uint64("dropped", d))
	}
	if d := prog.SchedDropped - lastProg.SchedDropped; d > 0 {
		r.log.Warn("The eBPF scheduler program's ring buffer was full: off-CPU time was lost",
			zap.Uint64("records", d), zap.Uint64("records_total", prog.SchedDropped))
	}
	if d := st.Joins.Early - last.Joins.Early; d > 0 {
		r.log.Warn("Samples emitted before their spans could arrive: correlation.max_buffered_samples reached",
			zap.Int64("samples", d), zap.Int("max_buffered_samples", r.cfg.Correlation.MaxBufferedSamples))
	}
}

// shutdown stops the OTLP servers and sampling, sends what is buffered
// (joined with the spans at hand) and releases everything.
func (r *perfprofReceiver) shutdown(ctx context.Context, started bool) error {
	defer r.telemetry.Shutdown()
	if !started {
		return nil
	}
	r.stopSpans(ctx)
	return r.flush(ctx)
}

// The collector stops the components of all pipelines in one topological
// order, in which the exporters of one signal may stop before the receiver
// of the other. So each signal finishes its own part when its pipeline
// stops it: the traces signal stops taking spans while the traces
// exporters still run, the profiles signal stops sampling and sends the
// final report while the profiles exporters still run (a report sent to a
// stopped exporter's queue is lost without an error).

// stopSpans stops the OTLP servers; spans taken so far were passed on.
func (r *perfprofReceiver) stopSpans(ctx context.Context) {
	r.stopSpansOnce.Do(func() { r.stopServers(ctx) })
}

// flush stops sampling and sends the final report, joined with the spans
// at hand.
func (r *perfprofReceiver) flush(ctx context.Context) error {
	var err error
	r.flushOnce.Do(func() {
		r.cancel()
		r.wg.Wait()
		var snaps []profiler.Snapshot
		snaps, err = r.prof.Close()
		r.recordStats()
		if r.ebpfActive {
			r.telemetry.ReceiverPerfprofEbpfPrograms.Add(ctx, -1, metric.WithAttributes(attribute.String("program", "span_reader")))
		}
		if r.schedActive {
			r.telemetry.ReceiverPerfprofEbpfPrograms.Add(ctx, -1, metric.WithAttributes(attribute.String("program", "scheduler")))
		}
		r.emit(ctx, snaps)
		if err != nil {
			err = fmt.Errorf("perfprof: close: %w", err)
		}
	})
	return err
}
