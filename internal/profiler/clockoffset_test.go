package profiler_test

import (
	"testing"

	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/profiler/profilertest"
)

// TestSnapshotCarriesItsClockOffset: the Unix times of a snapshot convert
// back with its ClockOffset to the records' own CLOCK_MONOTONIC times,
// exactly, which is what lets a reader of the profiles (the tracefile
// exporter) write the perf records' times rather than its own estimate.
func TestSnapshotCarriesItsClockOffset(t *testing.T) {
	p, src, _ := open(t, nil)
	now := clock.Monotonic()
	times := []uint64{now - 20*s, now - 20*s + 1, now - 19*s - 7}
	for _, m := range times {
		src.Push(profilertest.Sample(100, 8, m, 0x401000))
	}
	src.Sync()
	snaps, _ := p.Close()
	if len(snaps) != 1 || len(snaps[0].Samples) != len(times) {
		t.Fatalf("snapshots %+v", snaps)
	}
	for i, r := range snaps[0].Samples {
		if got := snaps[0].ClockOffset.Mono(r.Time); got != times[i] {
			t.Errorf("sample %d: monotonic %d back as %d", i, times[i], got)
		}
	}
}
