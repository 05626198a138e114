package symbolize

// funcPCSPOff is the offset of pcsp in runtime._func (Go 1.20+): entryOff,
// nameOff, args, deferreturn, then pcsp.
const funcPCSPOff = 16

// ReturnAddressAtSP reports whether, with pc the address of the innermost
// frame of a stack, the return address is the word at the stack pointer:
// the function has not pushed anything yet (its first instruction, a leaf
// without a frame) or has popped it all (before its ret). known is false
// when the binary's tables do not cover pc. Go code answers from the pcln
// SP-delta table (delta 0); other code from the CFA rules of .eh_frame
// (CFA = rsp+8), which are read only with Options.UnwindTables. The tables
// are read once per binary, with its symbols.
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
	return b.cfa.lookup(vaddr)
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
