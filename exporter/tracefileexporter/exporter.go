package tracefileexporter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/perfprof/perfprof/exporter/tracefileexporter/internal/keep"
	"github.com/perfprof/perfprof/exporter/tracefileexporter/internal/metadata"
	"github.com/perfprof/perfprof/exporter/tracefileexporter/internal/s3upload"
	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/counter"
	"github.com/perfprof/perfprof/internal/counter/instruments"
	"github.com/perfprof/perfprof/internal/segment"
	"github.com/perfprof/perfprof/internal/wire"
	"github.com/perfprof/perfprof/pkg/pprofiledict"
)

// maxAddrKeys bounds the address table (see addrTable); past it the table
// starts over in a new segment.
const maxAddrKeys = 1 << 20

// errLogEvery is the least time between two logged write errors.
const errLogEvery = 10 * time.Second

// traceFile is one exporter instance, shared by the profiles and traces
// signals of one component ID through instances (factory.go): both write
// into the same segments, so it is started once and shut down once.
type traceFile struct {
	cfg    *Config
	logger *zap.Logger
	tb     *metadata.TelemetryBuilder
	host   string             // collector host name, when the data names none
	upl    *s3upload.Uploader // nil without s3, before start and after shutdown
	keeper *keep.Keeper       // nil without keep rules, before start and after shutdown
	// now is the segments' wall clock, which seals them by time; nil is
	// time.Now. A test hook: time-based rotation without waiting.
	now func() time.Time

	// mu serializes batches: the address table and metadata are shared
	// state of the segments being written.
	mu         sync.Mutex
	rot        *segment.Rotator // nil before start and after shutdown
	clk        *clock.Mapper
	legacyBase uint64 // CLOCK_MONOTONIC ns of legacy timestamp 0
	// batchTimes is when the events of the batch being written are
	// (intervals of Unix ns), for the keeper (rotator.OnBatch).
	batchTimes [][2]int64
	addrs      addrTable
	emitted    map[uint64]bool // addresses with symbols in the active TRC segment
	ctxSets    contextSets     // context attribute sets written in the active TRC segment
	spawnLocs  map[string]uint16
	busy       map[uint64]*intervals // per worker: polls and parks written
	recent     recentSpans           // instance ids of the spans written lately
	threads    threadSet             // per thread: the spans written on it
	meta       metaSets
	metaWarned bool // the metadata_full warning was logged
	// counts holds what batches wrote and the rotator's totals until
	// recordStats moves them into telemetry through instruments.
	counts      *counter.Set
	instruments *instruments.Bound
	// The buffers of chains, kept from one batch to the next.
	addrBuf, chainBuf []uint64
	chainsBuf         [][]uint64
	linkHex           map[pprofiledict.Link][2]string // the batch's links in hex
	// spare is a batch kept for the next push, with the room it grew to.
	spare atomic.Pointer[batch]
	stop  chan struct{}
	done  chan struct{}

	errMu      sync.Mutex
	errLast    time.Time
	errSkipped int
}

func newTraceFile(cfg *Config, set exporter.Settings) (*traceFile, error) {
	tb, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	inst, err := instruments.Bind(tb, "exporter_tracefile_")
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	return &traceFile{cfg: cfg, logger: set.Logger, tb: tb, instruments: inst, counts: counter.NewSet(), host: host}, nil
}

// start opens the rotator. An unwritable directory fails the collector's
// start.
func (e *traceFile) start(ctx context.Context, _ component.Host) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	opts := segment.Options{
		Dir:          e.cfg.Directory,
		Prefix:       e.cfg.FilePrefix,
		MaxFileSize:  int64(e.cfg.MaxFileSize),
		Interval:     e.cfg.RotationInterval,
		MaxTotalSize: int64(e.cfg.MaxTotalSize),
		Compress:     e.cfg.Compress,
		FileMode:     os.FileMode(e.cfg.FileMode),
		Metadata:     e.meta.entries(e.host),
		Now:          e.now,
	}
	if e.cfg.Format == FormatTokioTRC {
		opts.LegacyVersion = legacyVersion
	}
	// The rotator's totals start again from zero.
	e.counts = counter.NewSet()
	// The keeper first: the rotator's retention at start already passes
	// over the segments that earlier runs kept.
	if err := e.startKeep(); err != nil {
		return err
	}
	if k := e.keeper; k != nil {
		opts.Held = k.Held
		opts.OnBatch = func(n int) { k.Wrote(n, e.batchTimes) }
	}
	rot, err := segment.New(opts)
	if err != nil {
		e.stopKeep()
		return fmt.Errorf("tracefile: %w", err)
	}
	e.rot = rot
	// What recovery did at start is telemetry now, not at the first batch.
	e.recordStats()
	if err := e.startUpload(ctx, rot); err != nil {
		rot.Close()
		e.rot = nil
		e.stopKeep()
		return err
	}
	e.clk = clock.NewMapper()
	e.legacyBase = clock.Monotonic()
	e.addrs = addrTable{}
	e.emitted = map[uint64]bool{}
	e.spawnLocs = map[string]uint16{}
	e.busy = map[uint64]*intervals{}
	e.threads = threadSet{}
	e.stop, e.done = make(chan struct{}), make(chan struct{})
	go e.tick(e.stop, e.done)
	return nil
}

// tick seals segments whose time window has ended when no batch comes,
// and follows steps of the wall clock.
func (e *traceFile) tick(stop, done chan struct{}) {
	defer close(done)
	// On beats of the clock, as the receiver's loops (clock.UntilBeat).
	t := time.NewTimer(clock.UntilBeat(time.Second, time.Second))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			t.Reset(clock.UntilBeat(time.Second, time.Second))
			e.clk.Refresh()
			e.mu.Lock()
			if err := e.rot.Tick(); err != nil {
				e.logError("rotate", err)
			}
			if e.upl != nil {
				e.upl.Notify()
			}
			e.recordStats()
			k := e.keeper
			e.mu.Unlock()
			if k != nil {
				k.Tick()
			}
		}
	}
}

// shutdown stops the ticker and seals the active segment. Without a start
// there is nothing to seal.
func (e *traceFile) shutdown(ctx context.Context) error {
	e.mu.Lock()
	if e.rot == nil {
		e.mu.Unlock()
		return nil
	}
	stop, done := e.stop, e.done
	e.mu.Unlock()
	close(stop)
	<-done
	e.mu.Lock()
	defer e.mu.Unlock()
	err := e.rot.Close()
	if err != nil {
		err = fmt.Errorf("tracefile: seal the last segment: %w", err)
	}
	// The keeps settle on the segment just sealed, and their manifests
	// go to the bucket after it, if ctx allows.
	if e.keeper != nil {
		e.keeper.Tick()
	}
	if uerr := e.stopUpload(ctx); uerr != nil && err == nil {
		err = uerr
	}
	e.stopKeep()
	e.recordStats()
	e.rot = nil
	return err
}

// logError logs write errors at most once per errLogEvery, saying how many
// were not logged in between.
func (e *traceFile) logError(what string, err error) {
	e.errMu.Lock()
	now := time.Now()
	if now.Sub(e.errLast) < errLogEvery {
		e.errSkipped++
		e.errMu.Unlock()
		return
	}
	skipped := e.errSkipped
	e.errLast, e.errSkipped = now, 0
	e.errMu.Unlock()
	e.logger.Error("tracefile: "+what+" failed; the pipeline's retry and queue decide what becomes of the data",
		zap.Error(err), zap.String("directory", e.cfg.Directory), zap.Int("similar_errors_not_logged", skipped))
}

func (e *traceFile) countSkipped(ctx context.Context, reason string, n int) {
	if n > 0 {
		e.tb.ExporterTracefileSkipped.Add(ctx, int64(n), metric.WithAttributes(attribute.String("reason", reason)))
	}
}

func (e *traceFile) pushProfiles(ctx context.Context, pd pprofile.Profiles) error {
	clk := e.clock()
	if clk == nil {
		return errNotStarted
	}
	b := e.batch()
	defer e.keep(b)
	b.addProfiles(pd, clk.Fixed())
	return e.write(ctx, b)
}

func (e *traceFile) pushTraces(ctx context.Context, td ptrace.Traces) error {
	clk := e.clock()
	if clk == nil {
		return errNotStarted
	}
	b := e.batch()
	defer e.keep(b)
	b.addTraces(td, clk.Fixed(), e.cfg.Correlation, e.cfg.SpanAttributes)
	e.countSkipped(ctx, "span_no_thread", b.noThread)
	e.countSkipped(ctx, "span_attribute_cut", b.attrsCut)
	return e.write(ctx, b)
}

// batch returns the spare batch, or a new one while another push has it.
func (e *traceFile) batch() *batch {
	if b := e.spare.Swap(nil); b != nil {
		return b
	}
	return new(batch)
}

// maxSpareEvents bounds the batch kept for the next push: one that grew
// past it (a burst after a stall, a client's huge request) is let go
// rather than held for good. A report of 64 CPUs at 999 Hz is 64 000.
const maxSpareEvents = 1 << 18

// keep makes b, written or failed, the spare batch, unless it is larger
// than a push needs.
func (e *traceFile) keep(b *batch) {
	if cap(b.evs) > maxSpareEvents || cap(b.groups) > maxSpareEvents {
		return
	}
	b.reset()
	e.spare.Store(b)
}

// clock returns the exporter's own Unix → CLOCK_MONOTONIC mapper, nil
// before start. Profiles of the perfprof receiver carry the offset their
// times were converted with and go back with it exactly; the mapper
// converts spans, whose times come from their SDKs' wall clocks, and
// profiles of other sources.
func (e *traceFile) clock() *clock.Mapper {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.clk
}

var errNotStarted = errors.New("tracefile: exporter not started")

// write encodes a batch into the active segment. A write error goes back to
// the pipeline; nothing of the batch is in any segment then.
func (e *traceFile) write(ctx context.Context, b *batch) error {
	if len(b.evs) == 0 {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.rot == nil {
		return errNotStarted
	}
	if n := b.addWorkerEvents(e.busy); n > 0 {
		e.tb.ExporterTracefileSkipped.Add(ctx, int64(n), metric.WithAttributes(attribute.String("reason", "nested_worker_span")))
	}
	b.addThreadIntervals(&e.threads)
	b.sort()
	if e.keeper != nil {
		e.offerKeep(b)
	}
	// Instance ids are never recycled for the collector's run (bootID):
	// spans are numbered once, before the batch is written. A parent's is
	// known when it is in the batch or was written recently.
	for i := range b.spans {
		s := &b.spans[i]
		s.inst = spanInstances.Add(1)
		e.recent.put(s.trace, s.span, s.inst)
	}
	for i := range b.spans {
		if s := &b.spans[i]; !s.parent.IsEmpty() {
			s.parentInst = e.recent.get(s.trace, s.parent)
		}
	}
	e.meta.newSegment(e.rot.Stats())
	if e.meta.add(b) {
		e.rot.SetMetadata(e.meta.entries(e.host))
	}
	if n := e.meta.left; n > 0 {
		e.meta.left = 0
		e.tb.ExporterTracefileSkipped.Add(ctx, n, metric.WithAttributes(attribute.String("reason", "metadata_full")))
		if !e.metaWarned {
			e.metaWarned = true
			e.logger.Warn("Services, hosts, pids or worker ids left out of the segment metadata, which lists a bounded number of each, of a bounded length "+
				"(otelcol_exporter_tracefile_skipped{reason=\"metadata_full\"} counts them; this message is not repeated)",
				zap.Int64("values", n), zap.Int("max_values", maxMetaValues), zap.Int("max_value_bytes", maxMetaValue))
		}
	}
	if len(e.addrs.byKey) > maxAddrKeys {
		// Start over in a new segment, so that no segment holds one
		// address with two meanings.
		if err := e.rot.Rotate(); err != nil {
			e.logError("rotate", err)
		}
		e.addrs = addrTable{}
		clear(e.emitted)
	}
	var counts eventCounts
	var err error
	if e.cfg.Format == FormatTokioTRC {
		err = e.rot.WriteLegacyBatch(func(w *wire.LegacyWriter, defs *wire.LegacyDefs) error {
			counts = eventCounts{}
			return e.encodeLegacy(w, defs, b, &counts)
		})
	} else {
		err = e.rot.WriteSegmentBatch(func(w *wire.Writer, fresh bool) error {
			if fresh {
				clear(e.emitted)
				e.ctxSets.newSegment()
			}
			counts = eventCounts{}
			return e.encode(w, b, &counts)
		})
	}
	if err == nil {
		counts.addTo(e.counts)
		e.countSkipped(ctx, "context_attribute", int(counts.ctxLeftOut))
	}
	e.recordStats()
	if err != nil {
		// The symbols and attribute sets of the batch are not in the
		// segment: write them again.
		clear(e.emitted)
		e.ctxSets.forget()
		e.tb.ExporterTracefileFailedBatches.Add(ctx, 1)
		e.logError("write", err)
		return fmt.Errorf("tracefile: %w", err)
	}
	return nil
}

// Bounds on the segment metadata. It lists the services, hosts, pids and
// worker ids that the batches of the segment name, which is whatever the
// clients put in their resources and spans: past maxMetaValues values of
// one kind in a segment, and for a value longer than maxMetaValue bytes,
// a value is left out of the list and counted
// (skipped{reason="metadata_full"}).
const (
	maxMetaValues = 1024
	maxMetaValue  = 256
)

// metaSets accumulates what the segment metadata says: every service, host,
// pid and worker the batches of the active segment named (see
// maxMetaValues), and the sample period.
type metaSets struct {
	services, hosts, pids, workers map[string]bool
	period                         int64
	// sealed is the count of segments sealed or abandoned when the sets
	// were last emptied (see newSegment).
	sealed int
	// left counts the values left out since write last took the count.
	left int64
}

// newSegment empties the sets when the segment they described is no
// longer the active one, so that a segment's metadata lists what its own
// batches name (and those of the batch a rotation came in), not every
// value since the collector started.
func (m *metaSets) newSegment(s segment.Stats) {
	if n := s.Segments + s.Abandoned; n != m.sealed {
		m.sealed = n
		m.services, m.hosts, m.pids, m.workers = nil, nil, nil, nil
	}
}

func (m *metaSets) addTo(set *map[string]bool, keys []string) bool {
	changed := false
	for _, k := range keys {
		if k == "" || (*set)[k] {
			continue
		}
		if len(k) > maxMetaValue || len(*set) >= maxMetaValues {
			m.left++
			continue
		}
		if *set == nil {
			*set = map[string]bool{}
		}
		(*set)[k] = true
		changed = true
	}
	return changed
}

// add merges what batch b names and reports whether anything is new.
func (m *metaSets) add(b *batch) bool {
	c := m.addTo(&m.services, b.services)
	c = m.addTo(&m.hosts, b.hosts) || c
	c = m.addTo(&m.pids, b.pids) || c
	c = m.addTo(&m.workers, b.workers) || c
	if b.period > 0 && b.period != m.period {
		m.period, c = b.period, true
	}
	return c
}

func joinSorted(m map[string]bool, numeric bool) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	if numeric {
		sort.Slice(keys, func(i, j int) bool {
			a, _ := strconv.ParseInt(keys[i], 10, 64)
			b, _ := strconv.ParseInt(keys[j], 10, 64)
			return a < b
		})
	} else {
		slices.Sort(keys)
	}
	return strings.Join(keys, ",")
}

func (m *metaSets) entries(defaultHost string) map[string]string {
	out := map[string]string{convention.MetaHost: defaultHost, convention.MetaBootID: bootID()}
	if len(m.hosts) > 0 {
		out[convention.MetaHost] = joinSorted(m.hosts, false)
	}
	if len(m.services) > 0 {
		out[convention.MetaService] = joinSorted(m.services, false)
	}
	if len(m.pids) > 0 {
		out[convention.MetaPid] = joinSorted(m.pids, true)
	}
	if len(m.workers) > 0 {
		out[convention.MetaWorkers] = joinSorted(m.workers, true)
	}
	if m.period > 0 {
		out[convention.MetaSamplePeriod] = strconv.FormatInt(m.period, 10)
	}
	return out
}
