package profiler

import "testing"

func TestStackRingPages(t *testing.T) {
	for _, c := range []struct{ freq, stack, want int }{
		{99, DefaultUnwindStackBytes, 256},
		{120, DefaultUnwindStackBytes, 256},
		{121, DefaultUnwindStackBytes, 512},
		{999, DefaultUnwindStackBytes, unwindRingPages},
		{19, 8 << 10, 64},
		{99, MaxUnwindStackBytes, 1024},
		{241, DefaultUnwindStackBytes, 512},
		{242, DefaultUnwindStackBytes, 1024},
	} {
		if got := stackRingPages(c.freq, c.stack); got != c.want {
			t.Errorf("stackRingPages(%d Hz, %d bytes) = %d, want %d", c.freq, c.stack, got, c.want)
		}
	}
}

func TestSpanRingBytes(t *testing.T) {
	for _, c := range []struct {
		freq, cpus int
		switches   bool
		want       int
	}{
		{99, 2, false, 256 << 10},
		{999, 2, false, 256 << 10},
		{999, 64, false, 16 << 20 / 2},
		{999, 16, false, 4 << 20 / 2},
		{99, 2, true, 1 << 20},
		{10000, 1024, true, 8 << 20},
	} {
		if got := spanRingBytes(c.freq, c.cpus, c.switches); got != c.want {
			t.Errorf("spanRingBytes(%d Hz, %d CPUs, switches %v) = %d, want %d", c.freq, c.cpus, c.switches, got, c.want)
		}
	}
}
