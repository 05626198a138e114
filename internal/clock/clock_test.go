package clock

import (
	"testing"
	"time"
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

func BenchmarkOffset(b *testing.B) {
	for i := 0; i < b.N; i++ {
		_ = Offset()
	}
}
