package profiler

import (
	"math/rand"
	"testing"
)

// TestSchedQueueOrders pushes and pops at random: events come out in time
// order, each one whole (its slot not reused while it is queued), and what
// stays is still a heap.
func TestSchedQueueOrders(t *testing.T) {
	var q schedQueue
	rng := rand.New(rand.NewSource(1))
	pushed := map[uint32]uint64{} // tid (a unique id here) → time
	id := uint32(0)
	for round := 0; round < 50; round++ {
		for i := 0; i < rng.Intn(200); i++ {
			id++
			tm := uint64(rng.Intn(1000))
			pushed[id] = tm
			q.push(schedEvent{time: tm, tid: id, idx: int32(id)})
		}
		var last uint64
		for n := rng.Intn(q.len() + 1); n > 0; n-- {
			e := q.pop()
			if e.time < last {
				t.Fatalf("popped %d after %d", e.time, last)
			}
			if tm, ok := pushed[e.tid]; !ok || tm != e.time || e.idx != int32(e.tid) {
				t.Fatalf("popped %+v, which was not pushed like that (or twice)", e)
			}
			delete(pushed, e.tid)
			last = e.time
		}
		if q.len() != len(pushed) {
			t.Fatalf("%d queued, %d pushed and not popped", q.len(), len(pushed))
		}
		q.each(func(e *schedEvent) {
			if e.time < last {
				t.Fatalf("left %d below popped %d", e.time, last)
			}
		})
	}
}
