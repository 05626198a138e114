package testchild

import (
	"testing"
	"time"
)

// WaitFor waits until cond holds, checking it every 10 ms, and fails the
// test, saying what it waited for, when d passes first. Tests wait on
// what they need (a record read, a process released) rather than sleep
// for a guess at how long it takes, which a busy machine outlasts.
func WaitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not in %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
