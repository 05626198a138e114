package profiler

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestNextPoll(t *testing.T) {
	const ms = time.Millisecond
	const spanReaderDrainAt = 1 << 18
	for _, c := range []struct {
		prev, now int
		d, want   time.Duration
	}{
		{0, 0, 100 * ms, spanReaderPollMax},                                          // idle
		{1000, 0, 100 * ms, spanReaderPollMin},                                       // drained since
		{0, spanReaderDrainAt / 2, 100 * ms, 100 * ms},                               // half-way in 100 ms: 100 ms to go
		{0, spanReaderDrainAt / 4, 100 * ms, 300 * ms},                               // a quarter in 100 ms
		{0, 1 << 10, 100 * ms, spanReaderPollMax},                                    // slow: capped
		{0, spanReaderDrainAt - 1, 10 * ms, spanReaderPollMin},                       // fast: floored
		{0, spanReaderDrainAt, 100 * ms, spanReaderPollMin},                          // at the mark
		{spanReaderDrainAt / 4, spanReaderDrainAt / 2, time.Second, time.Second * 2}, // capped at max
	} {
		want := min(c.want, spanReaderPollMax)
		if got := nextPoll(c.prev, c.now, c.d, spanReaderDrainAt); got != want {
			t.Errorf("nextPoll(%d, %d, %v) = %v, want %v", c.prev, c.now, c.d, got, want)
		}
	}
}

// A thread's last switch-out context outlives the cut: the off-CPU sample
// it is for comes when the thread runs again. Others go at the cut.
func TestForgetKeepsLastSwitchOut(t *testing.T) {
	var c contextStore
	const s = uint64(time.Second)
	for _, sc := range []SpanContext{
		{Pid: 1, Tid: 7, Time: 10 * s}, {Pid: 1, Tid: 7, Time: 20 * s},
		{Pid: 1, Tid: 7, Time: 11 * s, Switch: true}, {Pid: 1, Tid: 7, Time: 12 * s, Switch: true},
		{Pid: 1, Tid: 8, Time: 13 * s, Switch: true},
	} {
		c.add(sc)
	}
	c.forget(15 * s)
	for _, q := range []struct {
		tid  uint32
		out  bool
		at   uint64
		want bool
	}{
		{7, false, 10 * s, false}, {7, false, 20 * s, true},
		{7, true, 11 * s, false}, {7, true, 12 * s, true},
		{8, true, 13 * s, true},
	} {
		if _, ok := c.find(1, q.tid, q.out, q.at); ok != q.want {
			t.Errorf("after forget: context of tid %d (switch-out %v) at %d s found %v, want %v", q.tid, q.out, q.at/s, ok, q.want)
		}
	}
	c.forget(15*s + contextKeepOut)
	if _, ok := c.find(1, 8, true, 13*s); ok {
		t.Error("a switch-out context older than contextKeepOut was kept")
	}
}

// TestFindMatchesSearch: find, which looks after the context it found last
// before it searches, answers what a scan of the thread's contexts does,
// for samples in time order (the usual), out of order, repeated, between
// contexts and after forget shortened the list.
func TestFindMatchesSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var c contextStore
	var all []SpanContext
	tm := uint64(1_000_000_000)
	for range 3000 {
		tm += uint64(rng.IntN(3 * contextSkew))
		sc := SpanContext{Pid: 1, Tid: 5, Time: tm, CPUDelta: tm}
		c.add(sc)
		all = append(all, sc)
	}
	scan := func(t uint64, from uint64) (uint64, bool) {
		for _, sc := range all {
			if sc.Time >= from && sc.Time+contextSkew >= t && sc.Time <= t+contextSkew {
				return sc.CPUDelta, true
			}
		}
		return 0, false
	}
	check := func(what string, q uint64, from uint64) {
		t.Helper()
		want, wok := scan(q, from)
		got, ok := c.find(1, 5, false, q)
		if ok != wok || got.CPUDelta != want {
			t.Fatalf("%s: find at %d = %d %v, want %d %v", what, q, got.CPUDelta, ok, want, wok)
		}
	}
	for _, sc := range all {
		check("in order", sc.Time+uint64(rng.IntN(contextSkew)), 0)
	}
	for range 3000 {
		check("any order", all[0].Time+uint64(rng.Int64N(int64(tm-all[0].Time+2*contextSkew))), 0)
	}
	for _, sc := range all[:200] {
		check("repeated", sc.Time, 0)
		check("repeated", sc.Time, 0)
	}
	cut := all[1500].Time
	c.forget(cut)
	for _, sc := range all[1400:] {
		check("after forget", sc.Time, cut)
	}
}

// BenchmarkContextFind joins a report's samples of two threads at 999 Hz
// with their contexts, which the store holds for 6 s (the report's second
// and contextGrace): ns/op is per sample.
func BenchmarkContextFind(b *testing.B) {
	var c contextStore
	const period = 1_001_001
	var times []uint64
	for i := range 6 * 999 {
		for tid := uint32(1); tid <= 2; tid++ {
			tm := uint64(i)*period + uint64(tid)*1000
			c.add(SpanContext{Pid: 1, Tid: tid, Time: tm + 2000, CPUDelta: period})
			if i >= 5*999 {
				times = append(times, tm)
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		k := i % len(times)
		if _, ok := c.find(1, uint32(1+k%2), false, times[k]); !ok {
			b.Fatal("no context")
		}
	}
}
