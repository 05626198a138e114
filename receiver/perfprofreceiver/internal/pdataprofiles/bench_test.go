package pdataprofiles

import (
	"os"
	"testing"

	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/internal/profiler/profilertest"
)

// BenchmarkBuildProfiles turns one report of 10 000 samples over 64 stacks
// (of this test binary, symbolized by the engine) and 8 threads, half of
// them linked to 50 spans, into pdata profiles.
func BenchmarkBuildProfiles(b *testing.B) {
	self, err := perf.ReadProcess(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	src := profilertest.NewRecords()
	p, err := profiler.Open(profiler.Options{Pids: []int{self.Pid}, Records: src, Procs: profilertest.NewProcs(self), Symbolize: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = p.Close() })
	chains := profilertest.Callchains(b, 64)
	for i := 0; i < 10000; i++ {
		src.Push(profilertest.Sample(self.Pid, 1+i%8, uint64(i)*1000, chains[i%len(chains)][1:]...))
	}
	src.Sync()
	snaps := p.Take(true)
	if len(snaps) != 1 {
		b.Fatalf("%d snapshots", len(snaps))
	}
	for i := range snaps[0].Samples {
		l := &snaps[0].Samples[i].Link
		*l = profiler.Link{Linked: i%2 == 0, TraceID: [16]byte{byte(i % 50)}, SpanID: [8]byte{byte(i % 50), 1}, Worker: int64(i % 4), Root: "GET /items"}
		if !l.Linked {
			l.Root = ""
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pd, n := Build(snaps, Params{Frequency: 99})
		if n != 10000 || pd.SampleCount() == 0 {
			b.Fatalf("built %d samples", n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10000, "ns/sample")
}
