package profiler

import (
	"math/rand"
	"testing"
)

func TestSchedQueueOrders(t *testing.T) {
	var q schedQueue
	rng := rand.New(rand.NewSource(1))
	for round := 0; round < 50; round++ {
		for i := 0; i < rng.Intn(200); i++ {
			q.push(schedEvent{time: uint64(rng.Intn(1000))})
		}
		var last uint64
		for n := rng.Intn(len(q) + 1); n > 0; n-- {
			e := q.pop()
			if e.time < last {
				t.Fatalf("popped %d after %d", e.time, last)
			}
			last = e.time
		}
		// What stays must still be a heap: its minimum is not below last.
		for _, e := range q {
			if e.time < last {
				t.Fatalf("left %d below popped %d", e.time, last)
			}
		}
	}
}
