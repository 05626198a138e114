package tidmap

import (
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"testing"
)

const (
	benchSpans   = 100000
	benchThreads = 64
)

type benchAdd struct {
	tid uint32
	s   Span
}

type benchSample struct {
	tid uint32
	t   uint64
}

// workload makes benchSpans spans over benchThreads threads the way a
// server produces them: on each thread, sequential requests of 0.1–20 ms
// with short gaps, each with 1–3 levels of nested children (1–3 per level,
// down to 0.1 ms), ended (so added) children first. It also makes random
// sample times within each thread's covered range.
func workload() (adds []benchAdd, samples []benchSample) {
	const (
		ms   = uint64(1e6)
		base = uint64(1e12) // some CLOCK_MONOTONIC time
	)
	rng := rand.New(rand.NewPCG(1, 2))
	cursor := make([]uint64, benchThreads)
	for i := range cursor {
		cursor[i] = base + rng.Uint64N(ms)
	}
	var trace, span uint64
	var gen func(tid uint32, parent uint64, start, end uint64, depth int)
	gen = func(tid uint32, parent uint64, start, end uint64, depth int) {
		span++
		id := span
		if depth > 0 {
			k := 1 + rng.Uint64N(3)
			seg := (end - start) / k
			for c := range k {
				cs := start + c*seg + rng.Uint64N(seg/10+1)
				ce := start + (c+1)*seg - rng.Uint64N(seg/10+1)
				if ce-cs >= ms/10 {
					gen(tid, id, cs, ce, depth-1)
				}
			}
		}
		s := Span{Start: start, End: end, Name: "GET /api/items", WorkerID: -1, Resource: 1}
		binary.LittleEndian.PutUint64(s.TraceID[:], trace)
		binary.LittleEndian.PutUint64(s.SpanID[:], id)
		binary.LittleEndian.PutUint64(s.ParentSpanID[:], parent)
		adds = append(adds, benchAdd{tid, s})
	}
	for len(adds) < benchSpans {
		for tid := range uint32(benchThreads) {
			trace++
			d := ms/10 + rng.Uint64N(20*ms-ms/10)
			start := cursor[tid]
			gen(tid+1000, 0, start, start+d, 1+rng.IntN(3))
			cursor[tid] = start + d + rng.Uint64N(d/10+1)
		}
	}
	adds = adds[:benchSpans]
	samples = make([]benchSample, 1<<16)
	for i := range samples {
		tid := uint32(rng.IntN(benchThreads))
		samples[i] = benchSample{tid + 1000, base + rng.Uint64N(cursor[tid]-base)}
	}
	return adds, samples
}

func load(b *testing.B, adds []benchAdd) *Map {
	m := New(Options{})
	for _, a := range adds {
		if err := m.Add(a.tid, a.s); err != nil {
			b.Fatal(err)
		}
	}
	for tid := range uint32(benchThreads) {
		m.Lookup(tid+1000, 0) // build
	}
	return m
}

// BenchmarkLookup is the join's hot path: a random sample time on a random
// thread, against 100 000 live spans over 64 threads, index built.
func BenchmarkLookup(b *testing.B) {
	adds, samples := workload()
	m := load(b, adds)
	hits, i := 0, 0
	b.ReportAllocs()
	for b.Loop() {
		s := samples[i&(len(samples)-1)]
		if m.Lookup(s.tid, s.t) != nil {
			hits++
		}
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
	b.ReportMetric(float64(hits)/float64(b.N), "hits/op")
}

// BenchmarkResolve is BenchmarkLookup with the ancestry check of the join:
// every span covering the time is visited, not only the innermost.
func BenchmarkResolve(b *testing.B) {
	adds, samples := workload()
	m := load(b, adds)
	hits, ambiguous, i := 0, 0, 0
	b.ReportAllocs()
	for b.Loop() {
		s := samples[i&(len(samples)-1)]
		sp, amb := m.Resolve(s.tid, s.t)
		if sp != nil {
			hits++
		}
		if amb {
			ambiguous++
		}
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
	b.ReportMetric(float64(hits)/float64(b.N), "hits/op")
	b.ReportMetric(float64(ambiguous)/float64(b.N), "ambiguous/op")
}

// BenchmarkAddAndRebuild is the cost of indexing: adding 100 000 spans in
// the order they end and building the view of every thread with its first
// lookup. It also reports the heap held per span once built.
func BenchmarkAddAndRebuild(b *testing.B) {
	adds, _ := workload()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m := load(b, adds)
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(m)
	perSpan := float64(after.HeapAlloc-before.HeapAlloc) / benchSpans

	b.ReportAllocs()
	for b.Loop() {
		load(b, adds)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchSpans, "ns/span")
	b.ReportMetric(perSpan, "B/span")
}
