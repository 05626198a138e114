package clock

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestMapperAgreesWithTimeNow(t *testing.T) {
	m := NewMapper()
	got := int64(m.Unix(Monotonic()))
	want := time.Now().UnixNano()
	if d := got - want; d < -int64(time.Millisecond) || d > int64(time.Millisecond) {
		t.Fatalf("mapped monotonic now is %v away from time.Now", time.Duration(d))
	}
}

func TestMonoInvertsUnix(t *testing.T) {
	m := NewMapper()
	mono := Monotonic()
	if got := m.Mono(m.Unix(mono)); got != mono {
		t.Fatalf("Mono(Unix(%d)) = %d", mono, got)
	}
	if got := m.Mono(1); got != 0 {
		t.Fatalf("a time before boot maps to %d, want 0", got)
	}
}

// TestFixedSurvivesRefresh: a time converted with a Fixed converts back
// exactly with it after the Mapper it came from measured again and moved.
func TestFixedSurvivesRefresh(t *testing.T) {
	m := NewMapper()
	f := m.Fixed()
	mono := Monotonic()
	u := f.Unix(mono)
	m.offset.Add(1_000_000) // a step of the wall clock, as Refresh would see it
	if got := f.Mono(u); got != mono {
		t.Fatalf("Mono(Unix(%d)) = %d after a refresh", mono, got)
	}
	if got := m.Mono(u); got == mono {
		t.Fatalf("the refreshed Mapper maps back to the same time: the test does not test")
	}
}

func BenchmarkOffset(b *testing.B) {
	for i := 0; i < b.N; i++ {
		_ = Offset()
	}
}

func TestUntilBeat(t *testing.T) {
	for _, c := range []struct{ period, within time.Duration }{
		{time.Second, time.Second},
		{100 * time.Millisecond, 100 * time.Millisecond},
		{100 * time.Millisecond, 750 * time.Millisecond},
		{time.Second, 10 * time.Millisecond}, // no beat within: the next one after
	} {
		before := time.Duration(Monotonic())
		d := UntilBeat(c.period, c.within)
		after := time.Duration(Monotonic())
		at := after + d // no earlier than the beat meant
		most := max(c.within, c.period)
		if c.within < c.period {
			most = c.within + c.period
		}
		if d <= 0 || d > most {
			t.Errorf("UntilBeat(%v, %v) = %v, want in (0, %v]", c.period, c.within, d, most)
		}
		// Unless a beat happened to fall within (1% of the time for 10
		// ms of a second), the first one after it.
		beatWithin := (after+c.within)/c.period*c.period > before
		if c.within < c.period && d < c.within && !beatWithin {
			t.Errorf("UntilBeat(%v, %v) = %v: no beat was within, want the first after it", c.period, c.within, d)
		}
		// The beat is a multiple of period, reached from a reading
		// between before and after.
		beat := (at / c.period) * c.period
		if beat < before || at-beat > after-before {
			t.Errorf("UntilBeat(%v, %v) = %v: lands at %v, not on a beat (read between %v and %v)", c.period, c.within, d, at, before, after)
		}
		if c.within >= c.period && beat > before+c.within {
			t.Errorf("UntilBeat(%v, %v) = %v: past within", c.period, c.within, d)
		}
		if c.within >= c.period && beat+c.period <= after+c.within-(after-before) {
			t.Errorf("UntilBeat(%v, %v) = %v: a later beat %v was within", c.period, c.within, d, beat+c.period)
		}
	}
	if d := UntilBeat(0, time.Second); d != time.Second {
		t.Errorf("UntilBeat(0, 1s) = %v, want 1s", d)
	}
}

func TestMonotonicIsTheKernels(t *testing.T) {
	for range 100 {
		var a, b unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &a)
		m := Monotonic()
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &b)
		// Between the two kernel readings, give or take the origin's
		// measurement (a few microseconds at most).
		const slack = 50 * time.Microsecond
		if m+uint64(slack) < uint64(a.Nano()) || m > uint64(b.Nano())+uint64(slack) {
			t.Fatalf("Monotonic() = %d, kernel read %d and %d", m, a.Nano(), b.Nano())
		}
	}
}
