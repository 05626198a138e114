package convention

import (
	"math"
	"testing"
)

func TestInt(t *testing.T) {
	for _, c := range []struct {
		raw  any
		want int64
		ok   bool
	}{
		{int64(4242), 4242, true},
		{int64(-1), -1, true},
		{float64(17), 17, true},
		{float64(17.5), 0, false},
		{math.Inf(1), 0, false},
		{math.NaN(), 0, false},
		{"123", 123, true},
		{"12a", 0, false},
		{"", 0, false},
		{true, 0, false},
		{nil, 0, false},
		{[]any{int64(1)}, 0, false},
	} {
		got, ok := Int(c.raw)
		if got != c.want || ok != c.ok {
			t.Errorf("Int(%#v) = %d, %v; want %d, %v", c.raw, got, ok, c.want, c.ok)
		}
	}
}

func TestThreadStateCodes(t *testing.T) {
	for _, s := range []string{ThreadStateBlocked, ThreadStateRunnable} {
		if got := ThreadStateName(ThreadStateCode(s)); got != s {
			t.Errorf("round trip of %q gave %q", s, got)
		}
	}
	if ThreadStateCode("running") != 0 || ThreadStateName(9) != "" {
		t.Error("unknown states must map to the zero values")
	}
}
