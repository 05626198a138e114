package perf

import "time"

// Scope says how a session attaches its sampling events.
type Scope int

const (
	// ScopeProcess opens events per thread × CPU of each target, with
	// inherit, like `perf record -p`. Needs no system-wide privilege for
	// one's own processes.
	ScopeProcess Scope = iota
	// ScopeSystem opens one event per CPU for every process and keeps the
	// records of the targets. Needs CAP_PERFMON (or paranoid ≤ 0), and costs
	// less than ScopeProcess when targets have many threads.
	ScopeSystem
)

func (s Scope) String() string {
	if s == ScopeSystem {
		return "system"
	}
	return "process"
}

// Options configure a [Session].
type Options struct {
	Scope Scope
	// Frequency is the sampling frequency in Hz of CPU time (cpu-clock).
	Frequency uint64
	// KernelStacks adds the kernel part of each callchain.
	KernelStacks bool
	// RingPages is the number of data pages per CPU ring, a power of two.
	// Zero means 64 (256 KiB with 4 KiB pages).
	RingPages int
	// WakeFraction says when a ring wakes Read: when it holds
	// 1/WakeFraction of its size (2, 4, 8 ...). Zero means 4. Every wake-up
	// costs the collector a few context switches: a ring that holds
	// plenty of time at the sampling rate can wake later.
	WakeFraction int
	// Sched adds context-switch capture: PERF_RECORD_SWITCH records (in
	// and out, with the preempt flag) and a sample with the callchain at
	// every switch-out (the context-switches software event, period 1).
	Sched bool
	// StackUser is the number of bytes of user stack (from SP up) to copy
	// with each cpu-clock sample, with the user registers IP, SP and BP
	// (see [Sample.UserSP]); 0 copies nothing. It is rounded up to 8 bytes.
	// 512 is enough to find the return address of a leaf function that
	// has not pushed a frame (package unwind recovers it).
	StackUser uint32
	// BPFProgram is the file descriptor of a BPF_PROG_TYPE_PERF_EVENT
	// program to attach (PERF_EVENT_IOC_SET_BPF) to every cpu-clock
	// sampling event the session opens, now and later, before it is
	// enabled: it runs at each sample, and a sample it returns 0 for is
	// dropped. Inherited events (new threads) inherit it. 0 means none.
	// The session does not own it: close it after the session.
	BPFProgram int
	// BPFSwitchProgram is the same for the context-switch events (Sched):
	// it runs at every switch-out sample, as the thread leaves the CPU.
	BPFSwitchProgram int
}

// EventKind says which event produced a sample.
type EventKind uint8

const (
	// EventCPUClock samples are on-CPU samples (cpu-clock).
	EventCPUClock EventKind = iota
	// EventSwitch samples are taken as the thread leaves the CPU; their
	// callchain is where it blocked or was preempted.
	EventSwitch
)

// String returns "cpu-clock" or "context-switch".
func (k EventKind) String() string {
	if k == EventSwitch {
		return "context-switch"
	}
	return "cpu-clock"
}

// Read passes over the rings when one is a quarter full, and at least
// every readWake while records other than samples may be waiting: with
// context-switch events (their accounting waits for every CPU's records,
// see profiler.reorderDelay), and for readBusy after an Attach or a pass
// that delivered a target's mmap, comm, fork or exit record (a process
// that maps code and exits soon after must have its map read while it
// lives, and for readBusy after Open), and while the owner asks for it (Session.SetPrompt: JIT
// targets, whose perf maps change). Otherwise, with steady targets, it passes at least every
// readIdle: every pass wakes the collector (and the Go runtime's sysmon
// with it), and at 99 Hz the timer's ten passes a second were half of
// its context switches and a third of its CPU.
const (
	readWake = 100 * time.Millisecond
	readIdle = time.Second
	readBusy = 5 * time.Second
)

// Stats are cumulative counters of a session.
type Stats struct {
	Records uint64 // records decoded and delivered (after the target filter)
	Samples uint64 // of which samples
	// Lost counts records the kernel dropped because a ring was full
	// (PERF_RECORD_LOST, PERF_RECORD_LOST_SAMPLES).
	Lost uint64
	// Corrupt counts records that did not decode; they are skipped.
	Corrupt uint64
	// Passes counts the reader's passes over the rings: each is a
	// wake-up of the collector, the larger part of its cost at low rates.
	Passes uint64
	// LongestGap is the longest time between the starts of two
	// consecutive passes over the rings. Read wakes at least every
	// second (every 100 ms while records other than samples come), so a
	// longer gap means fn held the reader up.
	LongestGap time.Duration
}
