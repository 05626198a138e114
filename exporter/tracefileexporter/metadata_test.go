package tracefileexporter

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/perfprof/perfprof/exporter/tracefileexporter/internal/metadatatest"
	"github.com/perfprof/perfprof/exporter/tracefileexporter/tracefiletest"
	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/wire"
)

// TestMetadataBounded: a client that names 100 000 services does not make
// the exporter hold, or a segment list, more than maxMetaValues of them;
// the rest are counted. The next segment lists its own batches' values.
func TestMetadataBounded(t *testing.T) {
	dir := t.TempDir()
	e, tt := newMeasuredFile(t, dir)

	base := uint64(time.Now().UnixNano())
	const named, perPush = 100_000, 10_000
	for push := range named / perPush {
		td := ptrace.NewTraces()
		for i := push * perPush; i < (push+1)*perPush; i++ {
			var id [8]byte
			binary.LittleEndian.PutUint64(id[:], uint64(i)+1)
			start := base + uint64(i)*1000
			tracefiletest.AddSpan(td, fmt.Sprintf("service-%d", i), 1, "s", traceA, id, [8]byte{},
				start, start+500, map[string]any{convention.ThreadID: 5})
		}
		require.NoError(t, e.pushTraces(t.Context(), td))
	}
	// A name too long to list.
	td := ptrace.NewTraces()
	tracefiletest.AddSpan(td, strings.Repeat("x", maxMetaValue+1), 1, "s", traceA, [8]byte{1, 2}, [8]byte{},
		base, base+500, map[string]any{convention.ThreadID: 5})
	require.NoError(t, e.pushTraces(t.Context(), td))

	e.mu.Lock()
	// Sizes, not Len: a failure would print 100 000 names.
	services, pids := len(e.meta.services), len(e.meta.pids)
	e.mu.Unlock()
	require.Equal(t, maxMetaValues, services, "services held")
	require.Equal(t, 1, pids, "pids held")
	metadatatest.AssertEqualExporterTracefileSkipped(t, tt, []metricdata.DataPoint[int64]{
		{Value: named - maxMetaValues + 1, Attributes: attribute.NewSet(attribute.String("reason", "metadata_full"))},
	}, metricdatatest.IgnoreTimestamp())

	// The next segment starts its lists anew.
	require.NoError(t, e.rotator().Rotate())
	td = ptrace.NewTraces()
	tracefiletest.AddSpan(td, "fresh", 2, "s", traceA, [8]byte{1, 3}, [8]byte{}, base, base+500, map[string]any{convention.ThreadID: 5})
	require.NoError(t, e.pushTraces(t.Context(), td))
	require.NoError(t, e.shutdown(t.Context()))

	segs := segmentFiles(t, dir)
	require.Len(t, segs, 2)
	for i, want := range []struct {
		services int
		pids     string
	}{{maxMetaValues, "1"}, {1, "2"}} {
		var meta map[string]string
		for _, ev := range readTRC(t, segs[i]) {
			if ev.Name() == "SegmentMetadataEvent" {
				meta = entries(ev)
			}
		}
		require.Equal(t, want.services, len(strings.Split(meta[convention.MetaService], ",")), "services listed in segment %d", i)
		require.Equal(t, want.pids, meta[convention.MetaPid], "segment %d", i)
	}
}

func entries(ev *wire.Event) map[string]string {
	m := map[string]string{}
	for _, p := range ev.Field("entries").Map {
		m[p.Key] = p.Value
	}
	return m
}

// TestWorkersBounded: a client that sends each span under a worker id of
// its own does not make the exporter remember the polls of more than
// maxBusyWorkers workers; a worker that keeps working stays remembered,
// so a span of its that overlaps one of its polls is still noticed.
func TestWorkersBounded(t *testing.T) {
	e, tt := newMeasuredFile(t, t.TempDir())
	defer func() { require.NoError(t, e.shutdown(context.Background())) }()
	base := uint64(time.Now().UnixNano())
	const invented, perPush, steady = 20_000, 1_000, 1_000_000
	var id uint64
	span := func(td ptrace.Traces, worker int64, start, end uint64) {
		id++
		var sid [8]byte
		binary.LittleEndian.PutUint64(sid[:], id)
		tracefiletest.AddSpan(td, "svc", 1, "s", traceA, sid, [8]byte{}, start, end, map[string]any{convention.ThreadID: 5, convention.WorkerID: int(worker)})
	}
	for push := range invented / perPush {
		td := ptrace.NewTraces()
		for i := push * perPush; i < (push+1)*perPush; i++ {
			start := base + uint64(i)*1000
			span(td, int64(i), start, start+500)
		}
		// The steady worker, after every invented one so far.
		end := base + uint64((push+1)*perPush)*1000
		span(td, steady, end, end+500)
		require.NoError(t, e.pushTraces(t.Context(), td))
	}
	e.mu.Lock()
	held := len(e.busy)
	e.mu.Unlock()
	require.LessOrEqual(t, held, maxBusyWorkers, "workers remembered")

	// Overlapping the steady worker's first poll.
	td := ptrace.NewTraces()
	first := base + uint64(perPush)*1000
	span(td, steady, first+100, first+200)
	require.NoError(t, e.pushTraces(t.Context(), td))
	metadatatest.AssertEqualExporterTracefileSkipped(t, tt, []metricdata.DataPoint[int64]{
		{Value: 1, Attributes: attribute.NewSet(attribute.String("reason", "nested_worker_span"))},
		// The worker ids, in the segment's metadata.
		{Value: invented + 1 - maxMetaValues, Attributes: attribute.NewSet(attribute.String("reason", "metadata_full"))},
	}, metricdatatest.IgnoreTimestamp())
}
