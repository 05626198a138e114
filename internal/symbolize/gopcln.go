package symbolize

import (
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

	// For StartLine, which debug/gosym does not expose: the function table
	// and _func records of a Go 1.20+ table, else nil.
	bo        binary.ByteOrder
	textStart uint64
	functab   []byte // nfunc+1 pairs of uint32 {entryoff, funcoff}
	funcdata  []byte
}

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
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", sec.Name, err)
	}
	// Function entries are offsets from runtime.text. Without a symbol table
	// (-s) take the start of .text: the same for internally linked binaries.
	textStart, ok := uint64(0), false
	for _, s := range syms {
		if s.Name == "runtime.text" {
			textStart, ok = s.Value, true
			break
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
	g.initFuncData(data, textStart)
	return g, nil
}

// initFuncData finds the function table of a Go 1.20+ pcln table, whose
// header is (runtime.pcHeader):
//
//	magic uint32; pad1, pad2, minLC, ptrSize uint8
//	nfunc int; nfiles uint; textStart, funcnameOffset, cuOffset,
//	filetabOffset, pctabOffset, pclnOffset uintptr
//
// The function table is at pclnOffset: nfunc+1 pairs {entryoff, funcoff
// uint32}; funcoff is from pclnOffset too, to a runtime._func.
func (g *goTable) initFuncData(data []byte, textStart uint64) {
	const go120Magic = 0xfffffff1
	if len(data) < 8 {
		return
	}
	var bo binary.ByteOrder = binary.LittleEndian
	if binary.BigEndian.Uint32(data) == go120Magic {
		bo = binary.BigEndian
	} else if bo.Uint32(data) != go120Magic {
		return
	}
	ptrSize := uint64(data[7])
	if ptrSize != 4 && ptrSize != 8 {
		return
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
	pclnOff, ok2 := word(7)
	if !ok1 || !ok2 || pclnOff > uint64(len(data)) {
		return
	}
	funcdata := data[pclnOff:]
	if nfunc >= uint64(len(funcdata)) || (nfunc+1)*8 > uint64(len(funcdata)) {
		return
	}
	g.functab = funcdata[:(nfunc+1)*8]
	g.bo, g.textStart, g.funcdata = bo, textStart, funcdata
}

// startLine returns the line of the func keyword of the function at entry
// (runtime._func.startLine), or 0.
func (g *goTable) startLine(entry uint64) int {
	const startLineOff = 36 // offset of startLine in runtime._func
	if g.functab == nil || entry < g.textStart {
		return 0
	}
	n := len(g.functab)/8 - 1
	off := entry - g.textStart
	i := sort.Search(n, func(i int) bool { return uint64(g.bo.Uint32(g.functab[8*i:])) >= off })
	if i >= n || uint64(g.bo.Uint32(g.functab[8*i:])) != off {
		return 0
	}
	fo := uint64(g.bo.Uint32(g.functab[8*i+4:])) + startLineOff
	if fo+4 > uint64(len(g.funcdata)) {
		return 0
	}
	return int(int32(g.bo.Uint32(g.funcdata[fo:])))
}

// lookup resolves pc, an ELF virtual address.
func (g *goTable) lookup(pc uint64) (Frame, bool) {
	file, line, fn := g.tab.PCToLine(pc)
	if fn == nil {
		return Frame{}, false
	}
	return Frame{
		Function:   fn.Name,
		SystemName: fn.Name,
		File:       file,
		Line:       line,
		StartLine:  g.startLine(fn.Entry),
	}, true
}
