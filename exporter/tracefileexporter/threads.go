package tracefileexporter

import (
	"slices"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// threadKey names an OS thread: the pid of its span's resource (0 when
// the span names none) and its thread.id.
type threadKey struct {
	pid, tid uint32
}

// threadSpans are the spans written on one thread, with a thread.id and
// nonzero length, ordered by end: a later span of another trace that
// overlaps one of them did not own the thread (addThreadIntervals). Like
// a worker's polls, they are remembered for intervalHorizon after the
// latest, at most maxThreadSpans of them.
type threadSpans struct {
	s []ownedSpan
}

type ownedSpan struct {
	start, end uint64
	trace      pcommon.TraceID
}

const (
	maxThreadSpans = 1024
	// maxOwnedThreads and maxOwnedSpans bound the threads and spans
	// remembered (thread ids are the clients' to choose): past either,
	// the half of the threads idle the longest are forgotten. 256 Ki
	// spans are 10 MiB.
	maxOwnedThreads = 1 << 14
	maxOwnedSpans   = 1 << 18
)

// threadSet is the threadSpans of every thread, and how many spans they
// hold in all.
type threadSet struct {
	m     map[threadKey]*threadSpans
	total int
}

// add remembers a span written on thread k.
func (ts *threadSet) add(k threadKey, a, b uint64, trace pcommon.TraceID) {
	if ts.m == nil {
		ts.m = map[threadKey]*threadSpans{}
	}
	t := ts.m[k]
	if t == nil {
		if len(ts.m) >= maxOwnedThreads {
			ts.forget()
		}
		t = &threadSpans{}
		ts.m[k] = t
	}
	n := len(t.s)
	t.add(a, b, trace)
	ts.total += len(t.s) - n
	if ts.total > maxOwnedSpans {
		ts.forget()
	}
}

func (ts *threadSet) forget() {
	forgetIdle(ts.m, maxOwnedThreads)
	ts.total = 0
	for _, t := range ts.m {
		ts.total += len(t.s)
	}
}

// overlapsOther reports whether a span of another trace than trace,
// remembered, overlaps [a, b).
func (t *threadSpans) overlapsOther(a, b uint64, trace pcommon.TraceID) bool {
	for i := len(t.s) - 1; i >= 0 && t.s[i].end > a; i-- {
		if t.s[i].start < b && t.s[i].trace != trace {
			return true
		}
	}
	return false
}

func (t *threadSpans) add(a, b uint64, trace pcommon.TraceID) {
	i, _ := slices.BinarySearchFunc(t.s, b, func(x ownedSpan, end uint64) int {
		if x.end <= end {
			return -1
		}
		return 1
	})
	t.s = slices.Insert(t.s, i, ownedSpan{a, b, trace})
	// Forgetting moves the rest: done once a quarter of the set is to go.
	drop := 0
	if last := t.s[len(t.s)-1].end; last > intervalHorizon {
		for drop < len(t.s) && t.s[drop].end < last-intervalHorizon {
			drop++
		}
	}
	drop = max(drop, len(t.s)-maxThreadSpans)
	if drop > 0 && (drop >= len(t.s)/4 || len(t.s) > maxThreadSpans+maxThreadSpans/4) {
		t.s = slices.Delete(t.s, 0, drop)
	}
}

func (t *threadSpans) len() int { return len(t.s) }

func (t *threadSpans) last() uint64 {
	if len(t.s) == 0 {
		return 0
	}
	return t.s[len(t.s)-1].end
}
