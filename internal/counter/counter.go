// Package counter carries what perfprof's engine and exporter count to the
// collector's metrics as increments.
//
// A count is declared once, as the metric it feeds and the attributes that
// tell its series apart (Define, at package level, with the name the
// component's metadata.yaml gives the metric), and counted where it
// happens (Set.Add), or, for a count another part keeps as a running
// total (the kernel's lost records, a BPF map), stored as that total when
// it is read (Set.Store). The component moves what was counted since its
// last call into its instruments (Set.Flush), binding each definition to
// the instrument of that name once (see the components' telemetry.go), so
// that adding a counter is its metadata.yaml entry, its definition and the
// line that counts it.
//
// The package does not import the collector: the engine that counts is
// internal, and only the components know their instruments.
package counter

import (
	"sync"
	"sync/atomic"
)

// Def is one series of a metric: the metric's name and the attribute
// pairs (key, value, key, value...) of the series.
type Def struct {
	Metric string
	Attrs  []string
	id     int
}

// defs are every Def of the program, in the order of definition.
var (
	defsMu sync.Mutex
	defs   []*Def
)

// Define declares a series. Call it at package level: a Set made before a
// Define does not hold that series.
func Define(metric string, attrs ...string) *Def {
	if len(attrs)%2 != 0 {
		panic("counter.Define " + metric + ": attributes come in key, value pairs")
	}
	defsMu.Lock()
	defer defsMu.Unlock()
	d := &Def{Metric: metric, Attrs: attrs, id: len(defs)}
	defs = append(defs, d)
	return d
}

// Defs returns every series defined, for the components to bind.
func Defs() []*Def {
	defsMu.Lock()
	defer defsMu.Unlock()
	return append([]*Def(nil), defs...)
}

// Set holds the running total of every series, and what of it was
// flushed. Add and Store are safe from any goroutine and cost one atomic
// operation; Flush is serialized.
type Set struct {
	defs    []*Def // the series defined when the set was made
	totals  []atomic.Int64
	flushMu sync.Mutex
	flushed []int64
}

// NewSet returns a Set of every series defined so far, all zero.
func NewSet() *Set {
	defs := Defs()
	return &Set{defs: defs, totals: make([]atomic.Int64, len(defs)), flushed: make([]int64, len(defs))}
}

// Add counts n in series d.
func (s *Set) Add(d *Def, n int64) {
	if n != 0 {
		s.totals[d.id].Add(n)
	}
}

// Store sets the running total of series d, for a count kept elsewhere as
// a total (the next Flush passes on its growth).
func (s *Set) Store(d *Def, total int64) { s.totals[d.id].Store(total) }

// Load returns the running total of series d.
func (s *Set) Load(d *Def) int64 { return s.totals[d.id].Load() }

// Flush calls fn with every series that changed since the last Flush and
// by how much, in the order of definition.
func (s *Set) Flush(fn func(d *Def, delta int64)) {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	for i := range s.totals {
		v := s.totals[i].Load()
		if d := v - s.flushed[i]; d != 0 {
			s.flushed[i] = v
			fn(s.defs[i], d)
		}
	}
}
