package tracefileexporter

import (
	"context"

	"github.com/perfprof/perfprof/internal/counter"
)

// The series the exporter counts in batches and takes from the rotator's
// running totals, named as metadata.yaml names the metrics; the rest (a
// batch refused, values skipped) are added to their instruments where they
// happen.
var (
	cSealed         = counter.Define("exporter_tracefile_segments", "outcome", "sealed")
	cDeleted        = counter.Define("exporter_tracefile_segments", "outcome", "deleted")
	cRotateError    = counter.Define("exporter_tracefile_segments", "outcome", "rotate_error")
	cRecovered      = counter.Define("exporter_tracefile_segments", "outcome", "recovered")
	cRecoveredEmpty = counter.Define("exporter_tracefile_segments", "outcome", "recovered_empty")
	cCutBytes       = counter.Define("exporter_tracefile_recovered_cut_bytes")
	cDroppedEvents  = counter.Define("exporter_tracefile_recovered_dropped_events")
	cWrittenBytes   = counter.Define("exporter_tracefile_written_bytes")
	cSamples        = counter.Define("exporter_tracefile_events", "kind", "cpu_sample")
	cSymbols        = counter.Define("exporter_tracefile_events", "kind", "symbol")
	cSpans          = counter.Define("exporter_tracefile_events", "kind", "span")
	cPolls          = counter.Define("exporter_tracefile_events", "kind", "poll")
	cParks          = counter.Define("exporter_tracefile_events", "kind", "park")
	cTruncated      = counter.Define("exporter_tracefile_truncated_stacks")
)

// eventCounts are what one batch wrote, counted once it is in a segment.
// ctxLeftOut are context attributes left out of their samples' sets, which
// go to the skipped metric.
type eventCounts struct {
	samples, symbols, spans, polls, parks, truncated int64
	ctxLeftOut                                       int64
}

func (c *eventCounts) addTo(s *counter.Set) {
	s.Add(cSamples, c.samples)
	s.Add(cSymbols, c.symbols)
	s.Add(cSpans, c.spans)
	s.Add(cPolls, c.polls)
	s.Add(cParks, c.parks)
	s.Add(cTruncated, c.truncated)
}

// recordStats stores what the rotator counted, then moves everything
// counted since the last call into telemetry. Called with mu held.
func (e *traceFile) recordStats() {
	if e.rot != nil {
		s := e.rot.Stats()
		t := e.counts
		t.Store(cSealed, int64(s.Segments))
		t.Store(cDeleted, int64(s.Deleted))
		t.Store(cRotateError, s.RotateErrors)
		t.Store(cRecovered, int64(s.Recovered))
		t.Store(cRecoveredEmpty, int64(s.RecoveredEmpty))
		t.Store(cCutBytes, s.RecoveredCutBytes)
		t.Store(cDroppedEvents, s.RecoveredDroppedEvents)
		t.Store(cWrittenBytes, s.BytesWritten)
	}
	e.instruments.Flush(context.Background(), e.counts)
}
