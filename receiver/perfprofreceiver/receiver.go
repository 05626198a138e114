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
	"github.com/perfprof/perfprof/internal/counter"
	"github.com/perfprof/perfprof/internal/counter/instruments"
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/profiler"
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

	statsMu     sync.Mutex
	instruments *instruments.Bound // the engine's counts, bound to telemetry
}

func newReceiver(cfg *Config, set receiver.Settings) (*perfprofReceiver, error) {
	tb, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, fmt.Errorf("create perfprof telemetry: %w", err)
	}
	inst, err := instruments.Bind(tb, "receiver_perfprof_")
	if err != nil {
		return nil, fmt.Errorf("create perfprof telemetry: %w", err)
	}
	return &perfprofReceiver{
		cfg:         cfg,
		set:         set,
		log:         set.Logger,
		telemetry:   tb,
		instruments: inst,
		spanConv:    spanconv.New(cfg.Correlation.ThreadIDAttribute, cfg.Correlation.WorkerIDAttribute),
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
	r.prof.StoreTotals()
	r.flushCounts()
}

// flushCounts moves what the engine counted since the last flush into the
// collector's telemetry, and logs losses. Span ingest calls it after each
// request, so that the outcomes of spans show as they arrive.
func (r *perfprofReceiver) flushCounts() {
	ctx := context.Background()
	r.prof.Counts().Flush(func(d *counter.Def, n int64) {
		r.instruments.Add(ctx, d, n)
		if n > 0 {
			r.logLoss(d, n)
		}
	})
}

// logLoss logs the losses a user can act on.
func (r *perfprofReceiver) logLoss(d *counter.Def, n int64) {
	switch d {
	case profiler.CountBufferFull:
		r.log.Warn("Samples dropped: twice correlation.max_buffered_samples were waiting for their spans",
			zap.Int64("dropped", n), zap.Int("max_buffered_samples", r.cfg.Correlation.MaxBufferedSamples))
	case profiler.CountLost:
		r.log.Warn("The kernel dropped perf records: a ring was full. Raise ring_pages or lower frequency.",
			zap.Int64("lost", n), zap.Int64("lost_total", r.prof.Counts().Load(d)))
	case profiler.CountEBPFDropped:
		if r.prof.Counts().Load(d) == n { // the first time only
			r.log.Warn("The eBPF programs' ring buffer was full: some samples are joined by thread and time instead of the span read at the sample",
				zap.Int64("dropped", n))
		}
	case profiler.CountOffCPURingFull:
		r.log.Warn("The eBPF scheduler program's ring buffer was full: off-CPU time was lost",
			zap.Int64("records", n), zap.Int64("records_total", r.prof.Counts().Load(d)))
	case profiler.CountJoinEarly:
		r.log.Warn("Samples emitted before their spans could arrive: correlation.max_buffered_samples reached",
			zap.Int64("samples", n), zap.Int("max_buffered_samples", r.cfg.Correlation.MaxBufferedSamples))
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
