// Package shared lets the signals of one collector component share one
// instance: the instance is created for the first signal, started by the
// first Start, stopped when the last of its users stops, and then forgotten,
// so that a rebuilt pipeline gets a fresh one. It is the collector's
// sharedcomponent pattern (which the collector keeps internal), without the
// collector's types: the receiver and the exporter pass their own start and
// stop functions.
package shared

import (
	"errors"
	"sync"
)

// Map holds the live instances by key (a component's *Config: the collector
// hands every signal of one component ID the same pointer). The zero Map is
// ready to use.
type Map[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]*instance[V]
}

type instance[V any] struct {
	value V
	// users counts the handles not yet stopped; guarded by Map.mu.
	users int

	startOnce sync.Once
	startErr  error
	started   bool // guarded by Map.mu
	stopped   bool // guarded by Map.mu
}

// User is one signal's handle on a shared instance. Its Stop counts once,
// however often it is called.
type User[K comparable, V any] struct {
	m        *Map[K, V]
	key      K
	inst     *instance[V]
	stopOnce sync.Once
}

// Acquire returns a new handle on the instance for key, creating the
// instance with create if there is none. An error of create is returned and
// nothing is kept.
func (m *Map[K, V]) Acquire(key K, create func() (V, error)) (*User[K, V], error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	inst, ok := m.m[key]
	if !ok {
		v, err := create()
		if err != nil {
			return nil, err
		}
		inst = &instance[V]{value: v}
		if m.m == nil {
			m.m = map[K]*instance[V]{}
		}
		m.m[key] = inst
	}
	inst.users++
	return &User[K, V]{m: m, key: key, inst: inst}, nil
}

// Len returns the number of live instances.
func (m *Map[K, V]) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.m)
}

// Value returns the shared instance.
func (u *User[K, V]) Value() V { return u.inst.value }

// Start runs start once for the instance, for the first user that starts;
// every user gets its error.
func (u *User[K, V]) Start(start func() error) error {
	u.m.mu.Lock()
	stopped := u.inst.stopped
	u.m.mu.Unlock()
	if stopped {
		return errStopped
	}
	u.inst.startOnce.Do(func() {
		u.inst.startErr = start()
		u.m.mu.Lock()
		u.inst.started = u.inst.startErr == nil
		u.m.mu.Unlock()
	})
	return u.inst.startErr
}

// Started reports whether the instance started.
func (u *User[K, V]) Started() bool {
	u.m.mu.Lock()
	defer u.m.mu.Unlock()
	return u.inst.started
}

// Stop releases this handle. The last handle of the instance to stop runs
// stop and forgets the instance; stop is told whether the instance started
// (the collector stops components whose start failed or never came).
func (u *User[K, V]) Stop(stop func(started bool) error) error {
	var err error
	u.stopOnce.Do(func() {
		u.m.mu.Lock()
		u.inst.users--
		last := u.inst.users == 0
		if last {
			u.inst.stopped = true
			if u.m.m[u.key] == u.inst {
				delete(u.m.m, u.key)
			}
		}
		started := u.inst.started
		u.m.mu.Unlock()
		if last {
			// A Start racing with this one must not start the instance
			// after it was stopped.
			u.inst.startOnce.Do(func() { u.inst.startErr = errStopped })
			err = stop(started)
		}
	})
	return err
}

var errStopped = errors.New("shared: instance already stopped")
