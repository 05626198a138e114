package profiler_test

import (
	"bufio"
	"encoding/hex"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/internal/testchild"
)

// tokioChunk is one chunk of CPU work of the tokio child, on one thread.
type tokioChunk struct {
	start, end uint64 // Unix ns
	span       string // hex; "" outside a span
}

// TestTokioThreadContext: a tokio multi-thread runtime, 2 workers, 16
// concurrent requests in their own spans and one task in none, all
// yielding every 100-400 µs, so each worker interleaves many open spans.
// Each poll makes the task's span the worker's OTEP 4947 thread context.
// The child records, per chunk of CPU work, its thread, time and span; at
// 999 Hz every sample inside a chunk must be linked to that chunk's span,
// read by the eBPF program at the sample. No span is sent over OTLP: the
// thread join would have nothing to go on (and, with spans, could not tell
// the interleaved requests apart).
func TestTokioThreadContext(t *testing.T) {
	bin := testchild.TokioCtx(t)
	truthPath := filepath.Join(t.TempDir(), "truth")
	child := testchild.Start(t, bin, "-out", truthPath, "-duration", "4", "-tasks", "16", "-workers", "2")
	p, err := profiler.Open(profiler.Options{
		Pids:      []int{child.Pid},
		Perf:      perf.Options{Frequency: 999, Sched: true},
		Symbolize: true,
		EBPF:      profiler.EBPFRequired,
	})
	requireEBPF(t, err)
	child.Send(t, "go")
	if l := child.Line(t, 30*time.Second); l != "done" {
		t.Fatalf("child: %q, want done", l)
	}
	prog := p.Stats().EBPF
	snaps, err := p.Close()
	if err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	truth := readTokioTruth(t, truthPath, clock.Offset())

	var inSpan, right, wrong, missing, background, spurious, between int
	for _, sn := range snaps {
		if sn.Pid != child.Pid {
			continue
		}
		for _, s := range sn.Samples {
			if s.OffCPU() {
				continue
			}
			c, ok := findChunk(truth[s.Tid], s.Time)
			if !ok {
				between++
				continue
			}
			if c.span == "" {
				background++
				if s.Link.Linked {
					spurious++
				}
				continue
			}
			inSpan++
			switch {
			case !s.Link.Linked:
				missing++
			case hex.EncodeToString(s.Link.SpanID[:]) != c.span || s.Link.Source != profiler.SourceThreadContext:
				wrong++
			default:
				right++
			}
		}
	}
	t.Logf("samples in request chunks: %d, %d linked to their request's span (%.2f%%), %d to another, %d unlinked; in the unspanned task: %d, %d linked; %d between chunks",
		inSpan, right, pct(right, inSpan), wrong, missing, background, spurious, between)
	t.Logf("join %+v; program %+v", st.Joins, prog.Program)
	if inSpan < 2000 || background < 100 {
		t.Fatalf("too few samples in chunks: %d in requests, %d in the unspanned task", inSpan, background)
	}
	if float64(right) < 0.99*float64(inSpan) {
		t.Errorf("%.2f%% of the samples of requests linked to their own span, want ≥ 99%%", pct(right, inSpan))
	}
	if float64(spurious) > 0.01*float64(background) {
		t.Errorf("%d of %d samples of the unspanned task linked, want ≤ 1%%", spurious, background)
	}
}

// readTokioTruth parses the child's chunks by thread, in time order, with
// their times moved from CLOCK_MONOTONIC to Unix by offset. Each chunk is
// shrunk by 20 µs at both ends, more than the two clocks' offsets differ
// by (the test's and the profiler's readings): a sample there may be the
// code around the chunk's.
func readTokioTruth(t *testing.T, path string, offset int64) map[uint32][]tokioChunk {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const margin = 20_000
	byTid := map[uint32][]tokioChunk{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 5 {
			t.Fatalf("truth line %q", sc.Text())
		}
		tid, err1 := strconv.ParseUint(fs[0], 10, 32)
		start, err2 := strconv.ParseUint(fs[1], 10, 64)
		end, err3 := strconv.ParseUint(fs[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatalf("truth line %q", sc.Text())
		}
		if end-start <= 2*margin {
			continue
		}
		c := tokioChunk{start: uint64(int64(start) + offset + margin), end: uint64(int64(end) + offset - margin)}
		if fs[3] != "-" {
			c.span = fs[3]
		}
		byTid[uint32(tid)] = append(byTid[uint32(tid)], c)
	}
	for _, l := range byTid {
		sort.Slice(l, func(i, j int) bool { return l[i].start < l[j].start })
	}
	return byTid
}

func findChunk(l []tokioChunk, t uint64) (tokioChunk, bool) {
	i := sort.Search(len(l), func(i int) bool { return l[i].end >= t })
	if i < len(l) && l[i].start <= t {
		return l[i], true
	}
	return tokioChunk{}, false
}
