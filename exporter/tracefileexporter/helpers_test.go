package tracefileexporter

import (
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exportertest"

	"github.com/perfprof/perfprof/exporter/tracefileexporter/internal/metadata"
	"github.com/perfprof/perfprof/internal/wire"
)

// newTestFile returns a started traceFile writing into dir.
func newTestFile(t testing.TB, dir string, f func(*Config)) *traceFile {
	t.Helper()
	return startTestFile(t, dir, f, exportertest.NewNopSettings(metadata.Type))
}

// newMeasuredFile returns a started traceFile writing into dir without
// compression (a gzip in the background could rename a sealed segment
// under the test), and the telemetry it reports to.
func newMeasuredFile(t *testing.T, dir string) (*traceFile, *componenttest.Telemetry) {
	t.Helper()
	tt := componenttest.NewTelemetry()
	t.Cleanup(func() {
		if err := tt.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	set := exportertest.NewNopSettings(metadata.Type)
	set.TelemetrySettings = tt.NewTelemetrySettings()
	return startTestFile(t, dir, func(c *Config) { c.Compress = false }, set), tt
}

func startTestFile(t testing.TB, dir string, f func(*Config), set exporter.Settings) *traceFile {
	t.Helper()
	return startTestFileClock(t, dir, f, set, nil)
}

// startTestFileClock is startTestFile with now as the segments' wall
// clock (nil: time.Now).
func startTestFileClock(t testing.TB, dir string, f func(*Config), set exporter.Settings, now func() time.Time) *traceFile {
	t.Helper()
	cfg := createDefaultConfig()
	cfg.Directory = dir
	if f != nil {
		f(cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	e, err := newTraceFile(cfg, set)
	if err != nil {
		t.Fatal(err)
	}
	e.now = now
	if err := e.start(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	return e
}

// segmentFiles lists the sealed segments of dir in order (N ascending).
func segmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	type seg struct {
		n    int
		path string
	}
	var segs []seg
	for _, e := range ents {
		name := e.Name()
		rest, ok := strings.CutPrefix(name, "trace.")
		if !ok || strings.HasSuffix(name, ".active") {
			continue
		}
		num, _, _ := strings.Cut(rest, ".")
		n, err := strconv.Atoi(num)
		if err != nil {
			continue
		}
		segs = append(segs, seg{n, filepath.Join(dir, name)})
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].n < segs[j].n })
	out := make([]string, len(segs))
	for i, s := range segs {
		out[i] = s.path
	}
	return out
}

// readTRC reads a whole TRC segment (gzip or not); it fails the test on
// any decode error.
func readTRC(t *testing.T, path string) []*wire.Event {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	evs, err := wire.ReadAll(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return evs
}

// readLegacy reads a whole legacy segment.
func readLegacy(t *testing.T, path string) []wire.LegacyRecord {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	lr, err := wire.NewLegacyReader(r)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var recs []wire.LegacyRecord
	for {
		var rec wire.LegacyRecord
		err := lr.Read(&rec)
		if errors.Is(err, io.EOF) {
			return recs
		}
		if err != nil {
			t.Fatalf("%s: after %d records: %v", path, len(recs), err)
		}
		recs = append(recs, rec)
	}
}

// symbolTable collects the SymbolTableEntry events of a segment: address →
// frames by inline depth ("name file:line").
func symbolTable(evs []*wire.Event) map[uint64][]string {
	syms := map[uint64][]string{}
	for _, ev := range evs {
		if ev.Name() != "SymbolTableEntry" {
			continue
		}
		a, _ := ev.Uint("addr")
		d, _ := ev.Uint("inline_depth")
		name, _ := ev.Str("symbol_name")
		file, _ := ev.Str("source_file")
		line, _ := ev.Uint("source_line")
		for uint64(len(syms[a])) <= d {
			syms[a] = append(syms[a], "")
		}
		syms[a][d] = name + " " + file + ":" + strconv.FormatUint(line, 10)
	}
	return syms
}
