package limits

import (
	"errors"
	"fmt"
	"testing"
)

func TestRecorderLogsOncePerSubject(t *testing.T) {
	var logged []string
	r := NewRecorder(func(k Kind, subject string, err error) {
		logged = append(logged, fmt.Sprintf("%v %s %v", k, subject, err))
	})
	err := fmt.Errorf("read perf map: %w", Errorf(PerfMapSymbols, "%d lines, bound %d", 5, 4))
	for range 3 {
		if !r.Record("pid 7", err) {
			t.Fatal("Record did not find the *Error in the chain")
		}
	}
	r.Record("pid 8", err)
	if r.Record("pid 8", errors.New("other")) {
		t.Fatal("Record counted an error that is not a bound")
	}
	if got := r.Counts()[PerfMapSymbols]; got != 4 {
		t.Fatalf("count %d, want 4", got)
	}
	if len(logged) != 2 {
		t.Fatalf("logged %q, want once per subject", logged)
	}
	r.Forget("pid 7")
	r.Record("pid 7", err)
	if len(logged) != 3 {
		t.Fatalf("after Forget, logged %d times, want 3", len(logged))
	}
}

func TestRecorderLogBounded(t *testing.T) {
	n := 0
	r := NewRecorder(func(Kind, string, error) { n++ })
	for i := range 2 * maxLogged {
		r.Add(FileRefused, fmt.Sprint("pid ", i), 1, nil)
	}
	if n != maxLogged || len(r.logged) != maxLogged {
		t.Fatalf("logged %d, remembered %d, want %d", n, len(r.logged), maxLogged)
	}
	if r.Counts()[FileRefused] != 2*maxLogged {
		t.Fatal("a bound past the log's was not counted")
	}
}

func TestNilRecorder(t *testing.T) {
	var r *Recorder
	r.Add(FileRefused, "x", 1, nil)
	r.Forget("x")
	if r.Record("x", Errorf(FileRefused, "x")) != true || r.Counts() != (Counts{}) {
		t.Fatal("nil recorder")
	}
}

func TestKindNames(t *testing.T) {
	for k := range NumKinds {
		if kindNames[k] == "" {
			t.Errorf("kind %d has no name", k)
		}
	}
}
