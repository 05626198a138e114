package wire

import (
	"bytes"
	"compress/gzip"
	"io"
	"math/rand/v2"
	"os"
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

// BenchmarkReadDemoTrace decodes the (decompressed) demo trace.
func BenchmarkReadDemoTrace(b *testing.B) {
	raw, err := os.ReadFile(testdata(b, "dial9-demo-trace.bin"))
	if err != nil {
		b.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		b.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		b.Fatal(err)
	}
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
