package profiler

import (
	"crypto/sha256"
	"fmt"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/perfprof/perfprof/internal/bpf"
	"github.com/perfprof/perfprof/internal/container"
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/profiler/profilertest"
	"github.com/perfprof/perfprof/internal/testchild"
	"github.com/perfprof/perfprof/internal/unwind"
)

// benchEngine is an engine sampling this test process, with symbolization
// on and no perf session.
func benchEngine(b *testing.B, sched bool) (*engine, *procState) {
	opts := Options{Symbolize: true, RecoverLeafCaller: true, MaxBufferedSamples: 1 << 30, Perf: perf.Options{Sched: sched}}
	opts.setDefaults()
	e := newEngine(opts, newPlan(opts))
	b.Cleanup(func() { _ = e.syms.close() })
	p, err := perf.ReadProcess(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	st, _ := e.addProcess(p, Identity{})
	e.syms.refresh([]*procState{st}, true)
	return e, st
}

// autoUnwind has e unwind as with UnwindAuto, its tables and those of
// the samples given it being the benchmark's to read.
func autoUnwind(e *engine) {
	e.opts.Unwind = UnwindAuto
	e.unw = unwind.NewWalker(e.opts.Unwind, e.opts.RecoverLeafCaller, &e.counts.unwind)
}

// BenchmarkHandleSample is the engine's per-sample work on the read loop:
// locking, stack interning and buffering, over 64 distinct 16-frame stacks
// (the steady state of a profiled service). Nothing is symbolized here.
func BenchmarkHandleSample(b *testing.B) {
	e, st := benchEngine(b, false)
	chains := profilertest.Callchains(b, 64)
	rec := perf.Record{Type: perf.RecordSample}
	rec.Sample.Pid = uint32(os.Getpid())
	rec.Sample.Tid = 1
	for _, c := range chains {
		rec.Sample.Callchain = c
		e.handle(&rec)
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
		e.handle(&rec)
	}
}

// BenchmarkSchedGroup is the engine taking one group of off-CPU time from
// the scheduler program's ring: the off-CPU sample, its stack interned.
func BenchmarkSchedGroup(b *testing.B) {
	e, st := benchEngine(b, false)
	chains := profilertest.Callchains(b, 64)
	r := bpf.SchedRecord{Pid: uint32(os.Getpid()), Tid: 1, Count: 1, State: 1}
	for _, c := range chains {
		r.Stack = c[1:] // without perf's PERF_CONTEXT_USER
		e.addSchedGroup(&r)
	}
	// As BenchmarkHandleSample: the batch emptied every 65 536 groups.
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%(1<<16) == 0 {
			b.StopTimer()
			st.batch.samples = st.batch.samples[:0]
			b.StartTimer()
		}
		r.Stack = chains[i%len(chains)][1:]
		r.OutTime, r.CaptureTime, r.Begin, r.End = uint64(i), uint64(i), uint64(i), uint64(i)
		e.addSchedGroup(&r)
	}
}

// BenchmarkTake is one report of 10 000 samples over 64 stacks and 8
// threads: the split, the join (against 8 threads' spans) and the
// symbolization of the stacks with warm binary caches (a new batch's
// stacks are resolved through the process's address cache).
func BenchmarkTake(b *testing.B) {
	e, _ := benchEngine(b, false)
	chains := profilertest.Callchains(b, 64)
	rec := perf.Record{Type: perf.RecordSample}
	rec.Sample.Pid = uint32(os.Getpid())
	fill := func() {
		for i := 0; i < 10000; i++ {
			rec.Sample.Callchain = chains[i%len(chains)]
			rec.Sample.Tid = uint32(1 + i%8)
			rec.Sample.Time = uint64(i) * 1000
			e.handle(&rec)
		}
	}
	for tid := uint32(1); tid <= 8; tid++ {
		spans := make([]Span, 50)
		for j := range spans {
			spans[j] = Span{Tid: tid, SpanID: [8]byte{byte(j), 1}, Name: "GET /items", WorkerID: -1, Resource: -1,
				Start: e.clock.Unix(uint64(j) * 200_000), End: e.clock.Unix(uint64(j)*200_000 + 100_000)}
		}
		e.AddSpans(spans)
	}
	fill()
	e.take(1e12, 1e12, false) // warm the symbol caches
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		fill()
		b.StartTimer()
		snaps := e.take(1e12, 1e12, false)
		if len(snaps) != 1 || len(snaps[0].Samples) != 10000 {
			b.Fatalf("took %d snapshots", len(snaps))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10000, "ns/sample")
}

// BenchmarkBufferedSampleMemory reports the heap held per sample waiting
// for the correlation window: 1 M samples over 64 stacks and 8 threads.
func BenchmarkBufferedSampleMemory(b *testing.B) {
	const n = 1 << 20
	chains := profilertest.Callchains(b, 64)
	for i := 0; i < b.N; i++ {
		e, _ := benchEngine(b, false)
		rec := perf.Record{Type: perf.RecordSample}
		rec.Sample.Pid = uint32(os.Getpid())
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for j := 0; j < n; j++ {
			rec.Sample.Callchain = chains[j%len(chains)]
			rec.Sample.Tid = uint32(1 + j%8)
			rec.Sample.Time = uint64(j)
			e.handle(&rec)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/sample")
		runtime.KeepAlive(e)
	}
}

// BenchmarkHandleSwitch is the engine's work per context-switch record on
// the read loop: a switch-out sample (stack interned), the switch-out and
// switch-in records, through the reorder queue and the off-CPU accounting,
// over 64 threads. ns/op is per record.
func BenchmarkHandleSwitch(b *testing.B) {
	e, st := benchEngine(b, true)
	chains := profilertest.Callchains(b, 16)
	pid := uint32(os.Getpid())
	var rec perf.Record
	t := uint64(1_000_000_000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 3 {
		tid := uint32(1 + i%64)
		t += 7_000 // 3 records every 7 µs: about 430 k records/s of input
		rec = perf.Record{Type: perf.RecordSample}
		rec.Sample = perf.SampleRecord{Pid: pid, Tid: tid, Time: t, Kind: perf.EventSwitch, Callchain: chains[i%len(chains)]}
		e.handle(&rec)
		rec = perf.Record{Type: perf.RecordSwitch, Misc: perf.MiscSwitchOut}
		rec.ID = perf.SampleID{Pid: pid, Tid: tid, Time: t + 100}
		e.handle(&rec)
		rec = perf.Record{Type: perf.RecordSwitch}
		rec.ID = perf.SampleID{Pid: pid, Tid: tid, Time: t + 3_000_000}
		e.handle(&rec)
		if len(st.batch.samples) > 1<<16 {
			b.StopTimer()
			st.batch = newBatch()
			e.buffered = 0
			b.StartTimer()
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// nofpSamples returns up to 256 real samples of the C program without
// frame pointers (testchild nofp: ~10 frames through libz and libc), each
// with its 16 KiB stack copy, made samples of this process, and an
// Unwinder of the program's tables.
func nofpSamples(b *testing.B, e *engine) ([]perf.SampleRecord, *unwind.Unwinder) {
	child := testchild.Start(b, testchild.NoFP(b, "c"))
	s, err := perf.Open(perf.Options{Frequency: 999, StackUser: DefaultUnwindStackBytes})
	testchild.RequirePerf(b, err)
	if err := s.Attach(child.Pid); err != nil {
		testchild.RequirePerf(b, err)
	}
	var samples []perf.SampleRecord
	done := make(chan error, 1)
	full := make(chan struct{})
	go func() {
		done <- s.Read(func(r *perf.Record) {
			smp := r.Sample
			if r.Type != perf.RecordSample || int(smp.Pid) != child.Pid || len(samples) >= 256 || len(smp.StackUser) == 0 {
				return
			}
			smp.Callchain = slices.Clone(smp.Callchain)
			smp.StackUser = slices.Clone(smp.StackUser)
			smp.RegsUser = slices.Clone(smp.RegsUser)
			samples = append(samples, smp)
			if len(samples) == 256 {
				close(full)
			}
		})
	}()
	// 0.26 s at 999 Hz; longer when other work takes the CPUs.
	select {
	case <-full:
	case <-time.After(3 * time.Second):
	}
	s.Close()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	if len(samples) < 64 {
		b.Fatalf("%d samples", len(samples))
	}
	e.syms.mu.Lock()
	proc, err := e.syms.cache.Process(child.Pid)
	e.syms.mu.Unlock()
	if err != nil {
		b.Fatal(err)
	}
	for i := range samples {
		samples[i].Pid = uint32(os.Getpid())
	}
	u := proc.Unwinder()
	// The child burns both CPUs: the benchmark has no use for it now.
	_ = child.Cmd.Process.Kill()
	return samples, u
}

// BenchmarkHandleSampleUnwind is BenchmarkHandleSample with unwinding
// (UnwindAuto): real samples of the C program without frame pointers
// (nofpSamples), each unwound by the process's Unwinder and interned.
func BenchmarkHandleSampleUnwind(b *testing.B) { benchHandleUnwind(b, false) }

// BenchmarkHandleSampleUnwindNew is BenchmarkHandleSampleUnwind with a
// new batch for every pass over the samples, so that each stack is
// interned for the first time, as most are in a profile of code whose
// leaf addresses vary (inner loops of libz here) between reports.
func BenchmarkHandleSampleUnwindNew(b *testing.B) { benchHandleUnwind(b, true) }

func benchHandleUnwind(b *testing.B, fresh bool) {
	e, st := benchEngine(b, false)
	autoUnwind(e)
	samples, u := nofpSamples(b, e)
	st.unwinder.Store(u)
	rec := perf.Record{Type: perf.RecordSample}
	for i := range samples {
		rec.Sample = samples[i]
		e.handle(&rec)
	}
	if c := e.counts.unwind; c.Complete != c.Unwound || c.Unwound != int64(len(samples)) {
		b.Fatalf("unwinding: %+v of %d samples", c, len(samples))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		switch {
		case fresh && i%len(samples) == 0:
			b.StopTimer()
			st.batch = newBatch()
			b.StartTimer()
		case !fresh && i%(1<<16) == 0:
			b.StopTimer()
			st.batch.samples = st.batch.samples[:0]
			b.StartTimer()
		}
		rec.Sample = samples[i%len(samples)]
		rec.Sample.Time = uint64(i)
		e.handle(&rec)
	}
}

// BenchmarkQueuePendingSample is the read loop's work for a sample taken
// before its process's unwind tables were read: buffered with the
// kernel's chain, and queued with a copy of its 16 KiB stack (B/op: the
// copy, the entry and the queue's growth). The queue is settled every 256
// samples (4 MiB), as the tables' arrival would, off the clock.
func BenchmarkQueuePendingSample(b *testing.B) {
	e, st := pendingEngine(b, 1<<30)
	rec := pendingRecord(st.info.Pid, 0, 0, DefaultUnwindStackBytes)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%256 == 0 {
			b.StopTimer()
			st.pending.unread = true
			e.settleSome(st, len(st.pending.samples))
			st.pending.unread = false
			st.batch.samples = st.batch.samples[:0]
			b.StartTimer()
		}
		rec.Sample.Time = uint64(i)
		e.handle(&rec)
	}
	if c := e.counts.unwind; c.PendingOverflow != 0 {
		b.Fatalf("counted %+v", c)
	}
	b.ReportMetric(float64(e.counts.unwind.PendingPeakBytes)/256, "queued-B/sample")
}

// BenchmarkUnwindPendingSample is the late unwinding of a queued sample
// once its process's tables are read (drainPending: a chunk per hold of
// the engine's lock), on the real samples of nofpSamples, which are queued
// 256 at a time off the clock.
func BenchmarkUnwindPendingSample(b *testing.B) {
	e, st := benchEngine(b, false)
	autoUnwind(e)
	e.opts.MaxPendingUnwindBytes = 1 << 30
	samples, u := nofpSamples(b, e)
	rec := perf.Record{Type: perf.RecordSample}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; {
		b.StopTimer()
		st.unwinder.Store(nil)
		st.batch = newBatch()
		n := min(b.N-i, len(samples))
		for j := range n {
			rec.Sample = samples[j]
			rec.Sample.Time = uint64(i + j)
			e.handle(&rec)
		}
		st.unwinder.Store(u)
		b.StartTimer()
		e.drainPending([]*procState{st})
		i += n
	}
	if c := e.counts.unwind; c.PendingUnwound != int64(b.N) || c.Complete != c.Unwound {
		b.Fatalf("counted %+v of %d", c, b.N)
	}
}

// BenchmarkMapSpans: mapping the spans of a request to the collector's ids
// on a node of 1000 containers, each app pid 1 of its own namespace,
// per span: a request's spans of one container (found once, then
// remembered for the request), and a client that gives every span another
// container id (each looked up in the index, none a target).
func BenchmarkMapSpans(b *testing.B) {
	// Container ids are random: a digest of i for the benchmark's.
	id := func(i int) string { return fmt.Sprintf("%x", sha256.Sum256([]byte(fmt.Sprint(i)))) }
	m := newSpanIDs(nil, zap.NewNop())
	for i := range 1000 {
		id := id(i)
		m.add(100000+i, Identity{LocalPid: 1, Nested: true, Cgroup: container.Cgroup{ContainerID: id, IDs: []string{id}}})
		m.thread(100000+i, uint32(200000+i), 1)
	}
	for _, c := range []struct {
		name string
		cid  func(i int) string
	}{
		{"one_container", func(int) string { return id(500) }},
		{"unknown_containers", func(i int) string { return id(1_000_000 + i) }},
	} {
		spans := make([]Span, 512)
		for i := range spans {
			spans[i] = Span{Pid: 1, Tid: 1, ContainerID: c.cid(i)}
		}
		b.Run(c.name, func(b *testing.B) {
			batch := make([]Span, len(spans))
			b.ReportAllocs()
			for b.Loop() {
				copy(batch, spans)
				m.mapSpans(batch)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(spans)), "ns/span")
		})
	}
}
