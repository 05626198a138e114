package profiler

import (
	"fmt"

	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/unwind"
)

// UnwindMode says how the user part of on-CPU stacks is found.
type UnwindMode uint8

const (
	// UnwindFramePointer keeps the kernel's frame-pointer callchains: the
	// cheapest samples, whole for code built with frame pointers (Go, and
	// C, C++ and Rust built with -fno-omit-frame-pointer), cut short in
	// code built without them.
	UnwindFramePointer UnwindMode = iota
	// UnwindAuto copies the top of the user stack with each sample
	// (Options.UnwindStackBytes) and unwinds it on the read loop by what
	// each frame's code needs: its binary's compiled .eh_frame, Go's pcsp
	// tables, the frame pointer for JIT code. Where the copy ends before
	// the stack does, or the stack switches (Go's system stack), the
	// kernel's frame-pointer chain carries on from the last frame both
	// found. Samples taken before the process's tables are read wait for
	// them (see pending.go).
	UnwindAuto
	// UnwindDWARF unwinds as UnwindAuto does but never takes frames from
	// the kernel's chain: a stack deeper than the copy ends there,
	// counted, as in perf's dwarf mode.
	UnwindDWARF
)

// String returns the mode as the receiver's configuration spells it.
func (m UnwindMode) String() string {
	switch m {
	case UnwindAuto:
		return "auto"
	case UnwindDWARF:
		return "dwarf"
	default:
		return "frame_pointer"
	}
}

// ParseUnwindMode reads "auto", "frame_pointer" or "dwarf".
func ParseUnwindMode(s string) (UnwindMode, error) {
	for _, m := range []UnwindMode{UnwindAuto, UnwindFramePointer, UnwindDWARF} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("unwind mode %q: want auto, frame_pointer or dwarf", s)
}

// Stack copies: perf's dwarf mode copies 8 KiB by default; 16 KiB reaches
// the root of the test programs' threads in every sample, and costs the
// sampled thread ~1 µs more a sample than 8 KiB.
const (
	DefaultUnwindStackBytes = 16 << 10
	// MaxUnwindStackBytes is the kernel's bound (a sample's size is 16
	// bits, and the stack shares it with the rest of the sample).
	MaxUnwindStackBytes = 60 << 10
	// maxUnwindFrames bounds the frames of a user stack, as the kernel's
	// perf_event_max_stack (127) bounds its chains.
	maxUnwindFrames = 127
	// unwindRingPages is the ring size per CPU when stacks are copied:
	// 4 MiB holds 256 samples of 16 KiB, 256 ms at 999 Hz, and its
	// watermark wakes the reader every 128. Each wake-up costs the
	// collector far more than the switch (its state is cold, the target
	// having run in between): against 2 MiB rings waking at a quarter,
	// the collector's CPU at 999 Hz on the C target went from 1.38-1.48%
	// of a core to 1.12-1.16% (interleaved runs), with more slack. With
	// 1 MiB the reader fell behind two threads burning both CPUs at
	// 999 Hz under the race detector (8% lost).
	unwindRingPages = 1024
)

// UnwindStats count what became of the user stacks of on-CPU samples when
// they are unwound from copies (UnwindAuto, UnwindDWARF).
type UnwindStats struct {
	Mode UnwindMode
	// Unwound: samples whose stack was unwound from its copy, on the read
	// loop or, for those taken before their process's unwind tables were
	// read, once they were (PendingUnwound); of them, Complete reached the
	// outermost frame, Spliced went on with the kernel's frame-pointer
	// chain, and Stopped (by why: see unwind.Stop) ended early.
	Unwound, Complete, Spliced int64
	Stopped                    [unwind.StopMaxFrames + 1]int64
	// Pending: samples taken before their process's unwind tables were
	// read (at attach, or after an exec), which wait for them in a queue
	// with copies of their stacks (see Options.MaxPendingUnwindBytes). Of
	// them, PendingUnwound were unwound once the tables were read, before
	// their report (they count in Unwound too); PendingOverflow found the
	// queue full, and PendingUnread were reported before their tables
	// could be read (the process exited or exec'd first, or its memory
	// map is unreadable): both keep the kernel's chain. The others wait
	// in the queue now.
	Pending, PendingUnwound, PendingOverflow, PendingUnread int64
	// PendingPeakBytes is the most the queue held at once, stack copies
	// and their bookkeeping.
	PendingPeakBytes int64
	// NoUserStack: samples without user registers or stack (a thread in
	// the kernel only).
	NoUserStack int64
	// StackBytes is the size of the stack copy of each sample.
	StackBytes uint32
}

// unwindSample returns the callchain of s with its user part unwound from
// the stack copy (see UnwindMode), built in e.unwChain, and the leaf
// caller candidate for the samples it leaves to the kernel's chain. Before
// the process's unwind tables are read it returns the kernel's chain and
// queue says whether the sample is to wait for them (queuePending) once it
// is buffered. Called on the read loop with mu held.
func (e *engine) unwindSample(st *procState, s *perf.Sample) (chain []uint64, leaf uint64, queue bool) {
	c := &e.counts.unwind
	ip, ok1 := s.UserIP()
	sp, ok2 := s.UserSP()
	bp, _ := s.UserBP()
	if !ok1 || !ok2 || len(s.StackUser) == 0 {
		c.NoUserStack++
		return s.Callchain, 0, false
	}
	u := st.unwinder.Load()
	if u == nil {
		c.Pending++
		if e.opts.RecoverLeafCaller {
			leaf = leafCandidate(s)
		}
		return s.Callchain, leaf, e.pendingRoom(st, len(s.StackUser))
	}
	chain, leaf = e.unwindCopy(u, s.Callchain, unwind.Regs{IP: ip, SP: sp, BP: bp}, s.StackUser)
	return chain, leaf, false
}

// unwindCopy unwinds a user stack from its registers and copy with u, and
// returns the callchain, built in e.unwChain: the kernel part of raw (the
// kernel's callchain of the sample), then the user part unwound, carried
// on by raw's user part where UnwindAuto allows; and the leaf caller
// candidate. It counts the outcome. Called with mu held, on the read loop
// or for a queued sample (settle).
func (e *engine) unwindCopy(u *unwind.Unwinder, raw []uint64, regs unwind.Regs, stack []byte) ([]uint64, uint64) {
	c := &e.counts.unwind
	c.Unwound++
	if cap(e.unwFrames) < maxUnwindFrames {
		e.unwFrames = make([]uint64, 0, maxUnwindFrames)
	}
	frames, stop := u.UnwindCached(regs, &unwind.StackCopy{SP: regs.SP, Data: stack}, e.unwFrames[:0], &e.unwRows)

	// The kernel part, then the user part: the sampled pc and the return
	// addresses unwound.
	kernel, user := splitChain(raw)
	chain := append(e.unwChain[:0], kernel...)
	chain = append(chain, perf.ContextUser, regs.IP)
	chain = append(chain, frames...)
	switch {
	case stop == unwind.StopEnd:
		c.Complete++
	case e.opts.Unwind == UnwindAuto && spliceable(stop):
		last := regs.IP
		if len(frames) > 0 {
			last = frames[len(frames)-1]
		}
		if rest, ok := fpAfter(user, last); ok && len(rest) > 0 {
			n := min(len(rest), maxUnwindFrames-len(frames))
			chain = append(chain, rest[:n]...)
			c.Spliced++
			break
		}
		c.Stopped[stop]++
	default:
		c.Stopped[stop]++
	}
	e.unwChain = chain
	// A leaf without a rule was stepped by its frame pointer, which
	// skips its caller if it has not pushed one (V8's bytecode handlers):
	// symbolization tells, as for the kernel's chains.
	var leaf uint64
	if e.opts.RecoverLeafCaller && len(stack) >= 8 && !u.Covered(regs.IP, &e.unwRows) {
		leaf = ne.Uint64(stack)
	}
	return chain, leaf
}

// spliceable says whether the kernel's chain may carry on where the
// unwinding stopped: the copy ended, or the code had no rule and its frame
// pointer did not step. A stack that did not grow is garbage either way.
func spliceable(stop unwind.Stop) bool {
	switch stop {
	case unwind.StopStackCopy, unwind.StopNoCode, unwind.StopNoRule:
		return true
	}
	return false
}

// splitChain splits a raw callchain at its PERF_CONTEXT_USER marker: the
// kernel part (with its marker) and the user addresses.
func splitChain(chain []uint64) (kernel, user []uint64) {
	for i, a := range chain {
		if a == perf.ContextUser {
			return chain[:i], chain[i+1:]
		}
	}
	if len(chain) > 0 && chain[0] < perf.ContextMax {
		return nil, chain // unmarked: user only
	}
	return chain, nil
}

// fpAfter returns the frames of the kernel's user chain after the first
// that holds ra: the callers of the frame where the unwinding stopped, as
// the frame pointers found them. Recursion may make it the wrong one of
// several frames of one function, which changes only the depth shown.
func fpAfter(user []uint64, ra uint64) ([]uint64, bool) {
	for i, a := range user {
		if a == ra {
			return user[i+1:], true
		}
	}
	return nil, false
}
