package tracefileexporter

import (
	"fmt"
	"os"
	"path/filepath"
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

// TestRecoverAtStart: the exporter starts on a directory where a process
// died writing its third batch. The partial batch is cut off, the segment
// sealed with the two whole batches, what was cut counted in telemetry,
// and the next segment takes the next number.
func TestRecoverAtStart(t *testing.T) {
	dir := t.TempDir()
	e := newTestFile(t, dir, nil)
	base := uint64(time.Now().UnixNano())
	push := func(i int) {
		td := ptrace.NewTraces()
		for j := range 4 {
			addSpan(td, i*4+j, base)
		}
		require.NoError(t, e.pushTraces(t.Context(), td))
	}
	push(0)
	push(1)
	active := filepath.Join(dir, "trace.0.bin.active")
	two, err := os.ReadFile(active)
	require.NoError(t, err)
	push(2)
	three, err := os.ReadFile(active)
	require.NoError(t, err)
	require.NoError(t, e.shutdown(t.Context()))

	// The process died in the middle of the third batch's write.
	crashed := t.TempDir()
	cut := three[:len(two)+(len(three)-len(two))*3/4]
	require.NoError(t, os.WriteFile(filepath.Join(crashed, "trace.0.bin.active"), cut, 0o644))

	// The sealed segment is compared byte for byte, uncompressed.
	e2, tt := newMeasuredFile(t, crashed)

	metadatatest.AssertEqualExporterTracefileSegments(t, tt, []metricdata.DataPoint[int64]{
		{Value: 1, Attributes: attribute.NewSet(attribute.String("outcome", "recovered"))},
	}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualExporterTracefileRecoveredCutBytes(t, tt, []metricdata.DataPoint[int64]{
		{Value: int64(len(cut) - len(two))},
	}, metricdatatest.IgnoreTimestamp())
	sealed, err := os.ReadFile(filepath.Join(crashed, "trace.0.bin"))
	require.NoError(t, err)
	require.Equal(t, two, sealed, "the sealed segment is the two whole batches")
	spans := 0
	for _, ev := range readTRC(t, filepath.Join(crashed, "trace.0.bin")) {
		if ev.Name() == wire.NameSpanCloseOTel {
			spans++
		}
	}
	require.Equal(t, 8, spans)

	td := ptrace.NewTraces()
	addSpan(td, 100, base)
	require.NoError(t, e2.pushTraces(t.Context(), td))
	_, err = os.Stat(filepath.Join(crashed, "trace.1.bin.active"))
	require.NoError(t, err, "numbering goes on after the recovered segment")
	require.NoError(t, e2.shutdown(t.Context()))
}

// addSpan adds span number i, on thread 5, to td.
func addSpan(td ptrace.Traces, i int, base uint64) {
	start := base + uint64(i)*1000
	tracefiletest.AddSpan(td, "s", 1, fmt.Sprintf("span%d", i), traceA, [8]byte{byte(i), 1}, [8]byte{},
		start, start+500, map[string]any{convention.ThreadID: 5})
}
