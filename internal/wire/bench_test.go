package wire

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
)

// BenchmarkWriteCpuSample writes CPU samples with 16-frame stacks drawn
// from 200 distinct stacks, thread names of 8 threads, ~1 ms apart.
func BenchmarkWriteCpuSample(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	stacks := make([][]uint64, 200)
	for i := range stacks {
		stacks[i] = make([]uint64, 16)
		for j := range stacks[i] {
			stacks[i][j] = 0x400000 + rng.Uint64N(1<<20)
		}
	}
	names := []string{"tokio-rt-worker-0", "tokio-rt-worker-1", "tokio-rt-worker-2", "tokio-rt-worker-3",
		"blocking-0", "blocking-1", "flush", "main"}
	var cw countWriter
	w := NewWriter(&cw)
	ts := uint64(1 << 40)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		ts += 1_000_000 - 50_000 + rng.Uint64N(100_000)
		th := i % 8
		if err := w.WriteCpuSample(CpuSampleEvent{Timestamp: ts, WorkerID: uint64(th), Tid: uint32(1000 + th),
			ThreadName: Some(names[th]), Callchain: stacks[rng.IntN(len(stacks))], CPU: Some(uint64(th))}); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/sample")
	b.ReportMetric(float64(cw.n)/1e6/sec, "MB/s")
	b.ReportMetric(float64(cw.n)/float64(b.N), "bytes/sample")
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// BenchmarkRead decodes a trace shaped like the files dial9 and the
// exporter write (see mixedTrace).
func BenchmarkRead(b *testing.B) {
	data := mixedTrace(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	events := 0
	for b.Loop() {
		r := NewReader(bytes.NewReader(data))
		var ev Event
		for {
			err := r.ReadEvent(&ev)
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			events++
		}
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

// mixedTrace is about 4 MB of trace with the kinds of events and frames
// of dial9's demo trace (polls, parks and CPU samples of two workers over
// 300 distinct stacks, thread names), laid out as a rotating writer's
// segment: clock sync, then batches of about 1 MB, each a stream with its
// own pools, then the symbol table appended to the last batch.
func mixedTrace(tb testing.TB) []byte {
	rng := rand.New(rand.NewPCG(5, 6))
	stacks := make([][]uint64, 300)
	for i := range stacks {
		stacks[i] = make([]uint64, 8+rng.IntN(24))
		for j := range stacks[i] {
			stacks[i][j] = 0x400000 + rng.Uint64N(4096)*0x40
		}
	}
	var buf bytes.Buffer
	w := NewWriter(&buf)
	ts := uint64(1 << 40)
	must(tb, w.WriteClockSync(ClockSyncEvent{Timestamp: ts, RealtimeNs: 1_780_000_000_000_000_000}))
	for i := 0; buf.Len() < 4<<20; i++ {
		if i%20_000 == 0 {
			must(tb, w.Reset())
		}
		ts += rng.Uint64N(20_000)
		worker := uint64(i % 2)
		switch i % 8 {
		case 0, 3:
			must(tb, w.WritePollStart(PollStartEvent{Timestamp: ts, WorkerID: worker, LocalQueue: uint8(rng.IntN(4)),
				TaskID: rng.Uint64N(500), SpawnLoc: fmt.Sprintf("src/handler.rs:%d:9", 10+rng.IntN(20))}))
		case 1, 4:
			must(tb, w.WritePollEnd(PollEndEvent{Timestamp: ts, WorkerID: worker}))
		case 2:
			must(tb, w.WriteCpuSample(CpuSampleEvent{Timestamp: ts, WorkerID: worker, Tid: 100 + uint32(worker),
				Source: uint8(rng.IntN(2)), ThreadName: Some(fmt.Sprintf("tokio-runtime-worker-%d", worker)),
				Callchain: stacks[rng.IntN(len(stacks))], CPU: Some(worker)}))
		case 5:
			must(tb, w.WriteWorkerPark(WorkerParkEvent{Timestamp: ts, WorkerID: worker, CPUTimeNs: ts / 3, Tid: 100 + uint32(worker)}))
		case 6:
			must(tb, w.WriteWorkerUnpark(WorkerUnparkEvent{Timestamp: ts, WorkerID: worker, CPUTimeNs: ts / 3,
				SchedWaitNs: rng.Uint64N(50_000), Tid: 100 + uint32(worker)}))
		}
		if i%1000 == 999 {
			must(tb, w.Flush())
		}
	}
	for a := range uint64(4096) {
		must(tb, w.WriteSymbolTableEntry(SymbolTableEntry{Addr: 0x400000 + a*0x40, SymbolName: fmt.Sprintf("app::f%d", a),
			SourceFile: "src/app.rs", SourceLine: a}))
	}
	must(tb, w.Flush())
	return buf.Bytes()
}

// BenchmarkTypedCpuSample reads one decoded CpuSampleEvent with perfprof's
// fields into its typed form: the loader's cost per sample on top of
// decoding.
func BenchmarkTypedCpuSample(b *testing.B) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	must(b, w.WriteCpuSampleExt(CpuSampleEvent{Timestamp: 1e9, WorkerID: 1, Tid: 7, ThreadName: Some("w"),
		Callchain: []uint64{0x401000, 0x402000}, CPU: Some[uint64](3)},
		CpuSampleExt{TraceID: Some("0102030405060708090a0b0c0d0e0f10"), SpanID: Some("1112131415161718"),
			SpanRootName: Some("GET /"), Pid: Some[uint32](42)}))
	must(b, w.Flush())
	ev, err := NewReader(&buf).Next()
	must(b, err)
	l := LayoutOf(ev.Schema)
	var e CpuSampleEvent
	var x CpuSampleExt
	var sum uint64
	for b.Loop() {
		l.CpuSample(ev, &e, &x)
		sum += e.WorkerID + uint64(x.Pid.V)
	}
	if sum == 0 {
		b.Fatal("nothing read")
	}
}
