package perf

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Process identifies one process. Pid and StartTime together survive pid
// reuse: a new process with an old pid has another start time.
type Process struct {
	Pid       int
	StartTime uint64 // field 22 of /proc/PID/stat, clock ticks since boot
	Exe       string // target of /proc/PID/exe, " (deleted)" removed
	Comm      string
}

// ReadProcess reads what identifies pid from /proc. The error wraps
// ErrNoProcess when the process does not exist.
func ReadProcess(pid int) (Process, error) {
	p := Process{Pid: pid}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		if os.IsNotExist(err) {
			return p, fmt.Errorf("process %d: %w", pid, ErrNoProcess)
		}
		return p, fmt.Errorf("read /proc/%d/stat: %w", pid, err)
	}
	// The comm field is in parentheses and may itself hold spaces and
	// parentheses: split after the last ')'.
	i, j := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if i < 0 || j < i {
		return p, fmt.Errorf("parse /proc/%d/stat: no comm field", pid)
	}
	p.Comm = string(stat[i+1 : j])
	fields := strings.Fields(string(stat[j+1:]))
	// fields[0] is field 3 (state); starttime is field 22.
	if len(fields) < 20 {
		return p, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(fields)+2)
	}
	if p.StartTime, err = strconv.ParseUint(fields[19], 10, 64); err != nil {
		return p, fmt.Errorf("parse starttime in /proc/%d/stat: %w", pid, err)
	}
	// Kernel threads and processes of other users (without privilege) have
	// no readable exe; they are still processes.
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil {
		p.Exe = strings.TrimSuffix(exe, " (deleted)")
	}
	return p, nil
}

// CheckProc makes sure that /proc names processes as perf does: perf gives
// the pids and tids of samples in the pid namespace of the process that
// opened the events, and discovery, thread names, symbols and the span
// readers find processes in /proc, whose pids are those of the namespace
// that mounted it. A process in a pid namespace of its own that sees an
// ancestor's /proc (unshare --pid --fork without --mount-proc, or the
// host's /proc bind-mounted at /proc) would match no sample to any target.
func CheckProc() error {
	self, err := os.Readlink("/proc/self")
	if err != nil {
		return fmt.Errorf("read /proc/self: %w", err)
	}
	if self != strconv.Itoa(os.Getpid()) {
		return fmt.Errorf("%w: it shows this collector as pid %s, while it is pid %d in its own pid namespace, where perf names "+
			"the processes it samples; fix: mount a /proc of the collector's pid namespace at /proc (a container runtime does; "+
			"unshare --pid --fork --mount-proc), or run the collector in the pid namespace whose /proc it has (hostPID: true in Kubernetes)",
			ErrProcNamespace, self, os.Getpid())
	}
	return nil
}

// Alive reports whether p is still running (same pid and start time).
func (p Process) Alive() bool {
	q, err := ReadProcess(p.Pid)
	return err == nil && q.StartTime == p.StartTime
}

// Matches reports whether the process runs one of the named executables.
// A name with a "/" is an executable path and matches only the path of
// the process's executable, as the kernel links it (/proc/PID/exe). A
// name without one matches the base name of the executable, or the comm
// (which the kernel truncates to 15 bytes).
//
// A process chooses its own comm (prctl(PR_SET_NAME), or a write to
// /proc/self/comm) and any user can run a copy of a binary under any
// base name, so a bare name selects whatever process wants to be
// selected. A path selects only processes that run that file, which on
// a host only those who can write it can replace; in a container the
// path is the container's, so there the cgroup is the selector to trust.
func (p Process) Matches(names []string) bool {
	base := filepath.Base(p.Exe)
	for _, n := range names {
		if strings.Contains(n, "/") {
			if p.Exe != "" && n == p.Exe {
				return true
			}
			continue
		}
		if p.Exe != "" && n == base {
			return true
		}
		c := n
		if len(c) > 15 {
			c = c[:15]
		}
		if c == p.Comm {
			return true
		}
	}
	return false
}

// Scan lists the running processes that match one of names (see
// [Process.Matches]), leaving out the calling process.
func Scan(names []string) ([]Process, error) {
	return ScanFunc(func(p Process) bool { return p.Matches(names) })
}

// ScanFunc lists the running processes for which match returns true,
// leaving out the calling process.
func ScanFunc(match func(Process) bool) ([]Process, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list /proc: %w", err)
	}
	self := os.Getpid()
	var out []Process
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		p, err := ReadProcess(pid)
		if err != nil {
			continue // exited while we looked
		}
		if match(p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// Threads lists the thread ids of pid from /proc/PID/task.
func Threads(pid int) ([]int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("threads of %d: %w", pid, ErrNoProcess)
		}
		return nil, fmt.Errorf("list threads of %d: %w", pid, err)
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// ThreadName reads the comm of one thread, "" if it is gone.
func ThreadName(pid, tid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", pid, tid))
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(b), "\n")
}

// RingCPUs returns how many CPUs a Session opens a ring on: every online
// CPU, which may be more than the collector may run on (runtime.NumCPU
// counts those of its affinity mask, a container's cpuset).
func RingCPUs() (int, error) {
	cpus, err := onlineCPUs()
	return len(cpus), err
}

// onlineCPUs parses /sys/devices/system/cpu/online ("0-3,6").
func onlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, fmt.Errorf("read online cpus: %w", err)
	}
	var cpus []int
	for _, part := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("parse online cpus %q: %w", b, err)
		}
		z := a
		if isRange {
			if z, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("parse online cpus %q: %w", b, err)
			}
		}
		for c := a; c <= z; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// scanFullEvery is how long a Scanner with an ExecWatcher goes between
// two scans that read every process: the watcher sees every process
// start, end, exec and rename, but a process moved into another cgroup
// (which a cgroup selector matches) without any of these only a full scan
// finds. Scans come every second, and sooner when the watcher sees a
// process start.
const scanFullEvery = 30 * time.Second

// A Scanner finds processes as ScanFunc does, reading only the processes
// that started, ended, exec'd or renamed a thread since its last scan (told
// by an ExecWatcher), and the ones that matched. Discovery runs every
// second over every process of the host: at ~15 µs a process, a full scan
// of a node with 2 000 processes takes 3% of a CPU; listing /proc alone is
// a third of that. Without a watcher, or when it lost records, a scan is
// full.
type Scanner struct {
	watch    *ExecWatcher
	seen     map[int]bool // pid → matched at its last read
	lastFull time.Time
	stats    ScanStats
	// pending are the pids Poll read from the watcher for the next
	// Scan; lost says records were lost since the last Scan.
	pending map[int]bool
	lost    bool
}

// ScanStats count the work of a Scanner.
type ScanStats struct {
	Scans, Full int64 // scans, and of them those that read every process
	Reads       int64 // processes read from /proc
}

// NewScanner returns a Scanner that uses w (nil: none). The Scanner
// closes w.
func NewScanner(w *ExecWatcher) *Scanner {
	return &Scanner{watch: w, seen: map[int]bool{}}
}

// Scan lists the running processes for which match returns true, leaving
// out the calling process. match must answer the same for a process as
// long as it neither execs nor renames a thread.
func (s *Scanner) Scan(match func(Process) bool) ([]Process, error) {
	s.Poll()
	changed := s.pending
	s.pending = nil
	full := s.watch == nil || s.lost || time.Since(s.lastFull) >= scanFullEvery
	s.lost = false
	if full {
		s.lastFull = time.Now()
	}
	s.stats.Scans++
	self := os.Getpid()
	var out []Process
	read := func(pid int) {
		s.stats.Reads++
		p, err := ReadProcess(pid)
		if err != nil {
			delete(s.seen, pid) // gone
			return
		}
		m := match(p)
		s.seen[pid] = m
		if m {
			out = append(out, p)
		}
	}
	if !full {
		for pid, matched := range s.seen {
			if matched && !changed[pid] {
				read(pid)
			}
		}
		for pid := range changed {
			if pid != self {
				read(pid)
			}
		}
		return out, nil
	}
	s.stats.Full++
	d, err := os.Open("/proc")
	if err != nil {
		return nil, fmt.Errorf("list /proc: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("list /proc: %w", err)
	}
	clear(s.seen)
	for _, name := range names {
		if pid, err := strconv.Atoi(name); err == nil && pid != self {
			read(pid)
		}
	}
	return out, nil
}

// Poll reads what the watcher saw since the last Poll or Scan, for the
// next Scan, and reports whether a process started or exec'd: only then
// can a Scan find a new process to profile. Thread starts and ends, and
// renames, wake the watcher too; they are read, and the caller need not
// scan for them.
func (s *Scanner) Poll() (starts bool) {
	if s.watch == nil {
		return false
	}
	if s.pending == nil {
		s.pending = map[int]bool{}
	}
	if !s.watch.Changed(func(pid int, start bool) {
		s.pending[pid] = true
		starts = starts || start
	}) {
		s.lost = true
		starts = true
	}
	return starts
}

// Stats returns the counters of s.
func (s *Scanner) Stats() ScanStats { return s.stats }

// Watcher returns the Scanner's ExecWatcher, nil when it has none. Its
// Wait may be called while the Scanner scans.
func (s *Scanner) Watcher() *ExecWatcher { return s.watch }

// Close releases the watcher.
func (s *Scanner) Close() error {
	if s.watch == nil {
		return nil
	}
	err := s.watch.Close()
	s.watch = nil
	return err
}
