// Package profilertest feeds a profiler.Profiler synthetic records and
// processes, so that the engine's logic (the join, the context-switch
// pairing, batch splitting, process churn) is tested without a kernel.
package profilertest

import (
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/perfprof/perfprof/internal/container"
	"github.com/perfprof/perfprof/internal/perf"
)

// Records is a profiler.Records whose records the test pushes.
type Records struct {
	mu       sync.Mutex
	cond     *sync.Cond
	queue    []perf.Record
	pending  int // pushed and not yet handled
	attached map[int]bool
	failPids map[int]error
	stats    perf.Stats
	closed   bool
}

// NewRecords returns an empty Records.
func NewRecords() *Records {
	s := &Records{attached: map[int]bool{}, failPids: map[int]error{}}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// Push queues records for delivery, in order. Records of processes that
// are not attached are dropped on delivery, as the perf session does.
func (s *Records) Push(recs ...perf.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		if r.Type == perf.RecordSample {
			r.Sample.Callchain = append([]uint64(nil), r.Sample.Callchain...)
		}
		s.queue = append(s.queue, r)
	}
	s.pending += len(recs)
	s.cond.Broadcast()
}

// Sync waits until every pushed record has been handled.
func (s *Records) Sync() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.pending > 0 && !s.closed {
		s.cond.Wait()
	}
}

// AddLost counts records lost, as a full ring would.
func (s *Records) AddLost(n uint64) {
	s.mu.Lock()
	s.stats.Lost += n
	s.mu.Unlock()
}

// FailAttach makes Attach of pid fail with err.
func (s *Records) FailAttach(pid int, err error) {
	s.mu.Lock()
	s.failPids[pid] = err
	s.mu.Unlock()
}

// Read implements profiler.Records.
func (s *Records) Read(fn func(*perf.Record)) error {
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && !s.closed {
			s.cond.Wait()
		}
		if s.closed && len(s.queue) == 0 {
			s.mu.Unlock()
			return nil
		}
		rec := s.queue[0]
		s.queue = s.queue[1:]
		deliver := s.attached[pidOf(&rec)]
		if deliver {
			s.stats.Records++
			if rec.Type == perf.RecordSample && rec.Sample.Kind == perf.EventCPUClock {
				s.stats.Samples++
			}
		}
		s.mu.Unlock()
		if deliver {
			fn(&rec)
		}
		s.mu.Lock()
		s.pending--
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

func pidOf(r *perf.Record) int {
	switch r.Type {
	case perf.RecordSample:
		return int(r.Sample.Pid)
	case perf.RecordComm:
		return int(r.Comm.Pid)
	case perf.RecordFork, perf.RecordExit:
		return int(r.Task.Pid)
	case perf.RecordMmap2:
		return int(r.Mmap2.Pid)
	}
	return int(r.ID.Pid)
}

// Attach implements profiler.Records.
func (s *Records) Attach(pid int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.failPids[pid]; err != nil {
		return err
	}
	s.attached[pid] = true
	return nil
}

// Detach implements profiler.Records.
func (s *Records) Detach(pid int) {
	s.mu.Lock()
	delete(s.attached, pid)
	s.mu.Unlock()
}

// Attached implements profiler.Records.
func (s *Records) Attached(pid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attached[pid]
}

// Refresh implements profiler.Records.
func (s *Records) Refresh() {}

// Stats implements profiler.Records.
func (s *Records) Stats() perf.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Close implements profiler.Records: Read delivers what is queued, then
// returns; every process is detached, as a perf session releases its events.
func (s *Records) Close() error {
	s.mu.Lock()
	s.closed = true
	clear(s.attached)
	s.cond.Broadcast()
	s.mu.Unlock()
	return nil
}

// Procs is a profiler.Procs over processes the test declares.
type Procs struct {
	mu      sync.Mutex
	procs   map[int]perf.Process
	threads map[[2]int]string
	idents  map[int]container.Identity
	locals  map[[2]int]uint32 // thread ids in their process's namespace
	scans   int
	// ThreadScans counts ThreadIDs calls.
	ThreadScans int
}

// NewProcs returns a Procs with the given processes running.
func NewProcs(procs ...perf.Process) *Procs {
	p := &Procs{procs: map[int]perf.Process{}, threads: map[[2]int]string{}, idents: map[int]container.Identity{}, locals: map[[2]int]uint32{}}
	for _, proc := range procs {
		p.Start(proc)
	}
	return p
}

// Start makes proc run (replacing a process with its pid).
func (p *Procs) Start(proc perf.Process) {
	p.mu.Lock()
	p.procs[proc.Pid] = proc
	p.mu.Unlock()
}

// Exit ends the process pid.
func (p *Procs) Exit(pid int) {
	p.mu.Lock()
	delete(p.procs, pid)
	p.mu.Unlock()
}

// NameThread sets the comm of a thread.
func (p *Procs) NameThread(pid, tid int, name string) {
	p.mu.Lock()
	p.threads[[2]int{pid, tid}] = name
	p.mu.Unlock()
}

// Read implements profiler.Procs.
func (p *Procs) Read(pid int) (perf.Process, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	proc, ok := p.procs[pid]
	if !ok {
		return perf.Process{Pid: pid}, fmt.Errorf("process %d: %w", pid, perf.ErrNoProcess)
	}
	return proc, nil
}

// Scans returns how many times Scan was called.
func (p *Procs) Scans() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.scans
}

// Scan implements profiler.Procs.
func (p *Procs) Scan(names []string, cgroups container.Selector) ([]perf.Process, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.scans++
	var out []perf.Process
	for _, proc := range p.procs {
		if (len(names) == 0 || proc.Matches(names)) && cgroups.Match(p.identLocked(proc.Pid).Cgroup) {
			out = append(out, proc)
		}
	}
	return out, nil
}

// SetIdentity says where process pid runs (its pid namespace and
// cgroups); without it a process is in the collector's namespace and no
// container.
func (p *Procs) SetIdentity(pid int, id container.Identity) {
	p.mu.Lock()
	p.idents[pid] = id
	p.mu.Unlock()
}

// SetLocalTid gives thread tid of pid the id local in its process's pid
// namespace.
func (p *Procs) SetLocalTid(pid, tid int, local uint32) {
	p.mu.Lock()
	p.locals[[2]int{pid, tid}] = local
	p.mu.Unlock()
}

func (p *Procs) identLocked(pid int) container.Identity {
	if id, ok := p.idents[pid]; ok {
		return id
	}
	return container.Identity{LocalPid: pid}
}

// Identity implements profiler.Procs.
func (p *Procs) Identity(pid int) (container.Identity, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.identLocked(pid), nil
}

// ThreadIDs implements profiler.Procs.
func (p *Procs) ThreadIDs(pid, max int) (map[uint32]uint32, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ThreadScans++
	m := map[uint32]uint32{}
	for k, local := range p.locals {
		if k[0] == pid && len(m) < max {
			m[local] = uint32(k[1])
		}
	}
	return m, nil
}

// Alive implements profiler.Procs.
func (p *Procs) Alive(proc perf.Process) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	q, ok := p.procs[proc.Pid]
	return ok && q.StartTime == proc.StartTime
}

// Thread implements profiler.Procs.
func (p *Procs) Thread(pid, tid int, nested bool) (string, uint32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !nested {
		return p.threads[[2]int{pid, tid}], 0
	}
	return p.threads[[2]int{pid, tid}], p.locals[[2]int{pid, tid}]
}

// Sample returns an on-CPU sample record of pid/tid at CLOCK_MONOTONIC
// time t with a user callchain of addrs (leaf first).
func Sample(pid, tid int, t uint64, addrs ...uint64) perf.Record {
	rec := perf.Record{Type: perf.RecordSample}
	rec.Sample = perf.SampleRecord{Pid: uint32(pid), Tid: uint32(tid), Time: t, Kind: perf.EventCPUClock,
		Callchain: append([]uint64{perf.ContextUser}, addrs...)}
	return rec
}

// SwitchSample returns the sample taken as tid left the CPU at t, with the
// stack where it blocked.
func SwitchSample(pid, tid int, t uint64, addrs ...uint64) perf.Record {
	rec := Sample(pid, tid, t, addrs...)
	rec.Sample.Kind = perf.EventSwitch
	return rec
}

// SwitchOut returns the record of tid leaving the CPU at t, preempted or
// not.
func SwitchOut(pid, tid int, t uint64, preempt bool) perf.Record {
	rec := perf.Record{Type: perf.RecordSwitch, Misc: perf.MiscSwitchOut}
	if preempt {
		rec.Misc |= perf.MiscSwitchOutPreempt
	}
	rec.ID = perf.SampleID{Pid: uint32(pid), Tid: uint32(tid), Time: t}
	return rec
}

// SwitchIn returns the record of tid coming back on a CPU at t.
func SwitchIn(pid, tid int, t uint64) perf.Record {
	rec := perf.Record{Type: perf.RecordSwitch}
	rec.ID = perf.SampleID{Pid: uint32(pid), Tid: uint32(tid), Time: t}
	return rec
}

// Exec returns the record of pid replacing its program by comm at t. The
// engine takes an exec before it attached pid for the one that made the
// image it found.
func Exec(pid int, t uint64, comm string) perf.Record {
	rec := perf.Record{Type: perf.RecordComm, Misc: perf.MiscCommExec}
	rec.Comm = perf.Comm{Pid: uint32(pid), Tid: uint32(pid), Comm: []byte(comm)}
	rec.ID = perf.SampleID{Pid: uint32(pid), Tid: uint32(pid), Time: t}
	return rec
}

// Callchains returns n distinct user callchains (marker first) of 16 real
// return addresses of the calling test binary, as perf would report them
// for it: stacks that symbolize, for benchmarks.
func Callchains(tb testing.TB, n int) [][]uint64 {
	pcs := make([]uintptr, 64)
	k := runtime.Callers(0, pcs)
	if k < 4 {
		tb.Fatal("too few frames")
	}
	chains := make([][]uint64, n)
	for i := range chains {
		c := []uint64{perf.ContextUser}
		for j := 0; j < 16; j++ {
			c = append(c, uint64(pcs[(i+j)%k])+uint64(i%3))
		}
		chains[i] = c
	}
	return chains
}
