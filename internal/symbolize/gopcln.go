package symbolize

import (
	"bytes"
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// goTable resolves addresses of a Go binary from its pcln tables
// (runtime/symtab.go), which even binaries stripped with -s -w keep: the
// runtime needs them for tracebacks.
type goTable struct {
	tab *gosym.Table

	// The raw Go 1.20+ tables, for StartLine and inlined calls, which
	// debug/gosym does not expose; functab is nil for older tables.
	bo          binary.ByteOrder
	minLC       uint64 // instruction size quantum of the pc tables
	textStart   uint64
	functab     []byte // nfunc+1 pairs of uint32 {entryoff, funcoff}
	funcdata    []byte // from pclnOffset: functab, then the _func records
	funcnametab []byte
	pctab       []byte
	// gofunc is the go:func.* data that _func.funcdata offsets are from
	// (moduledata.gofunc), nil when it could not be found: then inlined
	// calls are not expanded.
	gofunc []byte
}

// Offsets in runtime._func (runtime/runtime2.go), Go 1.20+.
const (
	funcNpcdataOff   = 28
	funcStartLineOff = 36
	funcNfuncdataOff = 43
	funcHeaderSize   = 44 // then pcdata [npcdata]uint32, funcdata [nfuncdata]uint32

	pcdataInlTreeIndex = 2 // abi.PCDATA_InlTreeIndex
	funcdataInlTree    = 3 // abi.FUNCDATA_InlTree

	inlinedCallSize = 16 // runtime.inlinedCall: funcID uint8, _ [3]byte, nameOff, parentPc, startLine int32

	maxInlineDepth = 64 // guards against a corrupt tree that loops
)

// goPclntabSection returns the section holding the pcln table.
func goPclntabSection(ef *elf.File) *elf.Section {
	if s := ef.Section(".gopclntab"); s != nil {
		return s
	}
	// Externally linked PIE binaries move it into relro.
	return ef.Section(".data.rel.ro.gopclntab")
}

// newGoTable reads the pcln table of ef. syms are the ELF symbols, used to
// find runtime.text.
func newGoTable(ef *elf.File, syms []elf.Symbol) (*goTable, error) {
	sec := goPclntabSection(ef)
	if sec == nil {
		return nil, errors.New("no .gopclntab")
	}
	data, err := sectionData(sec, maxSectionBytes)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", sec.Name, err)
	}
	// Function entries are offsets from runtime.text. Without a symbol table
	// (-s) take the start of .text: the same for internally linked binaries.
	textStart, ok := uint64(0), false
	var gofuncSym *elf.Symbol
	for i, s := range syms {
		switch s.Name {
		case "runtime.text":
			textStart, ok = s.Value, true
		case "go:func.*":
			gofuncSym = &syms[i]
		}
	}
	if !ok {
		text := ef.Section(".text")
		if text == nil {
			return nil, errors.New("no runtime.text and no .text")
		}
		textStart = text.Addr
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, textStart))
	if err != nil {
		return nil, fmt.Errorf("read Go pcln table: %w", err)
	}
	if len(tab.Funcs) == 0 {
		return nil, errors.New("empty or unsupported Go pcln table")
	}
	g := &goTable{tab: tab}
	if g.initFuncData(data, textStart) {
		g.initGofunc(ef, sec, data, gofuncSym)
	}
	return g, nil
}

// initFuncData finds the tables of a Go 1.20+ pcln table, whose header is
// (runtime.pcHeader):
//
//	magic uint32; pad1, pad2, minLC, ptrSize uint8
//	nfunc int; nfiles uint; textStart (unused since Go 1.26), funcnameOffset,
//	cuOffset, filetabOffset, pctabOffset, pclnOffset uintptr
//
// The function table is at pclnOffset: nfunc+1 pairs {entryoff, funcoff
// uint32}; funcoff is from pclnOffset too, to a runtime._func.
func (g *goTable) initFuncData(data []byte, textStart uint64) bool {
	const go120Magic = 0xfffffff1
	if len(data) < 8 {
		return false
	}
	var bo binary.ByteOrder = binary.LittleEndian
	if binary.BigEndian.Uint32(data) == go120Magic {
		bo = binary.BigEndian
	} else if bo.Uint32(data) != go120Magic {
		return false
	}
	minLC, ptrSize := uint64(data[6]), uint64(data[7])
	if (ptrSize != 4 && ptrSize != 8) || minLC == 0 {
		return false
	}
	word := func(i uint64) (uint64, bool) {
		off := 8 + i*ptrSize
		if off+ptrSize > uint64(len(data)) {
			return 0, false
		}
		if ptrSize == 4 {
			return uint64(bo.Uint32(data[off:])), true
		}
		return bo.Uint64(data[off:]), true
	}
	nfunc, ok1 := word(0)
	nameOff, ok2 := word(3)
	pctabOff, ok3 := word(6)
	pclnOff, ok4 := word(7)
	n := uint64(len(data))
	if !ok1 || !ok2 || !ok3 || !ok4 || pclnOff > n || nameOff > n || pctabOff > n {
		return false
	}
	funcdata := data[pclnOff:]
	if nfunc >= uint64(len(funcdata)) || (nfunc+1)*8 > uint64(len(funcdata)) {
		return false
	}
	g.functab = funcdata[:(nfunc+1)*8]
	g.bo, g.minLC, g.textStart, g.funcdata = bo, minLC, textStart, funcdata
	g.funcnametab, g.pctab = data[nameOff:], data[pctabOff:]
	return true
}

// initGofunc finds go:func.*, the base of the funcdata offsets: from the
// symbol when there is one, else from runtime.firstmoduledata, found in the
// data sections as the words {&pcHeader, &funcnametab[0], len, cap}; its
// gofunc field is the lowest word after them that points just past the end
// of the _func records (since Go 1.22 the linker places go:func.* there, in
// .gopclntab, aligned). Field positions in
// moduledata change between releases; this search depends on none of them.
func (g *goTable) initGofunc(ef *elf.File, sec *elf.Section, data []byte, sym *elf.Symbol) {
	setAt := func(addr uint64) {
		if addr >= sec.Addr && addr <= sec.Addr+uint64(len(data)) {
			g.gofunc = data[addr-sec.Addr:]
		}
	}
	if sym != nil {
		setAt(sym.Value)
		return
	}
	ptrSize := uint64(data[7])
	n := uint64(len(g.functab)/8 - 1)
	if n == 0 {
		return
	}
	// The _func records are in function order: the last one ends them.
	last := uint64(g.bo.Uint32(g.functab[8*(n-1)+4:]))
	if last+funcHeaderSize > uint64(len(g.funcdata)) {
		return
	}
	rec := g.funcdata[last:]
	end := uint64(len(data)-len(g.funcdata)) + last + funcHeaderSize +
		4*uint64(g.bo.Uint32(rec[funcNpcdataOff:])) + 4*uint64(rec[funcNfuncdataOff])
	// go:func.* starts at the end of the _func records rounded up to the
	// largest alignment of a funcdata symbol (up to 32 on amd64); other
	// moduledata words (findfunctab, epclntab) point further on.
	const maxPad = 256
	lo, hi := sec.Addr+end, min(sec.Addr+end+maxPad, sec.Addr+uint64(len(data)))

	word := func(b []byte) uint64 {
		if ptrSize == 4 {
			return uint64(g.bo.Uint32(b))
		}
		return g.bo.Uint64(b)
	}
	nameAddr := sec.Addr + uint64(len(data)-len(g.funcnametab))
	const moduledataWords = 64 // gofunc is about the 40th word in Go 1.26
	// Go 1.26 has it in its own section; before, in .noptrdata.
	for _, name := range []string{".go.module", ".noptrdata", ".data.rel.ro", ".data"} {
		s := ef.Section(name)
		if s == nil || s.Type != elf.SHT_PROGBITS {
			continue
		}
		d, err := sectionData(s, 64<<20)
		if err != nil {
			continue
		}
		for off := uint64(0); off+4*ptrSize <= uint64(len(d)); off += ptrSize {
			if word(d[off:]) != sec.Addr || word(d[off+ptrSize:]) != nameAddr {
				continue
			}
			best := hi
			for i := uint64(4); i < moduledataWords && off+(i+1)*ptrSize <= uint64(len(d)); i++ {
				if v := word(d[off+i*ptrSize:]); v >= lo && v < best {
					best = v
				}
			}
			if best < hi {
				setAt(best)
				return
			}
		}
	}
}

// funcAt returns the _func record of the function that holds pc and its
// entry address.
func (g *goTable) funcAt(pc uint64) (rec []byte, entry uint64, ok bool) {
	if g.functab == nil || pc < g.textStart {
		return nil, 0, false
	}
	n := len(g.functab)/8 - 1
	off := pc - g.textStart
	i := sort.Search(n, func(i int) bool { return uint64(g.bo.Uint32(g.functab[8*i:])) > off }) - 1
	if i < 0 || off >= uint64(g.bo.Uint32(g.functab[8*(i+1):])) {
		return nil, 0, false
	}
	fo := uint64(g.bo.Uint32(g.functab[8*i+4:]))
	if fo+funcHeaderSize > uint64(len(g.funcdata)) {
		return nil, 0, false
	}
	return g.funcdata[fo:], g.textStart + uint64(g.bo.Uint32(g.functab[8*i:])), true
}

// startLine returns the line of the func keyword of the function at entry
// (runtime._func.startLine), or 0.
func (g *goTable) startLine(entry uint64) int {
	rec, e, ok := g.funcAt(entry)
	if !ok || e != entry {
		return 0
	}
	return int(int32(g.bo.Uint32(rec[funcStartLineOff:])))
}

// pcvalue returns the value at pc of the pc-value table at pctab[off] of the
// function at entry, or -1. A table is a sequence of pairs (value delta as a
// zig-zag varint, pc delta in units of minLC as a varint), starting from
// value -1 at entry and ending with a zero value delta (runtime.step).
func (g *goTable) pcvalue(off uint32, entry, pc uint64) int32 {
	if off == 0 || uint64(off) >= uint64(len(g.pctab)) {
		return -1
	}
	p := g.pctab[off:]
	val, cur := int64(-1), entry
	for first := true; ; first = false {
		uv, n := binary.Uvarint(p)
		if n <= 0 || (uv == 0 && !first) {
			return -1
		}
		p = p[n:]
		if uv&1 != 0 {
			val += -int64(uv>>1) - 1
		} else {
			val += int64(uv >> 1)
		}
		pcd, n := binary.Uvarint(p)
		if n <= 0 {
			return -1
		}
		p = p[n:]
		cur += pcd * g.minLC
		if pc < cur {
			return int32(val)
		}
	}
}

// funcName returns the name at off in the function name table.
func (g *goTable) funcName(off int32) string {
	if off < 0 || int(off) >= len(g.funcnametab) {
		return ""
	}
	s := g.funcnametab[off:]
	if i := bytes.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	return string(s)
}

// inlineTree returns the inline tree of the _func rec and the offset of its
// inline index table in pctab, or ok false if it has none.
func (g *goTable) inlineTree(rec []byte) (tree []byte, pcdataOff uint32, ok bool) {
	if g.gofunc == nil {
		return nil, 0, false
	}
	npcdata := uint64(g.bo.Uint32(rec[funcNpcdataOff:]))
	nfuncdata := uint64(rec[funcNfuncdataOff])
	if npcdata <= pcdataInlTreeIndex || nfuncdata <= funcdataInlTree {
		return nil, 0, false
	}
	pdo := funcHeaderSize + 4*pcdataInlTreeIndex
	fdo := funcHeaderSize + 4*npcdata + 4*funcdataInlTree
	if fdo+4 > uint64(len(rec)) {
		return nil, 0, false
	}
	pcdataOff = g.bo.Uint32(rec[pdo:])
	fd := g.bo.Uint32(rec[fdo:])
	if pcdataOff == 0 || fd == ^uint32(0) || uint64(fd) >= uint64(len(g.gofunc)) {
		return nil, 0, false
	}
	return g.gofunc[fd:], pcdataOff, true
}

// lookup resolves pc, an ELF virtual address, into its frames, innermost
// first: for a pc in inlined code, the inlined functions with the position
// of pc, then their callers with the position of the call site, ending with
// the function that holds pc in the machine code. It returns nil when pc is
// in no Go function.
func (g *goTable) lookup(pc uint64) []Frame {
	file, line, fn := g.tab.PCToLine(pc)
	if fn == nil {
		return nil
	}
	outer := Frame{Function: fn.Name, SystemName: fn.Name, File: file, Line: line}
	rec, entry, ok := g.funcAt(pc)
	if !ok {
		return []Frame{outer}
	}
	outer.StartLine = int(int32(g.bo.Uint32(rec[funcStartLineOff:])))
	tree, pcdataOff, ok := g.inlineTree(rec)
	if !ok {
		return []Frame{outer}
	}
	var frames []Frame
	cur := pc
	for depth := 0; depth < maxInlineDepth; depth++ {
		idx := g.pcvalue(pcdataOff, entry, cur)
		if idx < 0 || uint64(idx+1)*inlinedCallSize > uint64(len(tree)) {
			break
		}
		call := tree[uint64(idx)*inlinedCallSize:]
		name := g.funcName(int32(g.bo.Uint32(call[4:])))
		parent := int32(g.bo.Uint32(call[8:]))
		if name == "" || parent < 0 {
			break // a corrupt entry: report what was found
		}
		f := Frame{Function: name, SystemName: name, StartLine: int(int32(g.bo.Uint32(call[12:])))}
		f.File, f.Line, _ = g.tab.PCToLine(cur)
		frames = append(frames, f)
		cur = entry + uint64(parent)
	}
	if len(frames) == 0 {
		return []Frame{outer}
	}
	outer.File, outer.Line, _ = g.tab.PCToLine(cur)
	return append(frames, outer)
}
