package sched

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// BenchmarkSwitchRecords feeds switch records of 64 threads, merged in time
// order as they come out of the per-CPU rings: each thread alternates
// switch-in and switch-out, on for 20 µs to 2 ms, off for 10 µs to 20 ms
// (blocked, one in four preempted), with an on-CPU sample (and its
// TakeCPUDelta) in about one on period in eight. The off-CPU interval is the
// period of 99 Hz sampling. One iteration is one record.
func BenchmarkSwitchRecords(b *testing.B) {
	const (
		threads  = 64
		perTid   = 1024               // records per thread in the sequence
		interval = 1_000_000_000 / 99 // ns
	)
	rng := rand.New(rand.NewPCG(3, 4))
	recs := make([]record, 0, threads*perTid*9/8)
	for tid := uint32(1000); tid < 1000+threads; tid++ {
		t := rng.Uint64N(1e6)
		for n := 0; n < perTid/2; n++ {
			on := 20_000 + rng.Uint64N(2_000_000)
			recs = append(recs, record{tid: tid, ts: t, kind: 'i'})
			if rng.IntN(8) == 0 {
				recs = append(recs, record{tid: tid, ts: t + rng.Uint64N(on), kind: 's'})
			}
			t += on
			recs = append(recs, record{tid: tid, ts: t, kind: 'o', preempted: rng.IntN(4) == 0})
			t += 10_000 + rng.Uint64N(20_000_000)
		}
	}
	slices.SortStableFunc(recs, func(a, b record) int {
		switch {
		case a.ts < b.ts:
			return -1
		case a.ts > b.ts:
			return 1
		}
		return 0
	})
	// The sequence repeats shifted by span, so that every thread's first
	// switch-in comes after its last switch-out.
	span := recs[len(recs)-1].ts + 1

	tr := New(interval)
	var sink uint64
	feed := func(r record, off uint64) {
		switch r.kind {
		case 'o':
			tr.SwitchOut(r.tid, r.ts+off, r.preempted)
		case 'i':
			if g, ok := tr.SwitchIn(r.tid, r.ts+off); ok {
				sink += g.Count
			}
		case 's':
			if g, ok := tr.OnCPUSample(r.tid, r.ts+off); ok {
				sink += g.Count
			}
			sink += tr.TakeCPUDelta(r.tid)
		}
	}
	for _, r := range recs { // warm up: every thread known
		feed(r, 0)
	}

	var n, i int
	off := span
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		feed(recs[i], off)
		if i++; i == len(recs) {
			i = 0
			off += span
		}
		n++
	}
	ns := float64(b.Elapsed().Nanoseconds()) / float64(n)
	b.ReportMetric(ns, "ns/record")
	b.ReportMetric(1e9/ns, "records/s")
	if sink == 0 {
		b.Fatal("no groups and no CPU time")
	}
}
