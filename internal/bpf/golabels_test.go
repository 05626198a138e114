//go:build amd64

package bpf_test

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/bpf"
	"github.com/perfprof/perfprof/internal/goruntime"
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/testchild"
)

// load loads the program, with the kernel's run-time statistics for the
// tests to say what it costs, or skips the test (fails it with
// PERFPROF_REQUIRE_PERF=1) when the kernel or the privileges do not allow
// it.
func load(t *testing.T, opts bpf.Options) *bpf.Program {
	t.Helper()
	opts.RunStats = true
	p, err := bpf.Load(opts)
	testchild.RequireKernel(t, "BPF", err, bpf.ErrPermission, bpf.ErrNotSupported)
	t.Cleanup(func() { p.Close() })
	return p
}

// sample is a perf sample of the child with the record paired with it.
type sample struct {
	tid    uint32
	time   uint64
	rec    bpf.Record
	paired bool
}

// profile samples pid at 999 Hz with the program attached until stop
// returns, pairing records with samples as the engine would: pair, and on
// a miss drain the ring buffer and pair again. stop may ask how many
// samples were read so far.
func profile(t *testing.T, p *bpf.Program, scope perf.Scope, pid int, stop func(read func() int)) ([]sample, *pairer) {
	t.Helper()
	s, err := perf.Open(perf.Options{Scope: scope, Frequency: 999, BPFProgram: p.FD()})
	testchild.RequirePerf(t, err)
	var (
		mu      sync.Mutex
		samples []sample
		skew    uint64 = maxSkew
	)
	if v, err := strconv.ParseUint(os.Getenv("SKEW_DEBUG"), 10, 64); err == nil {
		skew = v
	}
	pairer := newPairer(skew)
	done := make(chan error, 1)
	go func() {
		done <- s.Read(func(r *perf.Record) {
			if r.Type != perf.RecordSample || r.Sample.Kind != perf.EventCPUClock || int(r.Sample.Pid) != pid {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			smp := sample{tid: r.Sample.Tid, time: r.Sample.Time}
			smp.rec, smp.paired = pairer.pair(smp.tid, smp.time)
			if !smp.paired {
				if _, err := p.Drain(pairer.add); err != nil {
					t.Errorf("Drain: %v", err)
				}
				smp.rec, smp.paired = pairer.pair(smp.tid, smp.time)
			}
			samples = append(samples, smp)
		})
	}()
	if err := s.Attach(pid); err != nil {
		s.Close()
		t.Fatalf("Attach: %v", err)
	}
	stop(func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(samples)
	})
	s.Close() // its Read delivers what the rings hold before it returns
	if err := <-done; err != nil {
		t.Errorf("Read: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return samples, pairer
}

type truthSlice struct {
	labelled   bool
	start, end uint64
	span       [8]byte
	trace      [16]byte
	gaps       [][2]uint64 // the goroutine did not run: samples here prove nothing
}

// readTruth parses golabels' ground truth by thread; slices that moved
// between threads or had too many gaps to list are counted and left out.
func readTruth(t *testing.T, path string) (map[uint32][]truthSlice, int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	byTid := map[uint32][]truthSlice{}
	left := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		n := func(s string) uint64 {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				t.Fatalf("ground truth %q: %v", sc.Text(), err)
			}
			return v
		}
		if len(fs) < 7 || fs[1] != fs[2] || slices.Contains(fs, "many") {
			left++
			continue
		}
		s := truthSlice{labelled: fs[0] == "L", start: n(fs[3]), end: n(fs[4])}
		if s.labelled {
			hex.Decode(s.span[:], []byte(fs[5]))
			hex.Decode(s.trace[:], []byte(fs[6]))
		}
		for _, g := range fs[7:] {
			a, b, _ := strings.Cut(g, "-")
			s.gaps = append(s.gaps, [2]uint64{n(a), n(b)})
		}
		tid := uint32(n(fs[1]))
		byTid[tid] = append(byTid[tid], s)
	}
	for _, ss := range byTid {
		slices.SortFunc(ss, func(a, b truthSlice) int { return int(int64(a.start - b.start)) })
	}
	return byTid, left
}

func find(ss []truthSlice, t uint64) (truthSlice, bool) {
	i, _ := slices.BinarySearchFunc(ss, t, func(s truthSlice, t uint64) int {
		switch {
		case s.end < t:
			return -1
		case s.start > t:
			return 1
		}
		return 0
	})
	if i < len(ss) && ss[i].start <= t && t <= ss[i].end {
		for _, g := range ss[i].gaps {
			if g[0] <= t && t <= g[1] {
				return truthSlice{}, false
			}
		}
		return ss[i], true
	}
	return truthSlice{}, false
}

func percentile(v []int64, p float64) int64 {
	if len(v) == 0 {
		return 0
	}
	return v[min(len(v)-1, int(p*float64(len(v))))]
}

// TestGoLabels profiles golabels' goroutines, which are not locked to
// threads, and checks the span id of every sample against the ground
// truth: which slice ran on that thread at that time.
func TestGoLabels(t *testing.T) {
	for _, tc := range []struct {
		name      string
		scope     perf.Scope
		build     []string
		spanKey   string
		traceKey  string
		fromTable bool
		toolchain string // an older Go release to build the child with
	}{
		{name: "process", scope: perf.ScopeProcess},
		{name: "system", scope: perf.ScopeSystem},
		{name: "nodwarf-keys", scope: perf.ScopeProcess, build: []string{"-ldflags=-w"},
			spanKey: "otel.span_id", traceKey: "otel.trace_id", fromTable: true},
		// Older releases: 1.24 was the first to keep labels in a list,
		// 1.25 moved g's fields.
		{name: "go1.24", scope: perf.ScopeProcess, toolchain: "go1.24.13"},
		{name: "go1.25", scope: perf.ScopeProcess, toolchain: "go1.25.5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := load(t, bpf.Options{SpanKey: tc.spanKey, TraceKey: tc.traceKey})
			bin := testchild.Build(t, "golabels", tc.build...)
			if tc.toolchain != "" {
				bin = testchild.BuildWithToolchain(t, tc.toolchain, "golabels")
			}
			truthPath := filepath.Join(t.TempDir(), "truth")
			args := []string{"-out", truthPath, "-duration", "3s"}
			if tc.spanKey != "" {
				args = append(args, "-span-key", tc.spanKey, "-trace-key", tc.traceKey)
			}
			child := testchild.Start(t, bin, args...)
			layout, err := goruntime.ReadFile(fmt.Sprintf("/proc/%d/exe", child.Pid))
			if err != nil {
				t.Fatal(err)
			}
			if layout.FromTable != tc.fromTable {
				t.Fatalf("layout FromTable %v, want %v", layout.FromTable, tc.fromTable)
			}
			if tc.toolchain != "" && !strings.HasPrefix(layout.GoVersion, tc.toolchain) {
				t.Fatalf("child built by %s, want %s", layout.GoVersion, tc.toolchain)
			}
			if err := p.AddTarget(child.Pid, layout); err != nil {
				t.Fatal(err)
			}
			before, _ := p.Stats()
			samples, pairer := profile(t, p, tc.scope, child.Pid, func(func() int) {
				child.Send(t, "go")
				if l := child.Line(t, 30*time.Second); !strings.HasPrefix(l, "done") {
					t.Fatalf("child: %q", l)
				}
			})
			after, err := p.Stats()
			if err != nil {
				t.Fatal(err)
			}
			truth, left := readTruth(t, truthPath)

			var labelled, right, wrong, missing, unlabelled, spurious, traceWrong, unpaired, between int
			var dist []int64
			for _, s := range samples {
				if !s.paired {
					unpaired++
				} else {
					dist = append(dist, int64(s.time-s.rec.Time))
				}
				sl, ok := find(truth[s.tid], s.time)
				if !ok {
					between++
					continue
				}
				if !sl.labelled {
					unlabelled++
					if s.rec.HasSpan() {
						spurious++
					}
					continue
				}
				labelled++
				switch {
				case !s.rec.HasSpan():
					missing++
				case s.rec.SpanID != sl.span:
					wrong++
				default:
					right++
					if !s.rec.HasTrace() || s.rec.TraceID != sl.trace {
						traceWrong++
					}
				}
			}
			slices.Sort(dist)
			st := bpf.Stats{
				Samples: after.Samples - before.Samples, Dropped: after.Dropped - before.Dropped,
				NoGoroutine: after.NoGoroutine - before.NoGoroutine, NoLabels: after.NoLabels - before.NoLabels,
				NoSpan: after.NoSpan - before.NoSpan, BadValue: after.BadValue - before.BadValue,
				Faults: after.Faults - before.Faults, RunCount: after.RunCount - before.RunCount,
				RunTime: after.RunTime - before.RunTime,
			}
			t.Logf("%d samples of the child: %d in labelled slices (%d right span, %d wrong, %d without; %d right span but wrong trace), %d in unlabelled slices (%d with a span), %d between slices or in their gaps; %d slices left out (moved threads or too many gaps)",
				len(samples), labelled, right, wrong, missing, traceWrong, unlabelled, spurious, between, left)
			t.Logf("pairing: %d paired, %d unpaired, %d records left without a sample; sample time - record time: min %d ns, p1 %d, p50 %d, p99 %d, max %d",
				len(dist), unpaired, pairer.pending(), percentile(dist, 0), percentile(dist, 0.01), percentile(dist, 0.5), percentile(dist, 0.99), percentile(dist, 1))
			t.Logf("program: %+v", st)
			if st.RunCount > 0 {
				t.Logf("program run time: %d ns per run over %d runs (all samples on the events, targets or not)", int64(st.RunTime)/int64(st.RunCount), st.RunCount)
			}

			if labelled < 500 || unlabelled < 300 {
				t.Fatalf("too few samples in slices: %d labelled, %d unlabelled", labelled, unlabelled)
			}
			if float64(right) < 0.99*float64(labelled) {
				t.Errorf("%d of %d samples in labelled slices have the right span id (%.2f%%), want ≥ 99%%", right, labelled, 100*float64(right)/float64(labelled))
			}
			if float64(spurious) > 0.01*float64(unlabelled) {
				t.Errorf("%d of %d samples in unlabelled slices have a span id, want ≤ 1%%", spurious, unlabelled)
			}
			if traceWrong > labelled/100 {
				t.Errorf("%d samples with the right span have a wrong trace id", traceWrong)
			}
			if float64(unpaired) > 0.01*float64(len(samples)) {
				t.Errorf("%d of %d samples found no record", unpaired, len(samples))
			}
			if st.Faults > st.Samples/100 || st.BadValue > 0 || st.Dropped > 0 {
				t.Errorf("faults %d, bad values %d, dropped %d of %d", st.Faults, st.BadValue, st.Dropped, st.Samples)
			}
			if left > len(samples)/20 {
				t.Errorf("%d slices left out of the ground truth: it is unreliable (a busy machine?)", left)
			}
		})
	}
}

// A C program is no Go target: goruntime refuses it, and with the
// program attached but no target added its samples come through and no
// record is written. Added anyway with a Go layout, its samples are kept
// and none carries a span.
func TestNotGo(t *testing.T) {
	testchild.LookTool(t, "gcc")
	p := load(t, bpf.Options{})
	dir := t.TempDir()
	src := filepath.Join(dir, "spin.c")
	os.WriteFile(src, []byte(`#include <stdio.h>
#include <unistd.h>
volatile unsigned long sink;
int main(void) {
	printf("ready %d\n", getpid());
	fflush(stdout);
	for (;;) sink = sink * 6364136223846793005UL + 1;
}
`), 0o644)
	bin := filepath.Join(dir, "spin")
	if out, err := exec.Command("gcc", "-O1", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	child := testchild.Start(t, bin)
	if _, err := goruntime.ReadFile(fmt.Sprintf("/proc/%d/exe", child.Pid)); !errors.Is(err, goruntime.ErrNotGo) {
		t.Fatalf("goruntime.ReadFile of a C program: %v, want ErrNotGo", err)
	}
	p.Drain(func(*bpf.Record) {}) // what earlier tests left
	before, _ := p.Stats()
	// About a second of the child's samples, however slowly a busy
	// machine runs it.
	enough := func(read func() int) {
		testchild.WaitFor(t, 30*time.Second, "600 samples", func() bool { return read() >= 600 })
	}
	samples, _ := profile(t, p, perf.ScopeProcess, child.Pid, enough)
	after, _ := p.Stats()
	n, _ := p.Drain(func(*bpf.Record) {})
	t.Logf("not a target: %d samples, %d records, faults %d", len(samples), n, after.Faults-before.Faults)
	if len(samples) < 500 || n != 0 || after.Samples != before.Samples || after.Faults != before.Faults {
		t.Errorf("not a target: %d samples (want ~1000), %d records and %d runs (want 0), %d faults", len(samples), n, after.Samples-before.Samples, after.Faults-before.Faults)
	}

	known, _ := goruntime.Known("go1.26")
	known.TLSG = -8
	if err := p.AddTarget(child.Pid, known); err != nil {
		t.Fatal(err)
	}
	before = after
	samples, _ = profile(t, p, perf.ScopeProcess, child.Pid, enough)
	after, _ = p.Stats()
	withSpan := 0
	for _, s := range samples {
		if s.rec.HasSpan() {
			withSpan++
		}
	}
	t.Logf("added as a Go target: %d samples, %d runs: no goroutine %d, faults %d, no labels %d", len(samples), after.Samples-before.Samples, after.NoGoroutine-before.NoGoroutine, after.Faults-before.Faults, after.NoLabels-before.NoLabels)
	if len(samples) < 500 || withSpan > 0 {
		t.Errorf("added as a Go target: %d samples (want ~1000), %d with a span (want 0)", len(samples), withSpan)
	}
}
