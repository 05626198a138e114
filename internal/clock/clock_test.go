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

func BenchmarkOffset(b *testing.B) {
	for i := 0; i < b.N; i++ {
		_ = Offset()
	}
}
