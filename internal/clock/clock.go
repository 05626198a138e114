// Package clock maps the kernel's CLOCK_MONOTONIC timestamps, which perf
// records carry, to Unix time, which OTLP carries.
//
// The offset realtime − monotonic is measured as one realtime reading
// between two monotonic ones, paired with their midpoint, and is meant to be
// re-measured periodically so that steps of the wall clock are followed. A
// reading costs a few clock_gettime calls: measure per report, never per
// sample.
//
// UntilBeat times periodic work so that the loops of one process wake up
// together.
package clock

import (
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Monotonic returns CLOCK_MONOTONIC in nanoseconds.
//
// It is read through Go's monotonic clock, which is CLOCK_MONOTONIC read
// in the vDSO, from an origin measured once: unix.ClockGettime is a
// system call, and a system call of a goroutine wakes the runtime's
// sysmon thread whenever the process was idle (at 999 Hz the perf reader's
// passes made 60 such wake-ups a second).
func Monotonic() uint64 { return monoOrigin + uint64(time.Since(timeOrigin)) }

// monoOrigin is CLOCK_MONOTONIC at timeOrigin, from the closest of three
// pairs of readings.
var timeOrigin, monoOrigin = func() (time.Time, uint64) {
	var origin time.Time
	var mono uint64
	best := time.Duration(-1)
	for range 3 {
		var ts unix.Timespec
		a := time.Now()
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		gap := time.Since(a)
		if best < 0 || gap < best {
			best, origin, mono = gap, a.Add(gap/2), uint64(ts.Nano())
		}
	}
	return origin, mono
}()

// Offset returns realtime − monotonic in nanoseconds. Of three tries it
// keeps the one whose monotonic readings were closest together, the least
// disturbed by preemption.
func Offset() int64 {
	var best, bestGap int64 = 0, -1
	for i := 0; i < 3; i++ {
		var a, r, b unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &a)
		_ = unix.ClockGettime(unix.CLOCK_REALTIME, &r)
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &b)
		gap := b.Nano() - a.Nano()
		if bestGap < 0 || gap < bestGap {
			bestGap = gap
			best = r.Nano() - (a.Nano() + gap/2)
		}
	}
	return best
}

// Mapper converts between monotonic timestamps and Unix nanoseconds with an
// offset that Refresh measures again. It is safe for concurrent use: spans
// are converted on the OTLP handlers' goroutines while the report loop
// refreshes.
type Mapper struct{ offset atomic.Int64 }

// NewMapper measures the offset now.
func NewMapper() *Mapper {
	m := &Mapper{}
	m.Refresh()
	return m
}

// Refresh measures the offset again.
func (m *Mapper) Refresh() { m.offset.Store(Offset()) }

// Fixed returns the offset measured last. Times converted with it convert
// back exactly with it, whether or not the Mapper is refreshed between:
// convert a batch with one Fixed, and hand it on with the batch.
func (m *Mapper) Fixed() Fixed { return Fixed(m.offset.Load()) }

// Unix converts a CLOCK_MONOTONIC timestamp to Unix nanoseconds.
func (m *Mapper) Unix(mono uint64) uint64 { return m.Fixed().Unix(mono) }

// Mono converts Unix nanoseconds to CLOCK_MONOTONIC. Times before boot map
// to 0.
func (m *Mapper) Mono(unixNano uint64) uint64 { return m.Fixed().Mono(unixNano) }

// Fixed is one offset realtime − monotonic, in nanoseconds.
type Fixed int64

// Unix converts a CLOCK_MONOTONIC timestamp to Unix nanoseconds.
func (f Fixed) Unix(mono uint64) uint64 { return uint64(int64(mono) + int64(f)) }

// Mono converts Unix nanoseconds to CLOCK_MONOTONIC, the inverse of Unix.
// Times before boot map to 0.
func (f Fixed) Mono(unixNano uint64) uint64 {
	v := int64(unixNano) - int64(f)
	if v < 0 {
		return 0
	}
	return uint64(v)
}
