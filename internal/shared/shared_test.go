package shared

import (
	"errors"
	"sync"
	"testing"
)

type thing struct{ starts, stops int }

func TestStartOnceStopWithLastUser(t *testing.T) {
	var m Map[string, *thing]
	created := 0
	create := func() (*thing, error) { created++; return &thing{}, nil }
	a, err := m.Acquire("k", create)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := m.Acquire("k", create)
	if created != 1 || a.Value() != b.Value() {
		t.Fatalf("created %d instances; the two users share one: %v", created, a.Value() == b.Value())
	}
	th := a.Value()
	start := func() error { th.starts++; return nil }
	stop := func(started bool) error {
		if !started {
			t.Error("stop says the instance did not start")
		}
		th.stops++
		return nil
	}
	for _, u := range []*User[string, *thing]{a, b, a} {
		if err := u.Start(start); err != nil {
			t.Fatal(err)
		}
	}
	if th.starts != 1 {
		t.Fatalf("started %d times", th.starts)
	}
	if err := a.Stop(stop); err != nil || th.stops != 0 {
		t.Fatalf("first stop: err %v, stops %d; want the instance to live on for b", err, th.stops)
	}
	_ = a.Stop(stop) // a second Stop of the same user counts nothing
	if th.stops != 0 || m.Len() != 1 {
		t.Fatalf("a repeated Stop of one user stopped the instance (stops %d, live %d)", th.stops, m.Len())
	}
	if err := b.Stop(stop); err != nil || th.stops != 1 || m.Len() != 0 {
		t.Fatalf("last stop: err %v, stops %d, live %d", err, th.stops, m.Len())
	}
	// A new acquire after the last stop makes a new instance.
	c, _ := m.Acquire("k", create)
	if c.Value() == th || created != 2 {
		t.Fatal("a stopped instance was handed out again")
	}
	if err := a.Start(start); err == nil || th.starts != 1 {
		t.Fatalf("Start of a stopped instance: err %v, starts %d", err, th.starts)
	}
}

func TestStartErrorAndStopWithoutStart(t *testing.T) {
	var m Map[int, *thing]
	if _, err := m.Acquire(1, func() (*thing, error) { return nil, errors.New("boom") }); err == nil || m.Len() != 0 {
		t.Fatalf("create error: err %v, live %d", err, m.Len())
	}
	a, _ := m.Acquire(1, func() (*thing, error) { return &thing{}, nil })
	b, _ := m.Acquire(1, nil)
	want := errors.New("no perf")
	if err := a.Start(func() error { return want }); err != want {
		t.Fatalf("start error %v", err)
	}
	if err := b.Start(func() error { t.Error("second start ran"); return nil }); err != want {
		t.Fatalf("the second user must get the first start's error, got %v", err)
	}
	var stoppedStarted []bool
	stop := func(started bool) error { stoppedStarted = append(stoppedStarted, started); return nil }
	_ = a.Stop(stop)
	_ = b.Stop(stop)
	if len(stoppedStarted) != 1 || stoppedStarted[0] {
		t.Fatalf("stop calls %v; want one, told it never started", stoppedStarted)
	}
	// Never started at all: stop still runs once, for cleanup.
	c, _ := m.Acquire(2, func() (*thing, error) { return &thing{}, nil })
	stoppedStarted = nil
	_ = c.Stop(stop)
	if len(stoppedStarted) != 1 || stoppedStarted[0] {
		t.Fatalf("stop without start: calls %v", stoppedStarted)
	}
}

func TestConcurrentUsers(t *testing.T) {
	var m Map[string, *thing]
	var mu sync.Mutex
	starts := 0
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u, _ := m.Acquire("k", func() (*thing, error) { return &thing{}, nil })
			_ = u.Start(func() error { mu.Lock(); starts++; mu.Unlock(); return nil })
		}()
	}
	wg.Wait()
	if starts != 1 {
		t.Fatalf("%d starts", starts)
	}
}
