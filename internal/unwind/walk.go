package unwind

import "fmt"

// Stop says why Unwind stopped.
type Stop uint8

const (
	// StopEnd: the outermost frame (its return address undefined in
	// the CFI, as in _start and a thread's start), or a zero return
	// address.
	StopEnd Stop = iota
	// StopNoCode: a frame in no binary (JIT code, anonymous memory):
	// its unwinding rules are unknown.
	StopNoCode
	// StopNoRule: a frame whose binary has no rule for it, and the
	// frame-pointer step did not work either.
	StopNoRule
	// StopStackCopy: a read beyond the stack copy: the stack is deeper
	// than the bytes copied.
	StopStackCopy
	// StopBadStack: the stack pointer did not grow (garbage, or a
	// loop).
	StopBadStack
	// StopMaxFrames: out is full.
	StopMaxFrames
)

var stopNames = [...]string{
	StopEnd:       "end",
	StopNoCode:    "no_code",
	StopNoRule:    "no_rule",
	StopStackCopy: "stack_copy",
	StopBadStack:  "bad_stack",
	StopMaxFrames: "max_frames",
}

// String names the reason in snake case, as metrics label it.
func (s Stop) String() string {
	if int(s) < len(stopNames) {
		return stopNames[s]
	}
	return fmt.Sprintf("Stop(%d)", uint8(s))
}

// Unwind walks the user stack of a sample from its registers and the copy
// of its stack, appending the return address of every frame after the
// innermost to out, up to cap(out), and says why it stopped. Each frame is
// unwound by the rules of the binary its pc is in: its compiled CFI, Go's
// tables for Go code (see goStep), else the frame pointer, as for
// JIT code. It does not allocate.
func (u *Unwinder) Unwind(regs Regs, stack *StackCopy, out []uint64) ([]uint64, Stop) {
	return u.UnwindCached(regs, stack, out, nil)
}

// UnwindCached is Unwind that looks up the rows of native code in c first
// and keeps those it finds there; c may be nil.
func (u *Unwinder) UnwindCached(regs Regs, stack *StackCopy, out []uint64, c *RowCache) ([]uint64, Stop) {
	// exact: regs.IP is the instruction the thread was at (the sample's,
	// or one a signal interrupted), not a return address.
	exact := true
	for {
		if len(out) >= cap(out) {
			return out, StopMaxFrames
		}
		pc, exactPC := regs.IP, exact
		if !exact {
			pc-- // the call, not the instruction after it
		}
		exact = false
		// native: r is the row of native code at pc, from c or from
		// its table (and kept in c). Inline: this loop is the read
		// loop's hottest, and a helper returning the lookup's results
		// made it 1.5 times slower.
		var (
			cfi   *Table
			gotab GoFuncs
			vaddr uint64
			next  Regs
			ok    bool
		)
		r, native := c.get(u.id, pc)
		found := native
		if !native {
			if cfi, gotab, vaddr, found = u.codeAt(pc); found && gotab == nil {
				r, native = cfi.find(vaddr), true
				c.put(u.id, pc, r)
			}
		}
		if gotab != nil {
			var top, goFunc bool
			if next, ok, top, goFunc = goStep(gotab, vaddr, regs, !exactPC, stack); top {
				return out, StopEnd
			}
			if goFunc && !ok {
				cfi = nil // Go code: its frame pointer, or nothing
			}
		}
		if !found {
			// JIT code and the like: V8's and HotSpot's interpreter
			// keep frame pointers, as the kernel's walk assumes.
			if next, ok = framePointerStep(regs, stack); !ok {
				return out, StopNoCode
			}
		} else if !ok {
			if !native {
				r = cfi.find(vaddr)
			}
			switch r.cfa {
			case cfaEnd:
				return out, StopEnd
			case cfaUnknown:
				next, ok = framePointerStep(regs, stack)
				if !ok {
					return out, StopNoRule
				}
			case cfaSignal:
				// The interrupted thread's stack may be elsewhere (an
				// alternate signal stack was in use): no growth asked.
				if next, ok = signalStep(regs, stack); !ok {
					return out, StopStackCopy
				}
				if next.IP == 0 {
					return out, StopEnd
				}
				out = append(out, next.IP)
				regs, exact = next, true
				continue
			default:
				if next, ok = r.step(regs, stack); !ok {
					return out, StopStackCopy
				}
			}
		}
		if next.IP == 0 {
			return out, StopEnd
		}
		if next.SP <= regs.SP {
			return out, StopBadStack
		}
		out = append(out, next.IP)
		regs = next
	}
}

// framePointerStep unwinds one frame by its frame pointer: the caller's
// rbp at [rbp], the return address after it.
func framePointerStep(regs Regs, stack *StackCopy) (Regs, bool) {
	bp, ok1 := stack.read(regs.BP)
	ra, ok2 := stack.read(regs.BP + 8)
	if !ok1 || !ok2 || regs.BP < regs.SP {
		return Regs{}, false
	}
	return Regs{IP: ra, SP: regs.BP + 16, BP: bp}, true
}

// GoFuncs are the Go functions of a binary, as its pcln tables describe
// them (package symbolize reads those tables, which name Go code too).
type GoFuncs interface {
	// Func reports whether pc is in a Go function, and what unwinding
	// its frame needs: with spDelta, the SP delta at pc.
	Func(pc uint64, spDelta bool) (GoFunc, bool)
}

// GoFunc is a Go function at a pc.
type GoFunc struct {
	Top     bool // goexit, mstart: the outermost frame (abi.FuncFlagTopFrame)
	SPWrite bool // switches stacks (abi.FuncFlagSPWrite): its pcsp does not hold
	// SPDelta is what the function has pushed at pc (its pcsp table),
	// -1 when unknown; asked for only, and set only for a function that
	// is neither Top nor SPWrite.
	SPDelta int32
}

// goStep unwinds one frame of Go code at pc by its SP delta: the return
// address at SP+delta; with a frame, the caller's rbp below it (amd64 Go
// pushes rbp first). top reports the outermost frame of a goroutine or
// thread. Go keeps frame pointers: a frame that is not the innermost
// (byFP), and a function that switches stacks (systemstack, morestack,
// mcall), is stepped by its frame pointer, which Go links across its
// stack switches and signal handlers as the kernel's walk finds them;
// the pcsp table is for the innermost frame, which may not have pushed
// its frame pointer yet. goFunc says pc is in a Go function.
func goStep(g GoFuncs, pc uint64, regs Regs, byFP bool, stack *StackCopy) (next Regs, ok, top, goFunc bool) {
	f, ok := g.Func(pc, !byFP)
	if !ok {
		return Regs{}, false, false, false
	}
	switch {
	case f.Top:
		return Regs{}, false, true, true
	case byFP || f.SPWrite:
		next, ok := framePointerStep(regs, stack)
		return next, ok, false, true
	}
	v := f.SPDelta
	if v < 0 {
		return Regs{}, false, false, true
	}
	ra, ok := stack.read(regs.SP + uint64(v))
	if !ok {
		return Regs{}, false, false, true
	}
	next = Regs{IP: ra, SP: regs.SP + uint64(v) + 8, BP: regs.BP}
	if v > 0 {
		if next.BP, ok = stack.read(regs.SP + uint64(v) - 8); !ok {
			return Regs{}, false, false, true
		}
	}
	return next, true, false, true
}
