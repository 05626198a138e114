package tracefileexporter

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestIntervals checks the set against a plain list that forgets by the
// same rules, with polls arriving mostly in order, some late, some
// overlapping, across the horizon and the count bound.
func TestIntervals(t *testing.T) {
	for _, tc := range []struct {
		name string
		gap  uint64 // between poll starts
		n    int
	}{
		{"horizon", intervalHorizon / 1000, 5000}, // forgets by age
		{"count", 1000, 3 * maxIntervals},         // forgets by count
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			var s intervals
			var model [][2]uint64
			now := uint64(1e12)
			var refused int
			for k := range tc.n {
				a := now
				if rng.IntN(10) == 0 && now > 20*tc.gap { // late: up to 20 polls back
					a = now - uint64(rng.IntN(20))*tc.gap
				}
				b := a + tc.gap/2 + uint64(rng.IntN(int(tc.gap)))
				i, _ := slices.BinarySearchFunc(model, a, func(x [2]uint64, t uint64) int {
					if x[1] <= t {
						return -1
					}
					return 1
				})
				want := !(i < len(model) && model[i][0] < b)
				if want {
					model = slices.Insert(model, i, [2]uint64{a, b})
					last := model[len(model)-1][1]
					for len(model) > 0 && last > intervalHorizon && model[0][1] < last-intervalHorizon {
						model = model[1:]
					}
					if len(model) > maxIntervals {
						model = model[len(model)-maxIntervals:]
					}
				} else {
					refused++
				}
				if got := s.add(a, b); got != want {
					t.Fatalf("poll %d [%d, %d): add %v, want %v", k, a, b, got, want)
				}
				if s.len() != len(model) || (k%1000 == 0 || k == tc.n-1) && !slices.Equal(s.iv[s.head:], model) {
					t.Fatalf("poll %d: set holds %d intervals, want %d", k, s.len(), len(model))
				}
				now += tc.gap
			}
			if refused == 0 || s.len() > maxIntervals || len(s.iv) > maxIntervals*4/3+1 {
				t.Errorf("%d refused, %d remembered in a slice of %d", refused, s.len(), len(s.iv))
			}
		})
	}
}
