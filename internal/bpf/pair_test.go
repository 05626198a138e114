//go:build amd64

package bpf_test

import "github.com/perfprof/perfprof/internal/bpf"

// maxSkew is how far apart (ns) a record and the perf sample it belongs to
// may be for these tests. Measured on Linux 6.18: the record is 1–3 µs
// later (p1–p99), up to 75 µs seen: perf takes the sample's time and walks
// the callchain before it runs the program. The engine pairs them in its
// context store (internal/profiler), tighter; here the distance is what
// TestGoLabels measures, so the window is wide.
const maxSkew = 200_000

// pairer pairs the records of a test's program with its perf samples: a
// cpu-clock sample of thread tid at time t takes the record of tid nearest
// t within skew. The records of one thread wait for their samples, which
// come out of time order when the thread moved between CPUs (a perf reader
// drains one CPU's ring, then the next). Not safe for concurrent use.
type pairer struct {
	skew  uint64
	byTid map[uint32][]bpf.Record
}

func newPairer(skew uint64) *pairer {
	return &pairer{skew: skew, byTid: map[uint32][]bpf.Record{}}
}

// add keeps a copy of r; the records of switch-out samples are not paired
// here.
func (p *pairer) add(r *bpf.Record) {
	if r.Flags&bpf.FlagSwitch == 0 {
		p.byTid[r.Tid] = append(p.byTid[r.Tid], *r)
	}
}

// pair returns the record of the sample of tid at time t, and forgets it.
func (p *pairer) pair(tid uint32, t uint64) (bpf.Record, bool) {
	q := p.byTid[tid]
	best, bestD := -1, uint64(0)
	for i, r := range q {
		d := max(r.Time, t) - min(r.Time, t)
		if d <= p.skew && (best < 0 || d < bestD) {
			best, bestD = i, d
		}
	}
	if best < 0 {
		return bpf.Record{}, false
	}
	r := q[best]
	p.byTid[tid] = append(q[:best], q[best+1:]...)
	return r, true
}

// pending is the number of records no sample took.
func (p *pairer) pending() int {
	n := 0
	for _, q := range p.byTid {
		n += len(q)
	}
	return n
}
