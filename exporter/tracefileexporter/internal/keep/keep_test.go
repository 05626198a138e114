package keep

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/counter"
)

const ms = int64(time.Millisecond)

// The running p99 of a name: of 10 000 durations spread over 1 to 10 ms,
// the p99 is 9.9 ms, known within a bucket (9%); a bimodal run's p99 is
// its slow mode, and the counts follow the latest spans.
func TestHistQuantile(t *testing.T) {
	var h hist
	if _, ok := h.quantile(0.99); ok {
		t.Fatal("a quantile of nothing")
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10_000 {
		h.observe(ms + r.Int64N(9*ms))
	}
	q, ok := h.quantile(0.99)
	if !ok || float64(q) < 9.9*float64(ms) || float64(q) > 9.9*float64(ms)*1.1 {
		t.Errorf("p99 of uniform 1..10ms = %v, want 9.9ms within 10%%", time.Duration(q))
	}
	// Then the spans get 100 times slower: after a few windows the p50
	// is theirs.
	for range 4 * histWindow {
		h.observe(100*ms + r.Int64N(900*ms))
	}
	if q, _ := h.quantile(0.5); q < 100*ms {
		t.Errorf("p50 after the shift %v, want above 100ms: the histogram does not follow", time.Duration(q))
	}
	if h.total >= 2*histWindow {
		t.Errorf("total %d: the counts were not halved", h.total)
	}
	for _, d := range []int64{0, 1, 2, 1000, 1 << 41, 1 << 62} {
		if b := bucket(d); b < 0 || b >= histLen || (d > 1 && d < 1<<histMaxLog && upper(b) <= d) {
			t.Errorf("bucket(%d) = %d, upper %d", d, b, upper(b))
		}
	}
}

// segFile creates a sealed segment file of n in dir.
func segFile(t *testing.T, dir string, n int, suffix string, size int) string {
	t.Helper()
	name := "trace." + strconv.Itoa(n) + suffix
	if err := os.WriteFile(filepath.Join(dir, name), make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

type clockT struct{ now time.Time }

func (c *clockT) Now() time.Time { return c.now }

func newKeeper(t *testing.T, dir string, clk *clockT, counts *counter.Set, mod func(*Options)) *Keeper {
	t.Helper()
	opts := Options{
		Dir: dir, FilePrefix: "trace", Compressed: true,
		Rules:    []Rule{{SpanName: "slow", MinDuration: 100 * time.Millisecond}, {SpanName: "p", Percentile: 99}},
		Lookback: time.Second, Settle: 30 * time.Second, For: time.Hour,
		BootID: "abcd-1", Now: clk.Now, Counts: counts,
		OnError: func(err error) { t.Error(err) },
	}
	if mod != nil {
		mod(&opts)
	}
	k, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

// A span over its rule holds the segments with events from a lookback
// before its start to its end, those written before and during the
// settle time; after it, once they are sealed, its manifest lists them;
// the others are not held; at the end of For the keep is let go.
func TestKeepLifecycle(t *testing.T) {
	dir := t.TempDir()
	clk := &clockT{time.Unix(1_800_000_000, 0)}
	counts := counter.NewSet()
	k := newKeeper(t, dir, clk, counts, nil)
	base := clk.now.UnixNano()
	// Segments 0..2 written before the span came: 0 ends before the
	// lookback, 1 holds the lookback, 2 the span's start.
	k.Wrote(0, iv(base-10_000*ms, base-2_000*ms))
	k.Wrote(1, iv(base-1_500*ms, base-900*ms))
	k.Wrote(2, iv(base-900*ms, base))
	for _, n := range []int{0, 1, 2} {
		segFile(t, dir, n, ".bin.gz", 1000)
	}
	span := Span{Name: "slow", Service: "svc", TraceID: [16]byte{1}, SpanID: [8]byte{2}, Start: base - 500*ms, End: base - 100*ms}
	if k.Offer(Span{Name: "slow", Start: base, End: base + 50*ms}) {
		t.Error("a fast span was kept")
	}
	if k.Offer(Span{Name: "other", Start: base, End: base + 500*ms}) {
		t.Error("a span of another name was kept")
	}
	if !k.Offer(span) || !k.Offer(span) {
		t.Fatal("the slow span was not kept (or not again when offered twice)")
	}
	if n := counts.Load(CKept); n != 1 {
		t.Errorf("kept %d, want 1", n)
	}
	// Its samples come later, in segment 3 (still active) and 4; 5 has
	// events after its end only.
	k.Wrote(3, iv(base-400*ms, base+5_000*ms))
	segFile(t, dir, 3, ".bin.active", 2000)
	k.Wrote(5, iv(base+10_000*ms, base+12_000*ms))
	for n, want := range []bool{false, true, true, true, false, false} {
		if k.Held(n) != want {
			t.Errorf("segment %d held %v, want %v", n, !want, want)
		}
	}
	m := readManifest(t, dir, "slow-01000000000000000000000000000000-0200000000000000")
	if m.Complete || m.Metadata["trace_id"] != "01000000000000000000000000000000" || m.Metadata["duration_ns"] != "400000000" || m.Metadata["threshold_ns"] != "100000000" {
		t.Errorf("manifest at the keep: %+v", m)
	}
	// Settle time over, but segment 3 still active: not complete.
	clk.now = clk.now.Add(31 * time.Second)
	k.Tick()
	if m := readManifest(t, dir, m.DumpID); m.Complete {
		t.Fatal("complete while a segment is being written")
	}
	os.Remove(filepath.Join(dir, "trace.3.bin.active"))
	segFile(t, dir, 3, ".bin", 2000) // sealed, being compressed
	k.Tick()
	if m := readManifest(t, dir, m.DumpID); m.Complete {
		t.Fatal("complete while a segment is not compressed")
	}
	os.Remove(filepath.Join(dir, "trace.3.bin"))
	segFile(t, dir, 3, ".bin.gz", 2000)
	k.Tick()
	m = readManifest(t, dir, m.DumpID)
	if !m.Complete || !slices.Equal(m.Files, []string{"trace.1.bin.gz", "trace.2.bin.gz", "trace.3.bin.gz"}) || m.SegmentsProcessed != 3 {
		t.Errorf("complete manifest: %+v", m)
	}
	if b := counts.Load(CKeptBytes); b != 4000 {
		t.Errorf("kept bytes %d, want 4000", b)
	}
	// Written after completion: not taken.
	k.Wrote(6, iv(base-400*ms, base))
	if k.Held(6) {
		t.Error("a segment written after the manifest was complete is held")
	}
	// The end of For.
	clk.now = clk.now.Add(time.Hour)
	k.Tick()
	if k.Held(1) || counts.Load(CExpired) != 1 {
		t.Errorf("after keep.for: held %v, expired %d", k.Held(1), counts.Load(CExpired))
	}
	if _, err := os.Stat(filepath.Join(ManifestDir(dir, "trace"), m.DumpID+".json")); !os.IsNotExist(err) {
		t.Errorf("the expired manifest is still there: %v", err)
	}
}

func readManifest(t *testing.T, dir, id string) *Manifest {
	t.Helper()
	m, err := ReadManifest(filepath.Join(ManifestDir(dir, "trace"), id+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A restart keeps what was kept: a complete manifest holds its files, a
// settling one the segments of the range log, and goes on settling.
func TestKeepRestart(t *testing.T) {
	dir := t.TempDir()
	clk := &clockT{time.Unix(1_800_000_000, 0)}
	k := newKeeper(t, dir, clk, nil, nil)
	base := clk.now.UnixNano()
	for n := range 4 {
		k.Wrote(n, iv(base+int64(n)*1000*ms, base+int64(n+1)*1000*ms-1))
		segFile(t, dir, n, ".bin.gz", 100)
	}
	k.Offer(Span{Name: "slow", SpanID: [8]byte{1}, Start: base + 1200*ms, End: base + 1500*ms}) // 0 (lookback), 1
	clk.now = clk.now.Add(time.Minute)
	k.Tick()
	k.Offer(Span{Name: "slow", SpanID: [8]byte{2}, Start: base + 3200*ms, End: base + 3500*ms}) // 2, 3
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	k = newKeeper(t, dir, clk, nil, nil)
	for n, want := range []bool{true, true, true, true} {
		if k.Held(n) != want {
			t.Errorf("after the restart, segment %d held %v", n, k.Held(n))
		}
	}
	clk.now = clk.now.Add(time.Minute)
	k.Tick()
	m := readManifest(t, dir, "slow-00000000000000000000000000000000-0200000000000000")
	if !m.Complete || !slices.Equal(m.Files, []string{"trace.2.bin.gz", "trace.3.bin.gz"}) {
		t.Errorf("the keep that settled across the restart: %+v", m)
	}
}

// The running percentile keeps the outliers of a name once it knows the
// name, whatever its usual duration; max_size lets the oldest keeps go.
func TestKeepPercentileAndMaxBytes(t *testing.T) {
	dir := t.TempDir()
	clk := &clockT{time.Unix(1_800_000_000, 0)}
	counts := counter.NewSet()
	k := newKeeper(t, dir, clk, counts, func(o *Options) { o.MaxBytes = 2500 })
	base := clk.now.UnixNano()
	r := rand.New(rand.NewPCG(3, 4))
	kept := 0
	for i := range 5000 {
		d := 2*ms + r.Int64N(ms) // 2..3 ms
		slow := i%1000 == 999
		if slow {
			d = 20 * ms
		}
		start := base + int64(i)*10*ms
		if k.Offer(Span{Name: "p", SpanID: [8]byte{byte(i), byte(i >> 8)}, Start: start, End: start + d}) {
			kept++
			if !slow {
				t.Errorf("span %d of %v kept", i, time.Duration(d))
			}
		} else if slow {
			t.Errorf("slow span %d not kept", i)
		}
	}
	if kept != 5 {
		t.Errorf("%d kept, want the 5 slow ones", kept)
	}
	// Each keep holds a segment of 1000 bytes: over 2500, the oldest go.
	for i := range 5 {
		start := base + int64(i*1000+999)*10*ms
		k.Wrote(i, iv(start, start+ms))
		segFile(t, dir, i, ".bin.gz", 1000)
	}
	k.Tick()
	if n := counts.Load(CReleased); n != 3 || counts.Load(CKeptBytes) != 2000 || k.Held(0) || !k.Held(4) {
		t.Errorf("released %d, kept bytes %d, held 0 %v, 4 %v", n, counts.Load(CKeptBytes), k.Held(0), k.Held(4))
	}
}

func iv(from, to int64) [][2]int64 { return [][2]int64{{from, to}} }

// A segment's times: intervals closer than joinGap join, far ones stay
// apart, at most maxIntervals (the closest merge first); overlaps tells
// a keep's range from the gaps between them.
func TestTimes(t *testing.T) {
	var tm times
	tm = tm.add([2]int64{100 * ms, 200 * ms})
	tm = tm.add([2]int64{1000 * ms, 1100 * ms})
	tm = tm.add([2]int64{230 * ms, 240 * ms}) // joins the first
	tm = tm.add([2]int64{500 * ms, 500 * ms})
	want := times{{100 * ms, 240 * ms}, {500 * ms, 500 * ms}, {1000 * ms, 1100 * ms}}
	if !slices.Equal(tm, want) {
		t.Fatalf("times %v, want %v", tm, want)
	}
	for _, c := range []struct {
		from, to int64
		want     bool
	}{
		{0, 99 * ms, false}, {0, 100 * ms, true}, {241 * ms, 499 * ms, false}, {300 * ms, 600 * ms, true},
		{501 * ms, 999 * ms, false}, {1050 * ms, 1050 * ms, true}, {1101 * ms, 2000 * ms, false}, {0, 5000 * ms, true},
	} {
		if got := tm.overlaps(c.from, c.to); got != c.want {
			t.Errorf("overlaps(%d, %d ms) = %v", c.from/ms, c.to/ms, got)
		}
	}
	// A bridge over all of them.
	if tm = tm.add([2]int64{150 * ms, 1050 * ms}); len(tm) != 1 || tm[0] != [2]int64{100 * ms, 1100 * ms} {
		t.Errorf("bridged: %v", tm)
	}
	// Many far intervals: bounded, and every one still covered.
	tm = nil
	for i := range 1000 {
		at := int64(i) * 1000 * ms
		tm = tm.add([2]int64{at, at + ms})
	}
	if len(tm) > maxIntervals {
		t.Errorf("%d intervals, bound %d", len(tm), maxIntervals)
	}
	for i := range 1000 {
		if at := int64(i) * 1000 * ms; !tm.overlaps(at, at) {
			t.Fatalf("interval %d lost", i)
		}
	}
}
