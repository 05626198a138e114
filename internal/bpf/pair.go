package bpf

// DefaultMaxSkew is how far apart (ns) a record and the perf sample it
// belongs to may be. Measured on Linux 6.18: the record is 1–3 µs later
// (p1–p99), up to 75 µs seen: perf takes the sample's time and walks the
// callchain before it runs the program (older kernels run it first: the
// window is symmetric). That is far below the shortest interval
// between two samples of one thread (1 ms at 999 Hz).
const DefaultMaxSkew = 200_000

// Pairer pairs records with perf samples: a sample on thread tid at time t
// belongs to the record of tid whose time is nearest t, within MaxSkew.
// Records wait, per thread, until their sample arrives. Samples of one
// thread do not arrive in time order (a perf reader drains one CPU's ring,
// then the next, and the thread moves between CPUs), so a record passed
// over by a later sample still waits, until it is Horizon older than the
// samples of its thread (its sample was lost). Not safe for concurrent
// use.
type Pairer struct {
	// MaxSkew is the largest |record time - sample time| that pairs;
	// zero means DefaultMaxSkew.
	MaxSkew uint64
	// Horizon is how long (ns) a record waits for a later-read sample
	// of its thread; zero means DefaultHorizon.
	Horizon uint64

	byTid map[pairKey][]Record // in time order

	// Paired counts samples that found their record, Unpaired those
	// that did not, Stale records dropped without a sample.
	Paired, Unpaired, Stale uint64
}

// DefaultHorizon is far longer than a perf reader takes between two
// CPUs' rings.
const DefaultHorizon = 2_000_000_000

// perThread bounds the records kept for one thread. Records wait for the
// perf reader to reach their samples, which sit in the perf rings until it
// wakes (every 100 ms at least, or a quarter-full ring): about 100 records
// a thread at 999 Hz, more when the reader is held up. 4096 is 4 s of one
// thread's samples; more unpaired than that means the samples are not
// coming (the thread is not sampled by this session, or they were lost).
const perThread = 4096

// pairKey keeps the records of a thread's switch-out samples apart from
// those of its cpu-clock samples: the two may be microseconds apart.
type pairKey struct {
	tid uint32
	out bool
}

// Add keeps a copy of r for Pair (PairSwitch when it has FlagSwitch).
func (p *Pairer) Add(r *Record) {
	if p.byTid == nil {
		p.byTid = map[pairKey][]Record{}
	}
	k := pairKey{r.Tid, r.Flags&FlagSwitch != 0}
	q := p.byTid[k]
	if len(q) == perThread {
		q = q[:copy(q, q[1:])]
		p.Stale++
	}
	p.byTid[k] = append(q, *r)
}

// Pair returns the record of the cpu-clock sample of tid at time t and
// removes it.
func (p *Pairer) Pair(tid uint32, t uint64) (Record, bool) {
	return p.pair(pairKey{tid, false}, t)
}

// PairSwitch returns the record of the switch-out sample of tid at time t
// and removes it.
func (p *Pairer) PairSwitch(tid uint32, t uint64) (Record, bool) {
	return p.pair(pairKey{tid, true}, t)
}

func (p *Pairer) pair(tid pairKey, t uint64) (Record, bool) {
	skew, horizon := p.MaxSkew, p.Horizon
	if skew == 0 {
		skew = DefaultMaxSkew
	}
	if horizon == 0 {
		horizon = DefaultHorizon
	}
	q := p.byTid[tid]
	old := 0
	for old < len(q) && q[old].Time+horizon < t {
		old++
	}
	best, bestD := -1, uint64(0)
	for i := old; i < len(q); i++ {
		if d := absDiff(q[i].Time, t); d <= skew && (best < 0 || d < bestD) {
			best, bestD = i, d
		}
		if q[i].Time > t+skew {
			break
		}
	}
	var r Record
	if best >= 0 {
		r = q[best]
		q = append(q[:best], q[best+1:]...)
		p.Paired++
	} else {
		p.Unpaired++
	}
	if old > 0 {
		p.Stale += uint64(old)
		q = q[:copy(q, q[old:])]
	}
	if len(q) == 0 && cap(q) > perThread/4 {
		delete(p.byTid, tid) // let a burst's memory go
	} else if q != nil {
		p.byTid[tid] = q
	}
	return r, best >= 0
}

// Forget drops the records of a thread that exited.
func (p *Pairer) Forget(tid uint32) {
	for _, sw := range []bool{false, true} {
		k := pairKey{tid, sw}
		p.Stale += uint64(len(p.byTid[k]))
		delete(p.byTid, k)
	}
}

// Pending is the number of records waiting for their samples.
func (p *Pairer) Pending() int {
	n := 0
	for _, q := range p.byTid {
		n += len(q)
	}
	return n
}

func absDiff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}
