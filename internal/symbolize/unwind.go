package symbolize

import (
	"fmt"
	"strings"
)

// funcPCSPOff is the offset of pcsp in runtime._func (Go 1.20+): entryOff,
// nameOff, args, deferreturn, then pcsp.
const funcPCSPOff = 16

// ReturnAddressAtSP reports whether, with pc the address of the innermost
// frame of a stack, the return address is the word at the stack pointer:
// the function has not pushed anything yet (its first instruction, a leaf
// without a frame) or has popped it all (before its ret). known is false
// when the binary's tables do not cover pc. Go code answers from the pcln
// SP-delta table (delta 0); other code from its compiled .eh_frame (CFA =
// rsp+8), which is read only with Options.UnwindTables. The tables are
// read once per binary, a native binary's without its symbols.
func (p *Process) ReturnAddressAtSP(pc uint64) (yes, known bool) {
	b, vaddr := p.tables(pc)
	if b == nil {
		return false, false
	}
	if b.gotab != nil {
		if yes, known := b.gotab.spDeltaZero(vaddr); known {
			return yes, true
		}
	}
	return b.unwind.atSP(vaddr)
}

// tables returns the parsed binary that pc is in, and pc's address in it;
// nil when pc is in no binary (anonymous or JIT code) or its binary does
// not parse.
func (p *Process) tables(pc uint64) (*objfile, uint64) {
	ms := p.find(pc)
	if ms == nil || !ms.ok {
		return nil, 0
	}
	b := ms.bin
	if b.evicted {
		p.bind(ms)
		if !ms.ok {
			return nil, 0
		}
		b = ms.bin
	}
	if !b.parsed && !b.unwindRead {
		if p.c.unwind {
			// Native code answers from its unwind tables, read
			// without its symbols: the parse waits for the lookups
			// of the report, and decodes their DWARF units on its
			// way (Process.Prepare). Go code is parsed.
			b.loadUnwind(p.c)
		} else {
			b.parse(nil, p.c)
		}
	}
	if b.parseErr != nil {
		return nil, 0
	}
	p.c.touch(b)
	return b, pc + ms.delta
}

// UnwindStop says why Unwind stopped.
type UnwindStop uint8

const (
	// UnwindEnd: the outermost frame (its return address undefined in
	// the CFI, as in _start and a thread's start), or a zero return
	// address.
	UnwindEnd UnwindStop = iota
	// UnwindNoCode: a frame in no binary (JIT code, anonymous memory):
	// its unwinding rules are unknown.
	UnwindNoCode
	// UnwindNoRule: a frame whose binary has no rule for it, and the
	// frame-pointer step did not work either.
	UnwindNoRule
	// UnwindStackCopy: a read beyond the stack copy: the stack is deeper
	// than the bytes copied.
	UnwindStackCopy
	// UnwindBadStack: the stack pointer did not grow (garbage, or a
	// loop).
	UnwindBadStack
	// UnwindMaxFrames: out is full.
	UnwindMaxFrames
)

var unwindStopNames = [...]string{
	UnwindEnd:       "end",
	UnwindNoCode:    "no_code",
	UnwindNoRule:    "no_rule",
	UnwindStackCopy: "stack_copy",
	UnwindBadStack:  "bad_stack",
	UnwindMaxFrames: "max_frames",
}

// String names the reason in snake case, as metrics label it.
func (s UnwindStop) String() string {
	if int(s) < len(unwindStopNames) {
		return unwindStopNames[s]
	}
	return fmt.Sprintf("UnwindStop(%d)", uint8(s))
}

// Unwind walks the user stack of a sample from its registers and the copy
// of its stack, appending the return address of every frame after the
// innermost to out, up to cap(out), and says why it stopped. Each frame is
// unwound by the rules of the binary its pc is in: its compiled CFI, Go's
// tables for Go code (see goTable.step), else the frame pointer, as for
// JIT code. It does not allocate.
func (u *Unwinder) Unwind(regs Regs, stack *StackCopy, out []uint64) ([]uint64, UnwindStop) {
	return u.UnwindCached(regs, stack, out, nil)
}

// UnwindCached is Unwind that looks up the rows of native code in c first
// and keeps those it finds there; c may be nil.
func (u *Unwinder) UnwindCached(regs Regs, stack *StackCopy, out []uint64, c *RowCache) ([]uint64, UnwindStop) {
	// exact: regs.IP is the instruction the thread was at (the sample's,
	// or one a signal interrupted), not a return address.
	exact := true
	for {
		if len(out) >= cap(out) {
			return out, UnwindMaxFrames
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
			cfi   *unwindTable
			gotab *goTable
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
			if next, ok, top, goFunc = gotab.step(vaddr, regs, !exactPC, stack); top {
				return out, UnwindEnd
			}
			if goFunc && !ok {
				cfi = nil // Go code: its frame pointer, or nothing
			}
		}
		if !found {
			// JIT code and the like: V8's and HotSpot's interpreter
			// keep frame pointers, as the kernel's walk assumes.
			if next, ok = framePointerStep(regs, stack); !ok {
				return out, UnwindNoCode
			}
		} else if !ok {
			if !native {
				r = cfi.find(vaddr)
			}
			switch r.cfa {
			case cfaEnd:
				return out, UnwindEnd
			case cfaUnknown:
				next, ok = framePointerStep(regs, stack)
				if !ok {
					return out, UnwindNoRule
				}
			case cfaSignal:
				// The interrupted thread's stack may be elsewhere (an
				// alternate signal stack was in use): no growth asked.
				if next, ok = signalStep(regs, stack); !ok {
					return out, UnwindStackCopy
				}
				if next.IP == 0 {
					return out, UnwindEnd
				}
				out = append(out, next.IP)
				regs, exact = next, true
				continue
			default:
				if next, ok = r.step(regs, stack); !ok {
					return out, UnwindStackCopy
				}
			}
		}
		if next.IP == 0 {
			return out, UnwindEnd
		}
		if next.SP <= regs.SP {
			return out, UnwindBadStack
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

// Flags of runtime._func (abi.FuncFlag), at funcFlagOff.
const (
	funcFlagOff      = 41
	funcFlagTopFrame = 1 << 0 // goexit, mstart: the outermost frame
	funcFlagSPWrite  = 1 << 1 // switches stacks: pcsp does not hold
)

// step unwinds one frame of Go code at pc by its SP delta: the return
// address at SP+delta; with a frame, the caller's rbp below it (amd64 Go
// pushes rbp first). top reports the outermost frame of a goroutine or
// thread. Go keeps frame pointers: a frame that is not the innermost
// (byFP), and a function that switches stacks (systemstack, morestack,
// mcall), is stepped by its frame pointer, which Go links across its
// stack switches and signal handlers as the kernel's walk finds them;
// the pcsp table is for the innermost frame, which may not have pushed
// its frame pointer yet. goFunc says pc is in a Go function.
func (g *goTable) step(pc uint64, regs Regs, byFP bool, stack *StackCopy) (next Regs, ok, top, goFunc bool) {
	rec, entry, ok := g.funcAt(pc)
	if !ok {
		return Regs{}, false, false, false
	}
	switch flag := rec[funcFlagOff]; {
	case flag&funcFlagTopFrame != 0:
		return Regs{}, false, true, true
	case byFP || flag&funcFlagSPWrite != 0:
		next, ok := framePointerStep(regs, stack)
		return next, ok, false, true
	}
	v := g.pcvalue(g.bo.Uint32(rec[funcPCSPOff:]), entry, pc)
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

// spDeltaZero reports whether the SP delta of the pcsp table is 0 at pc,
// and whether pc is in a Go function with such a table.
func (g *goTable) spDeltaZero(pc uint64) (yes, known bool) {
	rec, entry, ok := g.funcAt(pc)
	if !ok {
		return false, false
	}
	off := g.bo.Uint32(rec[funcPCSPOff:])
	v := g.pcvalue(off, entry, pc)
	if v < 0 {
		return false, false
	}
	return v == 0, true
}

// LeafCallerAtSP reports whether word, the word at the stack pointer of a
// sample whose leaf is at pc, is the leaf's return address: when the
// unwind tables say the leaf has not pushed a frame (ReturnAddressAtSP),
// or, where they do not cover pc, when the leaf is a frameless V8 bytecode
// handler and word returns into interpreter code that the perf map (at
// generation gen) names.
func (p *Process) LeafCallerAtSP(pc, word uint64, gen Gen) bool {
	if yes, known := p.ReturnAddressAtSP(pc); known {
		return yes
	}
	return p.interpretedCaller(pc, word, gen)
}

// interpretedCaller reports whether leaf is a V8 bytecode handler called
// by the interpreter frame of a JS function at ret, the word at SP: the
// handlers run without a frame of their own and V8's builtins have no
// unwind tables, so the frame-pointer walk skips the frame that names the
// interpreted function (JS:~f, with --interpreted-frames-native-stack),
// whose return address is then at SP.
func (p *Process) interpretedCaller(leaf, ret uint64, gen Gen) bool {
	l := p.Lookup(leaf)
	if len(l.Frames) == 0 || l.JIT != NotJIT {
		return false
	}
	if fn := l.Frames[0].Function; !strings.HasPrefix(fn, "Builtins_") || !strings.HasSuffix(fn, "Handler") {
		return false
	}
	c := p.LookupAt(ret-1, gen)
	if c.JIT == NotJIT || len(c.Frames) == 0 {
		return false
	}
	// JS:~f, Eval:~ and the like: code that runs in the interpreter.
	kind, rest, ok := strings.Cut(c.Frames[0].Function, ":")
	return ok && len(kind) <= 8 && strings.HasPrefix(rest, "~")
}
