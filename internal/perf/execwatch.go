package perf

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// execWatchPages is the data area of each CPU's ring of an ExecWatcher:
// FORK and EXIT records are 32 bytes, COMM records 40 or so, so 8 pages
// hold ~1 000 between two polls: a thread or process started and ended
// every 2 ms on each CPU. Past that the ring says records were lost and the
// caller scans everything, as it would without a watcher.
const execWatchPages = 8

// An ExecWatcher tells which processes of the host started, ended, or
// changed what they run or are called: it receives the kernel's FORK, EXIT
// and COMM records (COMM is written at every exec and every rename of a
// thread, prctl PR_SET_NAME) from a dummy software event on every CPU, as
// perf record -a follows processes. Discovery uses it to read only the
// processes that changed instead of every process every second, and, by
// Wait, to find a new process as it starts rather than at the next scan:
// a process that lives a second lost half of it on average.
//
// It needs what system-wide perf events need: CAP_PERFMON (or
// CAP_SYS_ADMIN), or kernel.perf_event_paranoid ≤ 0.
type ExecWatcher struct {
	fds    []int
	rings  []*ring
	rec    Record
	f      format
	ep     *os.File // an epoll instance over the rings, for Wait; set once
	events []unix.EpollEvent

	mu     sync.RWMutex // Wait holds it read, Close to unmap the rings
	closed bool
}

// OpenExecWatcher opens the watcher's events on every online CPU.
func OpenExecWatcher() (_ *ExecWatcher, err error) {
	cpus, err := onlineCPUs()
	if err != nil {
		return nil, err
	}
	w := &ExecWatcher{}
	defer func() {
		if err != nil {
			w.Close()
		}
	}()
	// Every record makes its ring readable: Wait returns at the first,
	// and its caller paces the waits. wakeup_events would count samples
	// only; a watermark of one byte counts every record.
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_DUMMY,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Bits: unix.PerfBitComm | unix.PerfBitCommExec | unix.PerfBitTask | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv |
			unix.PerfBitWatermark,
		Wakeup: 1,
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("create epoll for the exec watch: %w", err)
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("create epoll for the exec watch: %w", err)
	}
	w.ep = os.NewFile(uintptr(epfd), "exec watch")
	w.events = make([]unix.EpollEvent, len(cpus))
	for _, cpu := range cpus {
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			return nil, explainOpenError(fmt.Sprintf("open exec watch on cpu %d", cpu), err, 0)
		}
		w.fds = append(w.fds, fd)
		r, err := newRing(fd, cpu, execWatchPages)
		if err != nil {
			return nil, err
		}
		w.rings = append(w.rings, r)
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			return nil, fmt.Errorf("watch the exec watch ring of cpu %d: %w", cpu, err)
		}
	}
	return w, nil
}

// Wait waits up to timeout (no bound when it is 0) for a record, and
// reports whether one came.
// Any record counts, threads' included: the caller reads them with
// Changed and paces its calls. It returns an error after Close.
func (w *ExecWatcher) Wait(timeout time.Duration) (bool, error) {
	// Close unmaps the rings that pending reads: it closes ep first,
	// which ends this wait, then takes mu.
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return false, os.ErrClosed
	}
	return waitReadable(w.ep, w.events, timeout, w.pending)
}

// pending reports whether a ring holds a record. Changed reads the rings
// on another goroutine, under the Scanner's lock: a ring it is reading
// may be seen either way, and a record either way is read by it.
func (w *ExecWatcher) pending() bool {
	for _, r := range w.rings {
		if r.unread() > 0 {
			return true
		}
	}
	return false
}

// Changed calls fn with the pid of every process that started, ended,
// exec'd or renamed a thread since the last call (a pid may come more than
// once, and records of different CPUs in any order: the caller reads the
// process as it is now), with start true for a new process or an exec,
// the changes that can make a process one to profile. The start and end
// of threads other than a process's first are not reported. It returns
// false when records were lost: then some changes are not known, and the
// caller must look at every process.
func (w *ExecWatcher) Changed(fn func(pid int, start bool)) (complete bool) {
	complete = true
	for _, r := range w.rings {
		st := r.read(&w.f, &w.rec, func(rec *Record) {
			switch rec.Type {
			case RecordComm:
				fn(int(rec.Comm.Pid), rec.Misc&miscCommExec != 0)
			case RecordFork:
				if rec.Task.Pid == rec.Task.Tid {
					fn(int(rec.Task.Pid), true)
				}
			case RecordExit:
				if rec.Task.Pid == rec.Task.Tid {
					fn(int(rec.Task.Pid), false)
				}
			case RecordLost:
				complete = false
			}
		})
		if st.corrupt > 0 {
			complete = false
		}
	}
	return complete
}

// miscCommExec marks a COMM record written by an exec
// (PERF_RECORD_MISC_COMM_EXEC), not by a rename.
const miscCommExec = 1 << 13

// Close releases the events and rings, and ends a Wait under way. It is
// idempotent.
func (w *ExecWatcher) Close() error {
	var errs []error
	if w.ep != nil {
		// First: a Wait under way returns, and lets go of mu.
		if err := w.ep.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
			errs = append(errs, err)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.rings {
		errs = append(errs, r.close())
	}
	closeAll(w.fds)
	w.rings, w.fds, w.closed = nil, nil, true
	return errors.Join(errs...)
}
