// Package limits names the bounds perfprof puts on what a target process
// or a client hands it (files, debug information, replies, memory
// layouts), and counts and logs when one is reached.
//
// perfprof runs privileged beside code it does not control. Whatever a
// target can shape — its perf map, its binaries' DWARF, its answers to
// the JVM attach protocol — is read with a bound; a target that reaches
// one loses its symbols or contexts, never the collector. The parsers
// report a reached bound as an *Error; a Recorder counts them by Kind
// for telemetry and logs each (Kind, subject) once, so that a hostile
// target cannot flood the log either.
package limits

import (
	"errors"
	"fmt"
	"sync"
)

// Kind is a bound perfprof puts on a target's or a client's data.
type Kind uint8

const (
	// FileRefused: a file a target names that is not a regular file
	// (a FIFO, a device), or that resolves outside the target's root.
	FileRefused Kind = iota
	// FileTooLarge: a file, or /proc entry, longer than perfprof reads.
	FileTooLarge
	// DWARFDepth: DIEs nested deeper than the walk descends.
	DWARFDepth
	// TypeCycle: a type that refers to itself through typedefs, or
	// nests deeper than the reader follows.
	TypeCycle
	// PerfMapSymbols: a perf map with more lines, or longer names, than
	// are kept.
	PerfMapSymbols
	// LineRows: a line table with more rows than are kept.
	LineRows
	// CompressedSection: a compressed ELF section that would decompress
	// to more than is read.
	CompressedSection
	// AttachReply: a JVM attach reply that was too large, too slow or
	// not a reply.
	AttachReply
	// SpanFuture: a span whose end is further in the future than the
	// join waits for.
	SpanFuture

	NumKinds
)

var kindNames = [NumKinds]string{
	FileRefused:       "file_refused",
	FileTooLarge:      "file_too_large",
	DWARFDepth:        "dwarf_depth",
	TypeCycle:         "type_cycle",
	PerfMapSymbols:    "perf_map_symbols",
	LineRows:          "line_rows",
	CompressedSection: "compressed_section",
	AttachReply:       "attach_reply",
	SpanFuture:        "span_future",
}

// String is the Kind's name in telemetry (the bound attribute).
func (k Kind) String() string {
	if k < NumKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Error says that a bound of Kind was reached, and what exceeded it.
type Error struct {
	Kind   Kind
	Detail string // what went past the bound, and the bound
}

func (e *Error) Error() string { return e.Kind.String() + ": " + e.Detail }

// Errorf returns an *Error of kind k.
func Errorf(k Kind, format string, args ...any) error {
	return &Error{Kind: k, Detail: fmt.Sprintf(format, args...)}
}

// KindOf returns the Kind of the *Error in err's chain.
func KindOf(err error) (Kind, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind, true
	}
	return 0, false
}

// Counts are the times each bound was reached.
type Counts [NumKinds]int64

// maxLogged bounds the (kind, subject) pairs a Recorder remembers having
// logged: past it, reached bounds are counted and no longer logged, so
// that a stream of new subjects cannot grow the set.
const maxLogged = 4096

// Recorder counts reached bounds and logs each (Kind, subject) once.
// Its methods may be called from any goroutine, and on a nil Recorder
// (which does nothing).
type Recorder struct {
	log func(k Kind, subject string, err error)

	mu     sync.Mutex
	counts Counts
	logged map[logKey]struct{}
}

type logKey struct {
	kind    Kind
	subject string
}

// NewRecorder returns a Recorder that calls log the first time a bound
// of a kind is reached for a subject (a process, a binary, a client).
// log may be nil.
func NewRecorder(log func(k Kind, subject string, err error)) *Recorder {
	return &Recorder{log: log, logged: make(map[logKey]struct{})}
}

// Add counts n reaches of bound k for subject, and logs err the first
// time k is reached for subject.
func (r *Recorder) Add(k Kind, subject string, n int64, err error) {
	if r == nil || k >= NumKinds || n <= 0 {
		return
	}
	r.mu.Lock()
	r.counts[k] += n
	key := logKey{k, subject}
	_, seen := r.logged[key]
	first := !seen && len(r.logged) < maxLogged
	if first {
		r.logged[key] = struct{}{}
	}
	r.mu.Unlock()
	if first && r.log != nil {
		r.log(k, subject, err)
	}
}

// Record counts err under its Kind if it is, or wraps, an *Error, and
// reports whether it was.
func (r *Recorder) Record(subject string, err error) bool {
	k, ok := KindOf(err)
	if ok {
		r.Add(k, subject, 1, err)
	}
	return ok
}

// Forget lets the (kind, subject) pairs of subject be logged again: for
// a process that exited, whose pid another may take.
func (r *Recorder) Forget(subject string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	for k := range NumKinds {
		delete(r.logged, logKey{k, subject})
	}
	r.mu.Unlock()
}

// Counts returns the counts so far.
func (r *Recorder) Counts() Counts {
	if r == nil {
		return Counts{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts
}
