package unwind

import (
	"fmt"

	"github.com/perfprof/perfprof/internal/perf"
)

// Mode says how the user part of on-CPU stacks is found.
type Mode uint8

const (
	// FramePointer keeps the kernel's frame-pointer callchains: the
	// cheapest samples, whole for code built with frame pointers (Go, and
	// C, C++ and Rust built with -fno-omit-frame-pointer), cut short in
	// code built without them.
	FramePointer Mode = iota
	// Auto copies the top of the user stack with each sample (see
	// DefaultStackBytes) and unwinds it on the read loop by what each
	// frame's code needs: its binary's compiled .eh_frame, Go's pcsp
	// tables, the frame pointer for JIT code. Where the copy ends before
	// the stack does, or the stack switches (Go's system stack), the
	// kernel's frame-pointer chain carries on from the last frame both
	// found. Samples taken before the process's tables are read wait for
	// them (see Walker.Sample).
	Auto
	// DWARF unwinds as Auto does but never takes frames from the
	// kernel's chain: a stack deeper than the copy ends there, counted,
	// as in perf's dwarf mode.
	DWARF
)

// String returns the mode as the receiver's configuration spells it.
func (m Mode) String() string {
	switch m {
	case Auto:
		return "auto"
	case DWARF:
		return "dwarf"
	default:
		return "frame_pointer"
	}
}

// ParseMode reads "auto", "frame_pointer" or "dwarf".
func ParseMode(s string) (Mode, error) {
	for _, m := range []Mode{Auto, FramePointer, DWARF} {
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
	DefaultStackBytes = 16 << 10
	// MaxStackBytes is the kernel's bound (a sample's size is 16 bits,
	// and the stack shares it with the rest of the sample).
	MaxStackBytes = 60 << 10
	// maxFrames bounds the frames of a user stack, as the kernel's
	// perf_event_max_stack (127) bounds its chains.
	maxFrames = 127
)

// Stats count what became of the user stacks of on-CPU samples when
// they are unwound from copies (Auto, DWARF).
type Stats struct {
	Mode Mode
	// Unwound: samples whose stack was unwound from its copy, on the read
	// loop or, for those taken before their process's unwind tables were
	// read, once they were (PendingUnwound); of them, Complete reached the
	// outermost frame, Spliced went on with the kernel's frame-pointer
	// chain, and Stopped (by why: see Stop) ended early.
	Unwound, Complete, Spliced int64
	Stopped                    [StopMaxFrames + 1]int64
	// Pending: samples taken before their process's unwind tables were
	// read (at attach, or after an exec), which wait for them in a queue
	// with copies of their stacks (the profiler's
	// Options.MaxPendingUnwindBytes). Of them, PendingUnwound were unwound
	// once the tables were read, before their report (they count in
	// Unwound too); PendingOverflow found the queue full, and
	// PendingUnread were reported before their tables could be read (the
	// process exited or exec'd first, or its memory map is unreadable):
	// both keep the kernel's chain. The others wait in the queue now.
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

// A Walker finds the whole user stacks of the samples of one read loop:
// it unwinds their stack copies (Auto, DWARF), splices the kernel's chain
// on where the copy ends (Auto), and picks the word that may be a
// frameless leaf's caller; it counts what it did in Stats. Its scratch
// and row cache make it not safe for concurrent use.
type Walker struct {
	mode        Mode
	recoverLeaf bool
	stats       *Stats
	// frames and chain are scratch for Unwind; rows caches the
	// unwinding rules of recent pcs.
	frames, chain []uint64
	rows          RowCache
}

// NewWalker returns a Walker for mode, which with recoverLeaf gives the
// leaf caller candidates of the samples it leaves to the kernel's chain,
// and counts in stats.
func NewWalker(mode Mode, recoverLeaf bool, stats *Stats) *Walker {
	return &Walker{mode: mode, recoverLeaf: recoverLeaf, stats: stats}
}

// Sample returns the user stack of the on-CPU sample s, with u the
// unwinder of its process (nil before its tables are read). Called on the
// read loop, once per sample.
//
// chain is the callchain: the kernel part of the sample's, then the user
// part found; it is the sample's own, or w's scratch, valid until the next
// call. leaf is the word at SP when the leaf may not have pushed its
// frame: its caller, if the binary's tables say so at symbolization
// (InsertLeafCaller); 0 when there is none. wait says the stack was to be
// unwound but the process's tables are not read yet (u was nil): chain is
// the kernel's until the caller unwinds the sample's copy with Unwind,
// once they are.
//
// (Three results, not a struct: a struct returned by this function went
// through the stack and cost the read loop a third more per sample.)
func (w *Walker) Sample(u *Unwinder, s *perf.SampleRecord) (chain []uint64, leaf uint64, wait bool) {
	if w.mode == FramePointer {
		if w.recoverLeaf {
			leaf = leafCandidate(s)
		}
		return s.Callchain, leaf, false
	}
	ip, ok1 := s.UserIP()
	sp, ok2 := s.UserSP()
	bp, _ := s.UserBP()
	if !ok1 || !ok2 || len(s.StackUser) == 0 {
		w.stats.NoUserStack++
		return s.Callchain, 0, false
	}
	if u == nil {
		w.stats.Pending++
		if w.recoverLeaf {
			leaf = leafCandidate(s)
		}
		return s.Callchain, leaf, true
	}
	chain, leaf = w.Unwind(u, s.Callchain, Regs{IP: ip, SP: sp, BP: bp}, s.StackUser)
	return chain, leaf, false
}

// Unwind unwinds a user stack from its registers and copy with u, and
// returns the callchain, built in w's scratch (valid until the next
// call): the kernel part of raw (the kernel's callchain of the sample),
// then the user part unwound, carried on by raw's user part where Auto
// allows; and the leaf caller candidate. It counts the outcome. Sample
// calls it; so does the caller for a sample that waited.
func (w *Walker) Unwind(u *Unwinder, raw []uint64, regs Regs, stack []byte) ([]uint64, uint64) {
	c := w.stats
	c.Unwound++
	if cap(w.frames) < maxFrames {
		w.frames = make([]uint64, 0, maxFrames)
	}
	frames, stop := u.UnwindCached(regs, &StackCopy{SP: regs.SP, Data: stack}, w.frames[:0], &w.rows)

	// The kernel part, then the user part: the sampled pc and the return
	// addresses unwound.
	kernel, user := splitChain(raw)
	chain := append(w.chain[:0], kernel...)
	chain = append(chain, perf.ContextUser, regs.IP)
	chain = append(chain, frames...)
	switch {
	case stop == StopEnd:
		c.Complete++
	case w.mode == Auto && spliceable(stop):
		last := regs.IP
		if len(frames) > 0 {
			last = frames[len(frames)-1]
		}
		if rest, ok := fpAfter(user, last); ok && len(rest) > 0 {
			n := min(len(rest), maxFrames-len(frames))
			chain = append(chain, rest[:n]...)
			c.Spliced++
			break
		}
		c.Stopped[stop]++
	default:
		c.Stopped[stop]++
	}
	w.chain = chain
	// A leaf without a rule was stepped by its frame pointer, which
	// skips its caller if it has not pushed one (V8's bytecode handlers):
	// symbolization tells, as for the kernel's chains.
	var leaf uint64
	if w.recoverLeaf && len(stack) >= 8 && !u.Covered(regs.IP, &w.rows) {
		leaf = ne.Uint64(stack)
	}
	return chain, leaf
}

// spliceable says whether the kernel's chain may carry on where the
// unwinding stopped: the copy ended, or the code had no rule and its frame
// pointer did not step. A stack that did not grow is garbage either way.
func spliceable(stop Stop) bool {
	switch stop {
	case StopStackCopy, StopNoCode, StopNoRule:
		return true
	}
	return false
}
