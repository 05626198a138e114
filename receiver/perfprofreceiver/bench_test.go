package perfprofreceiver

import (
	"os"
	"runtime"
	"testing"

	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/symbolize"
	"github.com/perfprof/perfprof/receiver/perfprofreceiver/internal/metadata"
)

// realChains returns n distinct callchains of 16 real return addresses of
// this test binary, as perf would report them for it.
func realChains(b *testing.B, n int) [][]uint64 {
	pcs := make([]uintptr, 64)
	k := runtime.Callers(0, pcs)
	if k < 4 {
		b.Fatal("too few frames")
	}
	chains := make([][]uint64, n)
	for i := range chains {
		c := []uint64{perf.ContextUser}
		for j := 0; j < 16; j++ {
			c = append(c, uint64(pcs[(i+j)%k])+uint64(i%3))
		}
		chains[i] = c
	}
	return chains
}

func benchReceiver(b *testing.B) (*perfprofReceiver, *procState) {
	r, err := newReceiver(createDefaultConfig(), receivertest.NewNopSettings(metadata.Type), nil)
	if err != nil {
		b.Fatal(err)
	}
	r.symbols = symbolize.NewCache(symbolize.Options{})
	b.Cleanup(func() { r.symbols.Close() })
	sym, err := r.symbols.Process(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	p, err := perf.ReadProcess(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	st := &procState{info: p, sym: sym, threads: map[uint32]string{1: "main"}, addrs: map[uint64]*loc{}, batch: newBatch(), resource: -1}
	r.procs[os.Getpid()] = st
	r.cfg.Correlation.MaxBufferedSamples = 1 << 30
	return r, st
}

// BenchmarkHandleSample is the receiver's per-sample work on the read
// loop: locking, stack interning and buffering, with 64 distinct 16-frame
// stacks already symbolized (the steady state of a profiled service).
func BenchmarkHandleSample(b *testing.B) {
	r, st := benchReceiver(b)
	chains := realChains(b, 64)
	rec := perf.Record{Type: perf.RecordSample}
	rec.Sample.Pid = uint32(os.Getpid())
	rec.Sample.Tid = 1
	for _, c := range chains { // warm the symbol and stack caches
		rec.Sample.Callchain = c
		r.handle(&rec)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%(1<<16) == 0 {
			b.StopTimer()
			st.batch.samples = st.batch.samples[:0]
			b.StartTimer()
		}
		rec.Sample.Callchain = chains[i%len(chains)]
		rec.Sample.Time = uint64(i)
		r.handle(&rec)
	}
}

// BenchmarkBuildProfiles turns one report of 10 000 samples over 64 stacks
// and 8 threads, half of them linked to 50 spans, into pdata profiles.
func BenchmarkBuildProfiles(b *testing.B) {
	r, st := benchReceiver(b)
	chains := realChains(b, 64)
	rec := perf.Record{Type: perf.RecordSample}
	rec.Sample.Pid = uint32(os.Getpid())
	for i := 0; i < 10000; i++ {
		rec.Sample.Callchain = chains[i%len(chains)]
		rec.Sample.Tid = uint32(1 + i%8)
		rec.Sample.Time = uint64(i) * 1000
		r.handle(&rec)
	}
	st.batch.threads = st.threads
	joins := make([]joinInfo, len(st.batch.samples))
	for i := range joins {
		joins[i] = joinInfo{linked: i%2 == 0, traceID: [16]byte{byte(i % 50)}, spanID: [8]byte{byte(i % 50), 1}, worker: int64(i % 4), root: "GET /items"}
		if !joins[i].linked {
			joins[i].root = ""
		}
	}
	snaps := []snapshot{{pid: os.Getpid(), exe: st.info.Exe, batch: st.batch, joins: joins, windowA: 0, windowB: 1e7}}
	m := clock.NewMapper()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pd, n := buildProfiles(snaps, profileParams{frequency: 99, toUnix: m.Unix})
		if n != 10000 || pd.SampleCount() == 0 {
			b.Fatalf("built %d samples", n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10000, "ns/sample")
}

// BenchmarkBufferedSampleMemory reports the heap held per sample waiting
// for the correlation window: 1 M samples over 64 stacks and 8 threads.
func BenchmarkBufferedSampleMemory(b *testing.B) {
	const n = 1 << 20
	chains := realChains(b, 64)
	for i := 0; i < b.N; i++ {
		r, _ := benchReceiver(b)
		rec := perf.Record{Type: perf.RecordSample}
		rec.Sample.Pid = uint32(os.Getpid())
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for j := 0; j < n; j++ {
			rec.Sample.Callchain = chains[j%len(chains)]
			rec.Sample.Tid = uint32(1 + j%8)
			rec.Sample.Time = uint64(j)
			r.handle(&rec)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/sample")
		runtime.KeepAlive(r)
	}
}

// BenchmarkHandleSwitch is the receiver's work per context-switch record
// on the read loop: a switch-out sample (stack interned), the switch-out
// and switch-in records, through the reorder queue and the off-CPU
// accounting, over 64 threads. ns/op is per record.
func BenchmarkHandleSwitch(b *testing.B) {
	r, _ := benchReceiver(b)
	r.sched = newSchedState(10_000_000)
	chains := realChains(b, 16)
	pid := uint32(os.Getpid())
	var rec perf.Record
	t := uint64(1_000_000_000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 3 {
		tid := uint32(1 + i%64)
		t += 7_000 // 3 records every 7 µs: about 430 k records/s of input
		rec = perf.Record{Type: perf.RecordSample}
		rec.Sample = perf.Sample{Pid: pid, Tid: tid, Time: t, Kind: perf.EventSwitch, Callchain: chains[i%len(chains)]}
		r.handle(&rec)
		rec = perf.Record{Type: perf.RecordSwitch, Misc: perf.MiscSwitchOut}
		rec.ID = perf.SampleID{Pid: pid, Tid: tid, Time: t + 100}
		r.handle(&rec)
		rec = perf.Record{Type: perf.RecordSwitch}
		rec.ID = perf.SampleID{Pid: pid, Tid: tid, Time: t + 3_000_000}
		r.handle(&rec)
		if len(r.procs[int(pid)].batch.samples) > 1<<16 {
			b.StopTimer()
			r.procs[int(pid)].batch = newBatch()
			r.buffered = 0
			b.StartTimer()
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
