package analysis_test

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/analysis"
	"github.com/perfprof/perfprof/internal/analysis/analysistest"
	"github.com/perfprof/perfprof/internal/wire"
)

// benchFile writes a synthetic trace of 200 000 on-CPU samples with its
// polls, in TRC or in the legacy layout, and returns its path.
func benchFile(b *testing.B, legacy bool) string {
	b.Helper()
	s := analysistest.DefaultSynth()
	s.OnCPU, s.Other = 200_000, 20_000
	p := filepath.Join(b.TempDir(), "bench.bin")
	if _, err := s.WriteFile(p, legacy); err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkLoad decodes one file into a Trace: the loader's event loop,
// typed reads and interning, on one CPU.
func BenchmarkLoad(b *testing.B) {
	benchLayouts(b, func(b *testing.B, p string) {
		t, err := analysis.LoadFiles([]string{p}, analysis.Options{Parallel: 1})
		if err != nil || len(t.Samples) == 0 {
			b.Fatal(err, len(t.Samples))
		}
	})
}

// BenchmarkScan reads every event of one file as dump does.
func BenchmarkScan(b *testing.B) {
	benchLayouts(b, func(b *testing.B, p string) {
		n := 0
		if _, err := analysis.Scan(p, func(*wire.Event) error { n++; return nil }); err != nil || n == 0 {
			b.Fatal(err, n)
		}
	})
}

// benchLayouts runs op on a file of each layout.
func benchLayouts(b *testing.B, op func(b *testing.B, path string)) {
	for _, legacy := range []bool{false, true} {
		name := "trc"
		if legacy {
			name = "legacy"
		}
		b.Run(name, func(b *testing.B) {
			p := benchFile(b, legacy)
			b.ReportAllocs()
			cpu := cpuTime()
			for b.Loop() {
				op(b, p)
			}
			reportCPU(b, cpu)
		})
	}
}

// cpuTime is the CPU time the process has used. On a shared machine the
// wall time of a benchmark says more about the neighbours than about the
// code; the CPU time per op (cpu-ns/op, garbage collection included) less.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}
