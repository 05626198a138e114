package profiler

import (
	"testing"
	"time"
)

func TestNextPoll(t *testing.T) {
	const ms = time.Millisecond
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
		if got := nextPoll(c.prev, c.now, c.d); got != want {
			t.Errorf("nextPoll(%d, %d, %v) = %v, want %v", c.prev, c.now, c.d, got, want)
		}
	}
}
