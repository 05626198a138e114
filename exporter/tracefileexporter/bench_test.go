package tracefileexporter

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/perfprof/perfprof/exporter/tracefileexporter/tracefiletest"
	"github.com/perfprof/perfprof/internal/convention"
)

// benchProfiles builds one push as the receiver sends it every report:
// samples of 16-frame stacks drawn from 200 distinct stacks (realistic
// repetition: a few hot paths), 8 threads, 1 ms apart per thread, half of
// them linked to one of 50 spans.
func benchProfiles(n int) pprofile.Profiles {
	rng := rand.New(rand.NewPCG(1, 2))
	b := tracefiletest.NewProfBuilder()
	locs := make([]int32, 400)
	for i := range locs {
		locs[i] = b.Location(0x400000+uint64(i)*0x40, tracefiletest.F(fmt.Sprintf("crate::module::function_%d", i), "/src/lib.rs", int64(i)))
	}
	stacks := make([]int32, 200)
	for i := range stacks {
		st := make([]int32, 16)
		for j := range st {
			st[j] = locs[rng.IntN(len(locs))]
		}
		stacks[i] = b.Stack(st...)
	}
	var threads [8][]int32
	for th := range threads {
		threads[th] = []int32{b.Attr(convention.ThreadID, 1000+th), b.Attr(convention.ThreadName, fmt.Sprintf("tokio-rt-worker-%d", th)),
			b.Attr(convention.WorkerID, th), b.Attr(convention.CPU, th%2)}
	}
	links := make([]int32, 50)
	for i := range links {
		links[i] = b.Link([16]byte{byte(i), 1}, [8]byte{byte(i), 2})
	}
	p := b.Profile(4242, "bench", false)
	base := uint64(time.Now().UnixNano())
	for i := range n {
		th := i % 8
		link := int32(0)
		if i%2 == 0 {
			link = links[(i/64)%len(links)]
		}
		// Zipf-like: a few stacks take most samples.
		st := stacks[min(int(rng.ExpFloat64()*20), len(stacks)-1)]
		b.Sample(p, st, link, threads[th], []uint64{base + uint64(i/8)*1_000_000 + uint64(th)*1000}, []int64{1})
	}
	return b.Profiles
}

// BenchmarkExportProfiles measures the exporter's whole path for CPU
// samples: pdata → events → TRC → segment file, and the bytes per sample
// before and after compression of the sealed segments. ns/op is per push
// of 10 000 samples.
func BenchmarkExportProfiles(b *testing.B) {
	for _, format := range []string{FormatTRC, FormatTokioTRC} {
		b.Run(format, func(b *testing.B) {
			const perPush = 10_000
			pd := benchProfiles(perPush)
			dir := b.TempDir()
			cfg := createDefaultConfig()
			cfg.Directory, cfg.Format = dir, format
			cfg.MaxTotalSize = 0
			tf := newTestFile(b, dir, func(c *Config) { *c = *cfg })
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := tf.pushProfiles(b.Context(), pd); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			raw := tf.rot.Stats().BytesWritten
			sec := b.Elapsed().Seconds()
			samples := float64(b.N) * perPush
			if err := tf.shutdown(b.Context()); err != nil {
				b.Fatal(err)
			}
			var gz int64
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if strings.HasSuffix(e.Name(), ".gz") {
					fi, _ := os.Stat(filepath.Join(dir, e.Name()))
					gz += fi.Size()
				}
			}
			b.ReportMetric(samples/sec, "samples/s")
			b.ReportMetric(float64(raw)/1e6/sec, "MB/s")
			b.ReportMetric(float64(raw)/samples, "raw-B/sample")
			b.ReportMetric(float64(gz)/samples, "gz-B/sample")
		})
	}
}

// BenchmarkIntervalsSteady adds one worker's polls at 625 a second (the
// soak's 5 000 spans/s over 8 workers) to a set that already holds the
// maxIntervals' worth, so that every add also forgets the oldest.
func BenchmarkIntervalsSteady(b *testing.B) {
	const gap = uint64(1e9 / 625)
	var s intervals
	t := uint64(1e12)
	for range maxIntervals {
		s.add(t, t+gap/2)
		t += gap
	}
	b.ResetTimer()
	for range b.N {
		s.add(t, t+gap/2)
		t += gap
	}
	b.ReportMetric(float64(s.len()), "intervals")
	b.ReportMetric(float64(cap(s.iv)*16), "bytes/worker")
}

// BenchmarkSortEvents orders the events of one push from the receiver at
// 999 Hz over 10 s: 20 000 samples in 500 groups (a thread and a stack),
// each group's timestamps in their own order, the groups interleaved in
// time, as pprofile samples carry them.
func BenchmarkSortEvents(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	const groups, perGroup = 500, 40
	var evs []evRef
	for g := range groups {
		ts := uint64(0)
		for range perGroup {
			ts += uint64(rng.Int64N(2 * 10e9 / perGroup))
			evs = append(evs, evRef{ts: ts, idx: int32(g)})
		}
	}
	bt := &batch{}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		bt.evs = append(bt.evs[:0], evs...)
		bt.sort()
	}
}

// BenchmarkExportSpans measures the exporter's path for spans (pdata →
// span contract events → segment), without and with a keep rule (the
// running p99 of the name: every span is offered and observed). ns/op is
// per push of 1 000 spans on 20 threads.
func BenchmarkExportSpans(b *testing.B) {
	const perPush = 1000
	td := ptrace.NewTraces()
	base := uint64(time.Now().UnixNano())
	for i := range perPush {
		start := base + uint64(i)*uint64(time.Millisecond)
		tracefiletest.AddSpan(td, "svc", 1, "GET /", [16]byte{byte(i), byte(i >> 8)}, [8]byte{byte(i), byte(i >> 8), 1}, [8]byte{},
			start, start+uint64(time.Millisecond)+uint64(i%7)*1000, map[string]any{convention.ThreadID: 10 + i%20})
	}
	for _, kept := range []bool{false, true} {
		b.Run(map[bool]string{false: "keep=off", true: "keep=p99"}[kept], func(b *testing.B) {
			dir := b.TempDir()
			tf := newTestFile(b, dir, func(c *Config) {
				// No gzip in the background: it takes the other CPU.
				c.MaxTotalSize, c.Compress = 0, false
				if kept {
					c.Keep.Rules = []KeepRule{{SpanName: "GET /", MinDuration: time.Second, Percentile: 99}}
				}
			})
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := tf.pushTraces(b.Context(), td); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)*perPush/b.Elapsed().Seconds(), "spans/s")
			if err := tf.shutdown(b.Context()); err != nil {
				b.Fatal(err)
			}
		})
	}
}
