package symbolize

import "strings"

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
// read once per binary, with its symbols.
func (p *Process) ReturnAddressAtSP(pc uint64) (yes, known bool) {
	ms := p.find(pc)
	if ms == nil || !ms.ok {
		return false, false
	}
	b := ms.bin
	if b.evicted {
		p.bind(ms)
		if !ms.ok {
			return false, false
		}
		b = ms.bin
	}
	if !b.parsed {
		b.parse(p.c)
	}
	if b.parseErr != nil {
		return false, false
	}
	p.c.touch(b)
	vaddr := pc + ms.delta
	if b.gotab != nil {
		if yes, known := b.gotab.spDeltaZero(vaddr); known {
			return yes, true
		}
	}
	return b.unwind.atSP(vaddr)
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
