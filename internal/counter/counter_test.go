package counter

import (
	"sync"
	"testing"
)

var (
	testA = Define("counter_test_a")
	testB = Define("counter_test_b", "k", "v")
)

// TestFlushDeltas: a flush passes on what was added and stored since the
// last one, a running total that shrinks as a negative delta (a gauge
// kept as an up-down counter), and nothing for series that did not move.
func TestFlushDeltas(t *testing.T) {
	s := NewSet()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				s.Add(testA, 1)
			}
		}()
	}
	wg.Wait()
	s.Store(testB, 5)
	got := map[*Def]int64{}
	s.Flush(func(d *Def, n int64) { got[d] += n })
	if got[testA] != 8000 || got[testB] != 5 || len(got) != 2 {
		t.Fatalf("first flush: %v", got)
	}
	s.Store(testB, 3)
	clear(got)
	s.Flush(func(d *Def, n int64) { got[d] += n })
	if len(got) != 1 || got[testB] != -2 {
		t.Fatalf("second flush: %v", got)
	}
	if s.Load(testA) != 8000 {
		t.Fatalf("total %d", s.Load(testA))
	}
}

func BenchmarkAdd(b *testing.B) {
	s := NewSet()
	for b.Loop() {
		s.Add(testA, 1)
	}
}
