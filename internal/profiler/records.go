package profiler

import (
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/perfprof/perfprof/internal/container"
	"github.com/perfprof/perfprof/internal/perf"
)

// Records delivers the perf records of attached processes. *perf.Session is
// the real one; tests script records (package profilertest).
type Records interface {
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
	// of names (any, when names is empty) and whose cgroups cgroups
	// selects.
	Scan(names []string, cgroups container.Selector) ([]perf.Process, error)
	// Alive reports whether p still runs (same pid and start time).
	Alive(p perf.Process) bool
	// Thread returns the comm of a thread, "" when unknown, and, with
	// nested (its process is in a pid namespace below the collector's),
	// its id in its process's namespace: 0 when unknown, or without
	// nested.
	Thread(pid, tid int, nested bool) (name string, local uint32)
	// Identity says where pid runs: its pid namespace and its cgroups.
	Identity(pid int) (Identity, error)
	// ThreadIDs maps the thread ids of pid in its own pid namespace to
	// the collector's, reading at most max threads.
	ThreadIDs(pid, max int) (map[uint32]uint32, error)
}

// Identity is where a process runs (container.Identity).
type Identity = container.Identity

// procfs is Procs over the real /proc. With a scanner, discovery reads
// again only the processes that are new or changed (see perf.Scanner).
type procfs struct {
	scan  *scanner
	watch *perf.ExecWatcher // the scanner's, for waitStart; nil if none
}

// scanner is a perf.Scanner for the discovery goroutine (and Open, before
// it starts).
type scanner struct {
	mu sync.Mutex
	s  *perf.Scanner
}

// newProcfs returns procfs with a scanner that follows execs when the
// kernel lets this process watch them, and says why not otherwise.
func newProcfs(log *zap.Logger) procfs {
	w, err := perf.OpenExecWatcher()
	if err != nil {
		log.Info("Discovery reads every process at every scan: cannot watch the host's execs", zap.Error(err))
		w = nil
	}
	return procfs{scan: &scanner{s: perf.NewScanner(w)}, watch: w}
}

// pollStarts reads what the exec watcher saw for the next scan, and
// reports whether a process started or exec'd.
func (p procfs) pollStarts() bool {
	p.scan.mu.Lock()
	defer p.scan.mu.Unlock()
	return p.scan.s.Poll()
}

// waitStart waits up to timeout (no bound when 0) for the exec watcher to see a process
// start, end or exec (or a thread's), and reports whether it did. It
// returns an error when there is no watcher or it was closed.
func (p procfs) waitStart(timeout time.Duration) (bool, error) {
	if p.watch == nil {
		return false, errors.New("no exec watcher")
	}
	return p.watch.Wait(timeout)
}

func (p procfs) close() error {
	if p.scan == nil {
		return nil
	}
	p.scan.mu.Lock()
	defer p.scan.mu.Unlock()
	return p.scan.s.Close()
}

func (p procfs) stats() perf.ScanStats {
	if p.scan == nil {
		return perf.ScanStats{}
	}
	p.scan.mu.Lock()
	defer p.scan.mu.Unlock()
	return p.scan.s.Stats()
}

func (procfs) Read(pid int) (perf.Process, error) { return perf.ReadProcess(pid) }
func (procfs) Alive(p perf.Process) bool          { return p.Alive() }

// Scan reads the cgroups only of the processes the names select:
// discovery runs every second over every process of the host.
func (p procfs) Scan(names []string, cgroups container.Selector) ([]perf.Process, error) {
	match := func(p perf.Process) bool {
		if len(names) > 0 && !p.Matches(names) {
			return false
		}
		if cgroups.Empty() {
			return true
		}
		c, err := container.ReadCgroup(p.Pid)
		return err == nil && cgroups.Match(c)
	}
	if p.scan == nil {
		return perf.ScanFunc(match)
	}
	p.scan.mu.Lock()
	defer p.scan.mu.Unlock()
	return p.scan.s.Scan(match)
}

func (procfs) Thread(pid, tid int, nested bool) (string, uint32) {
	if !nested {
		return perf.ThreadName(pid, tid), 0
	}
	name, ids, err := container.ReadThread(pid, tid)
	if err != nil || len(ids) == 0 {
		return perf.ThreadName(pid, tid), 0
	}
	return name, uint32(ids[len(ids)-1])
}

func (procfs) Identity(pid int) (Identity, error) { return container.ReadIdentity(pid) }

func (procfs) ThreadIDs(pid, max int) (map[uint32]uint32, error) {
	m, err := container.ThreadIDs(pid, max)
	if err != nil {
		return nil, err
	}
	out := make(map[uint32]uint32, len(m))
	for local, tid := range m {
		out[uint32(local)] = uint32(tid)
	}
	return out, nil
}
