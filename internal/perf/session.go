package perf

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/perfprof/perfprof/internal/clock"
)

// Session samples a changing set of processes. Attach and Detach may be
// called from any goroutine while another one runs Read.
type Session struct {
	opts   Options
	format format
	attr   unix.PerfEventAttr // the sampling event
	swAttr unix.PerfEventAttr // the context-switch event (Options.Sched)
	cpus   []int
	rings  []*ring // indexed like cpus
	epfd   int
	// ep is epfd in the Go runtime's poller, so that Read parks its
	// goroutine instead of blocking a thread in epoll_wait: a thread
	// blocked in a system call keeps the runtime's sysmon waking every
	// 20 µs to hand its P off, which cost more than reading the rings at
	// 1 000 wake-ups a second. nil where the poller refused it.
	ep   *os.File
	evfd int // written by Close to wake Read

	mu     sync.Mutex
	procs  map[int]*attachment // by pid
	sysFDs []int               // ScopeSystem: one sampling event per CPU

	// targets is the set of attached pids, read by Read without locking.
	targets atomic.Pointer[map[uint32]struct{}]
	// kinds maps event ids (PERF_EVENT_IOC_ID) to what they sample; it is
	// replaced, never changed, so Read looks it up without locking.
	kinds   atomic.Pointer[map[uint64]EventKind]
	kindsMu sync.Mutex

	records, samples, lost, corrupt, passes atomic.Uint64
	longestGap                              atomic.Int64 // ns
	lastAttach                              atomic.Int64 // Unix ns of the last Attach, for Read's timer
	prompt                                  atomic.Bool  // SetPrompt: pass at least every readWake

	readMu    sync.Mutex // held by Read; Close waits for it
	closeOnce sync.Once
	closed    atomic.Bool
}

// attachment is one process in ScopeProcess.
type attachment struct {
	pid int
	fds []int
	// covered lists the threads whose samples arrive: those we opened
	// events for and those created by them since (inherited, learned from
	// FORK records). suspect lists threads seen uncovered by one Refresh.
	covered map[uint32]bool
	suspect map[int]bool
}

const bitBuildID = 1 << 34 // perf_event_attr.build_id, Linux 5.12

// Open checks that sampling is allowed, sets up one ring per online CPU and
// opens the per-CPU events of ScopeSystem. Processes are added with Attach.
func Open(opts Options) (_ *Session, err error) {
	if opts, err = opts.withDefaults(); err != nil {
		return nil, err
	}
	cpus, err := onlineCPUs()
	if err != nil {
		return nil, err
	}
	s := &Session{
		opts:  opts,
		cpus:  cpus,
		procs: map[int]*attachment{},
		epfd:  -1,
		evfd:  -1,
	}
	s.targets.Store(&map[uint32]struct{}{})
	s.kinds.Store(&map[uint64]EventKind{})
	defer func() {
		if err != nil {
			s.release()
		}
	}()
	s.setAttrs()
	if err := s.openPoller(); err != nil {
		return nil, err
	}
	if err := s.openRings(); err != nil {
		return nil, err
	}
	if opts.Scope == ScopeSystem {
		for i, cpu := range cpus {
			fds, err := s.openEvents(-1, cpu, i)
			s.sysFDs = append(s.sysFDs, fds...)
			if err != nil {
				return nil, fmt.Errorf("open system-wide sampling: %w", err)
			}
		}
	}
	return s, nil
}

// withDefaults fills in the defaults of o and checks it.
func (o Options) withDefaults() (Options, error) {
	if o.Frequency == 0 {
		return o, errors.New("perf: frequency must be above 0 Hz")
	}
	if o.RingPages == 0 {
		o.RingPages = 64
	}
	if o.WakeFraction == 0 {
		o.WakeFraction = 4
	}
	if o.WakeFraction < 2 {
		return o, fmt.Errorf("perf: wake fraction %d is below 2", o.WakeFraction)
	}
	if o.RingPages&(o.RingPages-1) != 0 {
		return o, fmt.Errorf("perf: ring pages %d is not a power of two", o.RingPages)
	}
	o.StackUser = (o.StackUser + 7) &^ 7
	return o, nil
}

// baseSampleType is what every sample of the session holds.
const baseSampleType = sampleIdentifier | sampleIP | sampleTID | sampleTime | sampleCPU | samplePeriod | sampleCallchain

// setAttrs sets the attributes of the sampling and context-switch events
// that Attach opens for the targets, and the format their samples decode
// with.
func (s *Session) setAttrs() {
	opts := &s.opts
	// Only the cpu-clock event copies registers and stack: the switch
	// event keeps baseSampleType, and its samples end after the callchain
	// (see format.decodeSample).
	cpuSampleType := uint64(baseSampleType)
	if opts.StackUser > 0 {
		cpuSampleType |= sampleRegsUser | sampleStackUser
	}
	s.format = newFormat(cpuSampleType, regsMask)
	s.attr = unix.PerfEventAttr{
		Type:        unix.PERF_TYPE_SOFTWARE,
		Config:      unix.PERF_COUNT_SW_CPU_CLOCK,
		Size:        uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample:      opts.Frequency,
		Sample_type: cpuSampleType,
		Bits: unix.PerfBitFreq | unix.PerfBitSampleIDAll | unix.PerfBitUseClockID |
			unix.PerfBitMmap | unix.PerfBitMmap2 | unix.PerfBitComm | unix.PerfBitCommExec |
			unix.PerfBitTask | unix.PerfBitExcludeHv | bitBuildID,
		Clockid: unix.CLOCK_MONOTONIC,
	}
	if !opts.KernelStacks {
		s.attr.Bits |= unix.PerfBitExcludeCallchainKernel
	}
	if opts.StackUser > 0 {
		s.attr.Sample_regs_user = regsMask
		s.attr.Sample_stack_user = opts.StackUser
	}
	if opts.Scope == ScopeProcess {
		s.attr.Bits |= unix.PerfBitInherit
	}
	// The context-switch event: a sample at every switch-out of a target
	// thread, and PERF_RECORD_SWITCH records both ways. Side-band records
	// (mmap, comm, task) come from the sampling event only.
	s.swAttr = unix.PerfEventAttr{
		Type:        unix.PERF_TYPE_SOFTWARE,
		Config:      unix.PERF_COUNT_SW_CONTEXT_SWITCHES,
		Size:        uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample:      1,
		Sample_type: baseSampleType,
		Bits: unix.PerfBitSampleIDAll | unix.PerfBitUseClockID | unix.PerfBitContextSwitch |
			unix.PerfBitExcludeHv | s.attr.Bits&(unix.PerfBitInherit|unix.PerfBitExcludeCallchainKernel),
		Clockid: unix.CLOCK_MONOTONIC,
	}
}

// openPoller creates the epoll instance that Read waits on, and the
// eventfd by which Close interrupts it.
func (s *Session) openPoller() (err error) {
	if s.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return fmt.Errorf("create epoll: %w", err)
	}
	// The poller gets a duplicate (the same epoll instance), which its
	// File owns.
	if dup, err := unix.FcntlInt(uintptr(s.epfd), unix.F_DUPFD_CLOEXEC, 0); err == nil {
		if err := unix.SetNonblock(dup, true); err != nil {
			unix.Close(dup)
		} else if ep := os.NewFile(uintptr(dup), "perf rings"); ep.SetReadDeadline(time.Time{}) == nil {
			s.ep = ep
		} else {
			ep.Close()
		}
	}
	// A session is opened to attach: Read passes promptly from the start
	// (an Attach does not cut short a wait that began before it).
	s.lastAttach.Store(time.Now().UnixNano())
	if s.evfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return fmt.Errorf("create eventfd: %w", err)
	}
	if err := unix.EpollCtl(s.epfd, unix.EPOLL_CTL_ADD, s.evfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(s.evfd)}); err != nil {
		return fmt.Errorf("watch eventfd: %w", err)
	}
	return nil
}

// openRings maps the ring of each CPU and has the poller watch it.
func (s *Session) openRings() error {
	ringBytes := s.opts.RingPages * unix.Getpagesize()
	for _, cpu := range s.cpus {
		// The ring of each CPU belongs to a dummy event on the collector's
		// own main thread, not to a target's event: targets come and go,
		// the ring stays. Its watermark wakes the reader (at a quarter
		// full by default, see Options.WakeFraction).
		owner := unix.PerfEventAttr{
			Type:        unix.PERF_TYPE_SOFTWARE,
			Config:      unix.PERF_COUNT_SW_DUMMY,
			Size:        uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
			Sample_type: baseSampleType,
			Bits: unix.PerfBitSampleIDAll | unix.PerfBitUseClockID | unix.PerfBitWatermark |
				unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv,
			Clockid: unix.CLOCK_MONOTONIC,
			Wakeup:  uint32(ringBytes / s.opts.WakeFraction),
		}
		fd, err := unix.PerfEventOpen(&owner, os.Getpid(), cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			return explainOpenError(fmt.Sprintf("open ring event on cpu %d", cpu), err, 0)
		}
		r, err := newRing(fd, cpu, s.opts.RingPages)
		if err != nil {
			unix.Close(fd)
			return err
		}
		s.rings = append(s.rings, r)
		if err := unix.EpollCtl(s.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			return fmt.Errorf("watch ring of cpu %d: %w", cpu, err)
		}
	}
	return nil
}

// openEvents opens the events of (pid, cpu): the sampler, and the
// context-switch event when Options.Sched is set. On error it returns the
// descriptors it did open, for the caller to close.
func (s *Session) openEvents(pid, cpu, ci int) ([]int, error) {
	fd, err := s.openSampler(pid, cpu, ci)
	if err != nil {
		return nil, err
	}
	fds := []int{fd}
	if s.opts.Sched {
		fd, err := s.openEvent(EventSwitch, &s.swAttr, pid, cpu, ci)
		if err != nil {
			return fds, err
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

// openSampler opens the sampling event for (pid, cpu) and sends its records
// into the ring of cpus[ci]. A kernel without build ids in MMAP2 (before
// 5.12) gets the attribute without them; without privilege for kernel
// samples, the event leaves kernel time out (then CPU spent in the kernel
// goes unsampled).
func (s *Session) openSampler(pid, cpu, ci int) (int, error) {
	what := fmt.Sprintf("open cpu-clock sampling for pid %d on cpu %d", pid, cpu)
	if pid == -1 {
		what = fmt.Sprintf("open system-wide cpu-clock sampling on cpu %d", cpu)
	}
	fd, err := s.openEvent(EventCPUClock, &s.attr, pid, cpu, ci)
	if errors.Is(err, unix.EINVAL) && s.attr.Bits&bitBuildID != 0 {
		s.attr.Bits &^= bitBuildID
		fd, err = s.openEvent(EventCPUClock, &s.attr, pid, cpu, ci)
	}
	if (errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM)) && s.attr.Bits&unix.PerfBitExcludeKernel == 0 && !s.opts.KernelStacks {
		s.attr.Bits |= unix.PerfBitExcludeKernel
		fd, err = s.openEvent(EventCPUClock, &s.attr, pid, cpu, ci)
	}
	if err != nil {
		return -1, explainOpenError(what, err, s.opts.Frequency)
	}
	return fd, nil
}

// openEvent opens one event disabled, sends its records into the ring of
// cpus[ci], notes its id as kind, and only then enables it, so that no
// sample arrives with an id Read does not know. Errors are the raw errno
// (wrapped), for the caller to explain.
func (s *Session) openEvent(kind EventKind, tmpl *unix.PerfEventAttr, pid, cpu, ci int) (int, error) {
	attr := *tmpl
	attr.Bits |= unix.PerfBitDisabled
	fd, err := unix.PerfEventOpen(&attr, pid, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		if kind == EventSwitch {
			return -1, explainOpenError(fmt.Sprintf("open context-switch event for pid %d on cpu %d (sched capture)", pid, cpu), err, 0)
		}
		return -1, err
	}
	ok := false
	defer func() {
		if !ok {
			unix.Close(fd)
		}
	}()
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_OUTPUT, s.rings[ci].fd); err != nil {
		return -1, fmt.Errorf("redirect event of pid %d on cpu %d into its ring: %w", pid, cpu, err)
	}
	var id uint64
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.PERF_EVENT_IOC_ID, uintptr(unsafe.Pointer(&id))); errno != 0 {
		return -1, fmt.Errorf("read event id of pid %d on cpu %d: %w", pid, cpu, errno)
	}
	s.kindsMu.Lock()
	old := *s.kinds.Load()
	m := make(map[uint64]EventKind, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[id] = kind
	s.kinds.Store(&m)
	s.kindsMu.Unlock()
	prog := s.opts.BPFProgram
	if kind == EventSwitch {
		prog = s.opts.BPFSwitchProgram
	}
	if prog > 0 {
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, prog); err != nil {
			// Not %w: an EINVAL here must not look like the open's
			// EINVAL that openSampler retries without build ids.
			if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
				return -1, fmt.Errorf("attach BPF program to the %s event of pid %d on cpu %d: %w (%v)", kind, pid, cpu, ErrPermission, err)
			}
			return -1, fmt.Errorf("attach BPF program to the %s event of pid %d on cpu %d: %v", kind, pid, cpu, err)
		}
	}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
		return -1, fmt.Errorf("enable event of pid %d on cpu %d: %w", pid, cpu, err)
	}
	ok = true
	return fd, nil
}

// Attach starts sampling pid. In ScopeProcess it opens events for every
// thread that exists now; threads created later inherit them. The error
// wraps ErrNoProcess when pid does not exist and ErrPermission when the
// kernel refuses.
func (s *Session) Attach(pid int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return errors.New("perf: session closed")
	}
	if _, ok := s.procs[pid]; ok {
		return nil
	}
	a := &attachment{pid: pid, covered: map[uint32]bool{}, suspect: map[int]bool{}}
	if s.opts.Scope == ScopeProcess {
		tids, err := Threads(pid)
		if err != nil {
			return err
		}
		opened := 0
		for _, tid := range tids {
			ok, err := s.openThread(a, tid)
			if err != nil {
				closeAll(a.fds)
				return err
			}
			if ok {
				opened++
			}
		}
		if opened == 0 {
			return fmt.Errorf("attach to pid %d: %w", pid, ErrNoProcess)
		}
	} else if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
		return fmt.Errorf("attach to pid %d: %w", pid, ErrNoProcess)
	}
	s.procs[pid] = a
	s.publishTargets()
	s.lastAttach.Store(time.Now().UnixNano())
	return nil
}

// openThread opens the sampling events of one thread on every CPU. It
// reports false when the thread is already gone.
func (s *Session) openThread(a *attachment, tid int) (bool, error) {
	fds := make([]int, 0, 2*len(s.cpus))
	for i, cpu := range s.cpus {
		got, err := s.openEvents(tid, cpu, i)
		fds = append(fds, got...)
		if err != nil {
			closeAll(fds)
			if errors.Is(err, ErrNoProcess) {
				return false, nil
			}
			return false, fmt.Errorf("attach to pid %d: %w", a.pid, err)
		}
	}
	a.fds = append(a.fds, fds...)
	a.covered[uint32(tid)] = true
	return true, nil
}

// Refresh looks for threads of attached processes that no event covers: a
// thread created, while Attach ran, by a thread whose events were not open
// yet inherits nothing. A thread is opened once two calls in a row have
// found it uncovered, so that the FORK record of an inherited thread has
// had time to arrive. Call it every second or so.
func (s *Session) Refresh() {
	if s.opts.Scope != ScopeProcess {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for pid, a := range s.procs {
		tids, err := Threads(pid)
		if err != nil {
			continue // gone; the owner detaches it
		}
		next := map[int]bool{}
		for _, tid := range tids {
			if a.covered[uint32(tid)] {
				continue
			}
			if a.suspect[tid] {
				_, _ = s.openThread(a, tid)
				continue
			}
			next[tid] = true
		}
		a.suspect = next
	}
}

// Detach stops sampling pid and releases its events. Records already in
// the rings for it are still delivered if their pid is attached again, and
// dropped otherwise.
func (s *Session) Detach(pid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.procs[pid]
	if !ok {
		return
	}
	closeAll(a.fds)
	delete(s.procs, pid)
	s.publishTargets()
}

// Attached reports whether pid is attached.
func (s *Session) Attached(pid int) bool {
	_, ok := (*s.targets.Load())[uint32(pid)]
	return ok
}

// publishTargets must be called with s.mu held.
func (s *Session) publishTargets() {
	m := make(map[uint32]struct{}, len(s.procs))
	for pid := range s.procs {
		m[uint32(pid)] = struct{}{}
	}
	s.targets.Store(&m)
}

// Stats returns the counters so far.
func (s *Session) Stats() Stats {
	return Stats{
		Records: s.records.Load(),
		Samples: s.samples.Load(),
		Lost:    s.lost.Load(),
		Corrupt: s.corrupt.Load(),
		Passes:  s.passes.Load(),

		LongestGap: time.Duration(s.longestGap.Load()),
	}
}

// Read delivers records of attached processes to fn until Close is called,
// then delivers what the rings still hold and returns nil. Lost-record notices are delivered too, whatever their
// pid. fn runs on the calling goroutine; the Record and the slices in it
// are reused after fn returns. Only one Read may run at a time.
func (s *Session) Read(fn func(*Record)) error {
	if !s.readMu.TryLock() {
		return errors.New("perf: Read is already running")
	}
	defer s.readMu.Unlock()
	var rec Record
	sideband := false // a pass delivered a record other than a sample
	var targets map[uint32]struct{}
	var kinds map[uint64]EventKind
	deliver := func(r *Record) {
		var pid uint32
		switch r.Type {
		case RecordSample:
			pid = r.Sample.Pid
			r.Sample.Kind = kinds[r.Sample.ID]
		case RecordLost, RecordLostSamples:
			s.lost.Add(r.Lost)
			s.records.Add(1)
			fn(r)
			return
		case RecordComm:
			pid = r.Comm.Pid
		case RecordFork, RecordExit:
			pid = r.Task.Pid
		case RecordMmap2:
			pid = r.Mmap2.Pid
		default:
			pid = r.ID.Pid
		}
		if _, ok := targets[pid]; !ok {
			return
		}
		if r.Type == RecordFork && r.Task.Pid == r.Task.Ppid {
			s.noteThread(r.Task.Pid, r.Task.Tid, true)
		} else if r.Type == RecordExit && r.Task.Pid != r.Task.Tid {
			s.noteThread(r.Task.Pid, r.Task.Tid, false)
		}
		if r.Type == RecordSample && r.Sample.Kind == EventCPUClock {
			s.samples.Add(1)
		} else if r.Type != RecordSample {
			sideband = true
		}
		s.records.Add(1)
		fn(r)
	}
	events := make([]unix.EpollEvent, len(s.rings)+1)
	var lastPass, lastSideband time.Time
	for {
		// Wake at least every readWake while a quiet target's records
		// other than samples may be waiting (see readIdle).
		wake := readIdle
		if s.opts.Sched || s.prompt.Load() || time.Since(lastSideband) < readBusy || time.Since(time.Unix(0, s.lastAttach.Load())) < readBusy {
			wake = readWake
		}
		// On a beat (clock.UntilBeat), and not before wake since the
		// last pass: a reader that its watermark wakes needs no more.
		within := wake
		if !lastPass.IsZero() {
			within = max(time.Until(lastPass.Add(wake)), 0)
		}
		if err := s.wait(events, clock.UntilBeat(wake, within)); err != nil {
			return fmt.Errorf("wait for perf rings: %w", err)
		}
		now := time.Now()
		if !lastPass.IsZero() {
			if gap := int64(now.Sub(lastPass)); gap > s.longestGap.Load() {
				s.longestGap.Store(gap)
			}
		}
		lastPass = now
		s.passes.Add(1)
		closed := s.closed.Load()
		targets = *s.targets.Load()
		kinds = *s.kinds.Load()
		sideband = false
		for _, r := range s.rings {
			st := r.read(&s.format, &rec, deliver)
			if st.corrupt > 0 {
				s.corrupt.Add(uint64(st.corrupt))
			}
		}
		if sideband {
			lastSideband = now
		}
		if closed {
			// The pass above delivered what was written before Close.
			return nil
		}
	}
}

// SetPrompt makes Read pass over the rings at least every 100 ms (on), or
// only every second while nothing but samples comes (off, the default).
// The owner of JIT targets sets it: their samples are named by the perf
// map as it stood when they were taken, which it can tell for a few
// changes of the map only.
func (s *Session) SetPrompt(on bool) { s.prompt.Store(on) }

// wait returns when a ring reached its watermark, Close was called or
// timeout passed.
func (s *Session) wait(events []unix.EpollEvent, timeout time.Duration) error {
	if s.ep == nil {
		_, err := unix.EpollWait(s.epfd, events, int(timeout/time.Millisecond))
		if errors.Is(err, unix.EINTR) {
			return nil
		}
		return err
	}
	_, err := waitReadable(s.ep, events, timeout, s.aboveWatermark)
	return err
}

// aboveWatermark reports whether a ring holds its watermark's worth of
// unread bytes: its wake-up may have been taken by the runtime's poller
// before Read waited.
func (s *Session) aboveWatermark() bool {
	mark := uint64(s.opts.RingPages * os.Getpagesize() / s.opts.WakeFraction)
	for _, r := range s.rings {
		if r.unread() >= mark {
			return true
		}
	}
	return false
}

// waitReadable waits up to timeout (no bound when it is 0) for the epoll
// instance ep (registered with the Go runtime's poller) to have a ready
// file, or for pending to report true, and reports whether either
// happened. The goroutine is parked, not its thread.
//
// A wake-up that came while nobody waited may be lost: the runtime's
// poller looks at ep (which reads, and clears, the perf events'
// readiness) and keeps the news for the next wait, but a new wait starts
// by dropping it. So pending looks at the rings themselves after the
// wait has begun, when a wake-up is no longer dropped.
func waitReadable(ep *os.File, events []unix.EpollEvent, timeout time.Duration, pending func() bool) (ready bool, err error) {
	rc, err := ep.SyscallConn()
	if err != nil {
		return false, err
	}
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	if err := ep.SetReadDeadline(deadline); err != nil {
		return false, err
	}
	// epoll_wait without a timeout reports what is ready; when nothing
	// is, the poller parks the goroutine until epfd turns readable, and
	// then the rings are read without asking again: the poller's own
	// look at epfd polled the perf events, and a perf event's poll
	// clears its readiness.
	var werr error
	woken := false
	err = rc.Read(func(fd uintptr) bool {
		if woken {
			ready = true
			return true
		}
		woken = true
		n, err := pollNow(int(fd), events)
		if err != nil && !errors.Is(err, unix.EINTR) {
			werr = err
			return true
		}
		ready = n > 0 || pending()
		return ready
	})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = nil
	}
	return ready, errors.Join(werr, err)
}

// pollNow is epoll_wait with a timeout of 0, made as a raw system call:
// it cannot block, and a call through syscall.Syscall tells the Go
// runtime that the thread may block, which wakes its sysmon thread from
// its sleep whenever the process was idle. At 999 Hz the perf rings wake
// the reader ~60 times a second, and each of those wakes cost a sysmon
// wake-up or two more.
func pollNow(epfd int, events []unix.EpollEvent) (int, error) {
	if len(events) == 0 {
		return 0, nil
	}
	n, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

func (s *Session) noteThread(pid, tid uint32, alive bool) {
	s.mu.Lock()
	if a, ok := s.procs[int(pid)]; ok {
		if alive {
			a.covered[tid] = true
		} else {
			delete(a.covered, tid)
		}
	}
	s.mu.Unlock()
}

// Close stops Read and releases every event and ring. It is safe to call
// more than once.
func (s *Session) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		var one [8]byte
		ne.PutUint64(one[:], 1)
		_, _ = unix.Write(s.evfd, one[:])
		s.readMu.Lock() // wait for Read to leave the rings alone
		defer s.readMu.Unlock()
		s.mu.Lock()
		defer s.mu.Unlock()
		for pid, a := range s.procs {
			closeAll(a.fds)
			delete(s.procs, pid)
		}
		s.release()
	})
	return nil
}

func (s *Session) release() {
	closeAll(s.sysFDs)
	s.sysFDs = nil
	for _, r := range s.rings {
		_ = r.close()
		unix.Close(r.fd)
	}
	s.rings = nil
	if s.ep != nil {
		_ = s.ep.Close()
		s.ep = nil
	}
	if s.epfd >= 0 {
		unix.Close(s.epfd)
		s.epfd = -1
	}
	if s.evfd >= 0 {
		unix.Close(s.evfd)
		s.evfd = -1
	}
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
