package profiler

import "testing"

// TestPutBounded: past the bound the thread ids start over, so that the
// newest are always known and the map stays bounded.
func TestPutBounded(t *testing.T) {
	m := map[uint32]uint32{}
	for k := range uint32(3*maxLocalTids + 5) {
		putBounded(m, k, k+1)
		if m[k] != k+1 || len(m) > maxLocalTids {
			t.Fatalf("after key %d: %d keys, m[%d] = %d", k, len(m), k, m[k])
		}
	}
	putBounded(m, 3*maxLocalTids+4, 7) // a key it holds: nothing forgotten
	if len(m) != 5 || m[3*maxLocalTids+4] != 7 {
		t.Fatalf("%d keys, %v", len(m), m)
	}
}
