package symbolize

import (
	"debug/elf"
	"fmt"
	"strings"

	"github.com/perfprof/perfprof/internal/unwind"
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
	return b.unwind.AtSP(vaddr)
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

// Func says what unwinding needs of the Go function at pc: its flags
// and, with spDelta, its SP delta there (unwind.GoFuncs).
func (g *goTable) Func(pc uint64, spDelta bool) (unwind.GoFunc, bool) {
	rec, entry, ok := g.funcAt(pc)
	if !ok {
		return unwind.GoFunc{}, false
	}
	flag := rec[funcFlagOff]
	f := unwind.GoFunc{Top: flag&funcFlagTopFrame != 0, SPWrite: flag&funcFlagSPWrite != 0}
	if spDelta && !f.Top && !f.SPWrite {
		f.SPDelta = g.pcvalue(g.bo.Uint32(rec[funcPCSPOff:]), entry, pc)
	}
	return f, true
}

// Flags of runtime._func (abi.FuncFlag), at funcFlagOff.
const (
	funcFlagOff      = 41
	funcFlagTopFrame = 1 << 0 // goexit, mstart: the outermost frame
	funcFlagSPWrite  = 1 << 1 // switches stacks: pcsp does not hold
)

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

// Unwinder loads the unwind tables of every binary p maps executable
// (their .eh_frame, or pcln tables for Go; not their symbols) and returns
// an Unwinder over them. The tables count in the cache's memory bound with
// the binaries; an Unwinder keeps them alive after an eviction until it is
// dropped. It needs Options.UnwindTables.
func (p *Process) Unwinder() *unwind.Unwinder {
	maps := make([]unwind.Mapping, 0, len(p.maps))
	for _, ms := range p.maps {
		if ms.bin != nil && ms.bin.evicted {
			p.bind(ms)
		}
		um := unwind.Mapping{Start: ms.m.Start, Limit: ms.m.Limit}
		if ms.ok {
			b := ms.bin
			b.loadUnwind(p.c)
			p.c.touch(b)
			// A binary without symbols (parseErr) may still have
			// its .eh_frame.
			um.Delta, um.Binary = ms.delta, true
			um.CFI = b.unwind
			if b.gotab != nil { // a nil *goTable is not a nil GoFuncs
				um.Go = b.gotab
			}
		}
		maps = append(maps, um)
	}
	p.c.trimBytes()
	return unwind.NewUnwinder(maps)
}

// newUnwindTable compiles the CFI of ef for unwinding, or returns nil when
// it has none (or is not x86-64). Its sections are read here, where the
// binary's other sections are, within the same bounds.
func newUnwindTable(ef *elf.File) (*unwind.Table, error) {
	if ef.Machine != elf.EM_X86_64 {
		return nil, nil
	}
	// Go code unwinds by its pcln tables: the .debug_frame of a Go
	// binary is only kept out of the way. Its .eh_frame is cgo's.
	names := []string{".eh_frame", ".debug_frame"}
	if isGo(ef) {
		names = names[:1]
	}
	var secs []unwind.Section
	for _, name := range names {
		sec := ef.Section(name)
		if sec == nil || sec.Type == elf.SHT_NOBITS {
			continue
		}
		data, err := sectionData(sec, maxSectionBytes) // .debug_frame may be compressed
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		secs = append(secs, unwind.Section{Data: data, Addr: sec.Addr, DebugFrame: name == ".debug_frame"})
	}
	if len(secs) == 0 {
		return nil, nil
	}
	return unwind.Compile(secs, ef.ByteOrder)
}
