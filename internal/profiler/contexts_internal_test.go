package profiler

import (
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
