package tracefileexporter

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/perfprof/perfprof/exporter/tracefileexporter/internal/keep"
	"github.com/perfprof/perfprof/exporter/tracefileexporter/tracefiletest"
	"github.com/perfprof/perfprof/internal/convention"
)

// The exporter with a keep rule and a retention bound of a few segments:
// of 300 pushes of fast spans, each sealing its segment, the one with a
// slow span among them is held with its neighbours within the lookback,
// past retention that deleted every other old segment, and its manifest
// lists them; the decoded files hold the slow span.
func TestKeepSlowSpanPastRetention(t *testing.T) {
	dir := t.TempDir()
	e := newTestFile(t, dir, func(c *Config) {
		c.Compress = false
		c.MaxFileSize = 1024
		c.MaxTotalSize = 8 << 10
		c.RotationInterval = 0
		c.Keep.Rules = []KeepRule{{SpanName: "GET /", MinDuration: 50 * time.Millisecond}}
		c.Keep.Lookback = 5 * time.Millisecond
		c.Keep.Settle = 0
	})
	require.NotNil(t, e.keeper)
	base := uint64(time.Now().Add(-time.Hour).UnixNano())
	ms := uint64(time.Millisecond)
	const slowAt = 100
	for i := range 300 {
		tr := ptrace.NewTraces()
		start, d := base+uint64(i)*10*ms, ms
		if i == slowAt {
			d = 60 * ms
		}
		for j := range 20 {
			tracefiletest.AddSpan(tr, "svc", 1, "GET /", [16]byte{byte(i), byte(i >> 8), byte(j)}, [8]byte{byte(i), byte(i >> 8), byte(j), 1}, [8]byte{},
				start, start+d, map[string]any{convention.ThreadID: 10 + j})
		}
		require.NoError(t, e.pushTraces(t.Context(), tr))
	}
	e.keeper.Tick()
	ents, err := os.ReadDir(keep.ManifestDir(dir, "trace"))
	require.NoError(t, err)
	require.Len(t, ents, 20, "the 20 slow spans of push 100 kept")
	m, err := keep.ReadManifest(filepath.Join(keep.ManifestDir(dir, "trace"), ents[0].Name()))
	require.NoError(t, err)
	assert.True(t, m.Complete)
	require.NotEmpty(t, m.Files)
	assert.Equal(t, "60000000", m.Metadata["duration_ns"])

	var sealed []int
	for _, name := range listNames(t, dir) {
		if n, ok := segIndex(name); ok {
			sealed = append(sealed, n)
		}
	}
	slices.Sort(sealed)
	for _, f := range m.Files {
		n, _ := segIndex(f)
		assert.Contains(t, sealed, n, "%s kept", f)
	}
	// Old segments not kept are gone: the first kept one is among the
	// oldest left, and retention deleted most of the run.
	st := e.rot.Stats()
	assert.Greater(t, st.Deleted, st.Segments/2, "retention deleted %d of %d", st.Deleted, st.Segments)
	first, _ := segIndex(m.Files[0])
	assert.Equal(t, first, sealed[0], "segments older than the kept ones were deleted; left: %v", sealed)
	// The span's close is in the kept files.
	found := false
	for _, f := range m.Files {
		for _, ev := range readTRC(t, filepath.Join(dir, f)) {
			if d, ok := ev.Uint("start_timestamp_ns"); ok && ev.Timestamp-d == 60*ms {
				found = true
			}
		}
	}
	assert.True(t, found, "the slow span is not in its kept segments")
	require.NoError(t, e.shutdown(t.Context()))
}

func listNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// segIndex is N of trace.N.bin.
func segIndex(name string) (int, bool) {
	var n int
	if len(name) < len("trace.0.bin") || name[:6] != "trace." || filepath.Ext(name) != ".bin" {
		return 0, false
	}
	n, err := strconv.Atoi(name[6 : len(name)-4])
	return n, err == nil
}
