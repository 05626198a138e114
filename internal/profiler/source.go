package profiler

import "github.com/perfprof/perfprof/internal/perf"

// Source delivers the perf records of attached processes. *perf.Session is
// the real one; tests script records (package profilertest).
type Source interface {
	// Read delivers records to fn until Close, on the calling goroutine;
	// the record is reused after fn returns.
	Read(fn func(*perf.Record)) error
	Attach(pid int) error
	Detach(pid int)
	Attached(pid int) bool
	// Refresh picks up threads created since Attach that the kernel did
	// not report.
	Refresh()
	Stats() perf.Stats
	Close() error
}

// Procs answers what the engine asks of /proc.
type Procs interface {
	// Read identifies pid; the error wraps perf.ErrNoProcess when it does
	// not exist.
	Read(pid int) (perf.Process, error)
	// Scan returns the running processes whose executable or comm is one
	// of names.
	Scan(names []string) ([]perf.Process, error)
	// Alive reports whether p still runs (same pid and start time).
	Alive(p perf.Process) bool
	// ThreadName returns the comm of a thread, "" when unknown.
	ThreadName(pid, tid int) string
}

// procfs is Procs over the real /proc.
type procfs struct{}

func (procfs) Read(pid int) (perf.Process, error)          { return perf.ReadProcess(pid) }
func (procfs) Scan(names []string) ([]perf.Process, error) { return perf.Scan(names) }
func (procfs) Alive(p perf.Process) bool                   { return p.Alive() }
func (procfs) ThreadName(pid, tid int) string              { return perf.ThreadName(pid, tid) }
