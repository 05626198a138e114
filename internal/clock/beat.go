package clock

import "time"

// UntilBeat returns how long to wait for a beat: a multiple of period on
// CLOCK_MONOTONIC, the clock of Go's timers. It is the last beat at most
// within from now, or when there is none (within < period), the first
// beat after that.
//
// Periodic work waits for beats rather than for a period from when it last
// ran, so that every loop of the process with the same period (or periods
// that are multiples of each other) wakes up at the same instant: one
// wake-up of the process, its threads and the runtime's sysmon serves them
// all. Each wake-up of an idle Go process costs tens of microseconds of
// scheduler work whatever it then does, and seven loops each waking once a
// second on their own made most of an idle collector's CPU.
func UntilBeat(period, within time.Duration) time.Duration {
	if period <= 0 {
		return max(within, 0)
	}
	now := time.Duration(Monotonic())
	last := (now + within) / period * period
	if last <= now {
		last += period
	}
	return last - now
}
