package tracefileexporter

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/exporter/xexporter"

	"github.com/perfprof/perfprof/exporter/tracefileexporter/internal/metadata"
	"github.com/perfprof/perfprof/internal/segment"
	"github.com/perfprof/perfprof/internal/wire"
)

// TestSharedInstanceLastStopSeals: the profiles and traces exporters of one
// config share one instance, which the first Start opens and the second
// leaves alone; whichever signal stops first, the other keeps writing into
// the same segment, and only the last stop seals it and forgets the
// instance.
func TestSharedInstanceLastStopSeals(t *testing.T) {
	for _, profilesFirst := range []bool{false, true} {
		name := "traces stop first"
		if profilesFirst {
			name = "profiles stop first"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := createDefaultConfig()
			cfg.Directory = dir
			te, pe := newSignals(t, cfg)
			require.Equal(t, 1, instances.Len(), "one instance for the two signals of one config")
			tf := sharedFile(t, cfg)

			host := componenttest.NewNopHost()
			require.NoError(t, pe.Start(t.Context(), host))
			rot := tf.rotator()
			require.NotNil(t, rot, "the first Start opens the rotator")
			require.NoError(t, te.Start(t.Context(), host))
			require.Same(t, rot, tf.rotator(), "the second Start opened another rotator")

			b, tr, _ := buildTestData()
			require.NoError(t, pe.ConsumeProfiles(t.Context(), b.Profiles))
			require.NoError(t, te.ConsumeTraces(t.Context(), tr))
			first, last := component.Component(te), component.Component(pe)
			if profilesFirst {
				first, last = pe, te
			}
			require.NoError(t, first.Shutdown(t.Context()))
			assert.Empty(t, segmentFiles(t, dir), "sealed while a signal still runs")
			assert.Equal(t, 1, instances.Len(), "instance forgotten while a signal still runs")
			// The signal left still writes into the open segment.
			if profilesFirst {
				require.NoError(t, te.ConsumeTraces(t.Context(), tr))
			} else {
				require.NoError(t, pe.ConsumeProfiles(t.Context(), b.Profiles))
			}
			assert.Equal(t, 1, activeFiles(t, dir))
			require.NoError(t, last.Shutdown(t.Context()))

			segs := segmentFiles(t, dir)
			require.Len(t, segs, 1, "one segment, sealed by the last stop")
			assert.Zero(t, activeFiles(t, dir))
			kinds := map[string]int{}
			for _, ev := range readTRC(t, segs[0]) {
				kinds[ev.Name()]++
			}
			samples, spans := 7, 3
			if profilesFirst {
				spans *= 2
			} else {
				samples *= 2
			}
			assert.Equal(t, samples, kinds["CpuSampleEvent"])
			assert.Equal(t, spans, kinds[wire.NameSpanCloseOTel])
			assert.Zero(t, instances.Len(), "instance kept after the last stop")
		})
	}
}

// TestSharedInstanceWithoutStart: shutting down signals that never started,
// or whose start failed, is safe, writes nothing and forgets the instance;
// another config has an instance of its own.
func TestSharedInstanceWithoutStart(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.Directory = t.TempDir()
	other := createDefaultConfig()
	file := filepath.Join(t.TempDir(), "plainfile")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	other.Directory = filepath.Join(file, "traces") // cannot be created: its start fails

	te, pe := newSignals(t, cfg)
	oe, op := newSignals(t, other)
	require.Equal(t, 2, instances.Len(), "one instance per config")

	startErr := oe.Start(t.Context(), componenttest.NewNopHost())
	require.Error(t, startErr)
	require.Equal(t, startErr, op.Start(t.Context(), componenttest.NewNopHost()),
		"the second signal gets the first start's error")
	for _, c := range []component.Component{te, pe, oe, op} {
		require.NoError(t, c.Shutdown(t.Context()))
	}
	assert.Zero(t, instances.Len())
	ents, err := os.ReadDir(cfg.Directory)
	require.NoError(t, err)
	assert.Empty(t, ents, "files written without a start")
}

// newSignals creates the traces and profiles exporters of cfg, as the
// collector does for one component ID used in two pipelines.
func newSignals(t *testing.T, cfg *Config) (exporter.Traces, xexporter.Profiles) {
	t.Helper()
	f := NewFactory()
	set := exportertest.NewNopSettings(metadata.Type)
	te, err := f.CreateTraces(t.Context(), set, cfg)
	require.NoError(t, err)
	pe, err := f.(xexporter.Factory).CreateProfiles(t.Context(), set, cfg)
	require.NoError(t, err)
	return te, pe
}

// sharedFile returns the live instance of cfg without keeping a hold on it.
func sharedFile(t *testing.T, cfg *Config) *traceFile {
	t.Helper()
	u, err := instances.Acquire(cfg, func() (*traceFile, error) { return nil, errors.New("no instance for the config") })
	require.NoError(t, err)
	require.NoError(t, u.Stop(func(bool) error { return errors.New("the test held the last handle") }))
	return u.Value()
}

// rotator returns the open rotator, nil before start.
func (e *traceFile) rotator() *segment.Rotator {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rot
}

// activeFiles counts the segments of dir still being written.
func activeFiles(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	n := 0
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".active") {
			n++
		}
	}
	return n
}
