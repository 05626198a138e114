package testchild

import (
	"bytes"
	"fmt"
	"os"
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

// WaitStopped waits (up to 10 s) until process pid is stopped by a signal
// (state T in /proc/PID/stat): off its CPU, switched out for good.
func WaitStopped(tb testing.TB, pid int) {
	tb.Helper()
	WaitFor(tb, 10*time.Second, fmt.Sprintf("process %d stopped", pid), func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		// The state follows the command name, which is in parentheses
		// and may hold any byte.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
		// The state is T before the task switches out: its wchan is
		// read only once it is off its run queue, and its switch-out
		// (which a test of context switches counts) is done with it.
		w, err := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid))
		return err == nil && len(w) > 0 && string(w) != "0"
	})
}

// WaitExec waits (up to 10 s) until process pid runs a program named comm
// (/proc/PID/comm): a child just started by os/exec runs a copy of its
// parent until its execve.
func WaitExec(tb testing.TB, pid int, comm string) {
	tb.Helper()
	WaitFor(tb, 10*time.Second, fmt.Sprintf("process %d exec'd %s", pid, comm), func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		return err == nil && string(bytes.TrimSpace(b)) == comm
	})
}
