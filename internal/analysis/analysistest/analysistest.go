// Package analysistest writes trace files with known contents for tests of
// the analysis package and the perfprof CLI, and finds dial9's demo trace
// for the interoperability tests.
// It follows docs/trace-conventions.md, so its files look like the
// exporter's: CPU samples with perfprof's extra fields, SpanEvents, worker
// polls, symbol tables written before use.
package analysistest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/perfprof/perfprof/internal/interop"
)

// RepoRoot returns the directory holding go.mod, walking up from the
// working directory.
func RepoRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// Shared returns the path of a file written by another implementation of
// the format, such as DemoTrace, for an interoperability test; see package
// interop for where it is looked for and when a test skips or fails.
func Shared(tb testing.TB, name string) string {
	tb.Helper()
	return interop.Path(tb, name)
}

// DemoTrace is the dial9 demo trace and what the spec and a full decode
// say it holds.
const DemoTrace = interop.DemoTrace

// Demo trace facts (docs/trace-format.md §A.12: a full decode).
const (
	DemoRawBytes      = 4047237
	DemoHeaders       = 14
	DemoEvents        = 210639
	DemoCpuSamples    = 6949
	DemoPolls         = 36801
	DemoParks         = 6304
	DemoSymbolEntries = 992
	DemoWorkers       = 2
)
