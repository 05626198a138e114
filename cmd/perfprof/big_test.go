package main

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/analysis/analysistest"
)

// TestBigReport measures "perfprof report" over about 1 GB of segments
// (PERFPROF_BIG=1; PERFPROF_BIG_MB sets the size, PERFPROF_BIG_GZIP=1
// gzips the segments, PERFPROF_BIG_DIR keeps them in that directory and
// reuses them on the next run). The requirement is under a minute on two
// CPUs.
//
//	PERFPROF_BIG=1 go test -run TestBigReport -v -timeout 30m ./cmd/perfprof/
func TestBigReport(t *testing.T) {
	if os.Getenv("PERFPROF_BIG") == "" {
		t.Skip("set PERFPROF_BIG=1 to generate and report on ~1 GB of segments")
	}
	mb := int64(1024)
	if v, err := strconv.ParseInt(os.Getenv("PERFPROF_BIG_MB"), 10, 64); err == nil {
		mb = v
	}
	dir := os.Getenv("PERFPROF_BIG_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) == 0 {
		start := time.Now()
		res, err := analysistest.WriteBig(analysistest.Big{Dir: dir, Bytes: mb << 20, Gzip: os.Getenv("PERFPROF_BIG_GZIP") != ""},
			runtime.GOMAXPROCS(0))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("generated %d segments, %.0f MB on disk, %d samples, %d polls in %.1fs",
			len(res.Files), float64(res.Bytes)/1e6, res.Samples, res.Polls, time.Since(start).Seconds())
	}
	start := time.Now()
	out := mustRun(t, "report", dir)
	sec := time.Since(start).Seconds()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	head := out
	if i := strings.Index(out, "== On-CPU functions"); i > 0 {
		head = out[:i]
	}
	t.Logf("report over %s: %.1fs on %d CPUs, %.0f MB heap in use after\n%s", dir, sec, runtime.GOMAXPROCS(0),
		float64(ms.HeapInuse)/1e6, head)
	if sec > 60 {
		t.Errorf("report took %.1fs, over a minute", sec)
	}
}
