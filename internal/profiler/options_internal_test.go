package profiler

import "testing"

func TestStackRingPages(t *testing.T) {
	for _, c := range []struct{ freq, stack, cpus, want int }{
		{99, DefaultUnwindStackBytes, 2, 512},
		{120, DefaultUnwindStackBytes, 2, 512},
		{121, DefaultUnwindStackBytes, 2, 1024},
		{999, DefaultUnwindStackBytes, 2, unwindRingPages},
		{19, 8 << 10, 2, 64},
		{99, MaxUnwindStackBytes, 2, 1024},
		{60, DefaultUnwindStackBytes, 2, 256},
		{999, DefaultUnwindStackBytes, 32, 1024},
		{999, DefaultUnwindStackBytes, 64, 512},
		{99, DefaultUnwindStackBytes, 128, 256},
		{99, DefaultUnwindStackBytes, 4096, 64},
	} {
		if got := stackRingPages(c.freq, c.stack, c.cpus); got != c.want {
			t.Errorf("stackRingPages(%d Hz, %d bytes, %d CPUs) = %d, want %d", c.freq, c.stack, c.cpus, got, c.want)
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
