package symbolize

import (
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
)

// lineRow is one row of the merged DWARF line tables: from addr up to the
// next row, code comes from files[file]:line. A row with file endOfSequence
// ends a sequence: no line information up to the next row.
type lineRow struct {
	addr uint64
	file uint32
	line uint32
}

const endOfSequence = ^uint32(0)

// lineTable is the DWARF line tables of all compilation units of a binary,
// merged and sorted by address, plus the declaration lines of functions.
//
// Inlined calls live in .debug_info (DW_TAG_inlined_subroutine), not here; a
// later cut can add a range tree for them next to this table and return more
// frames from binary.resolve.
type lineTable struct {
	rows      []lineRow
	files     []string
	declLines map[uint64]int // function entry (DW_AT_low_pc) → DW_AT_decl_line
}

// newLineTable reads .debug_line of every compilation unit of ef, and the
// declaration lines of functions from .debug_info. Sequences that start
// outside the executable PT_LOAD segments (functions dropped by the linker,
// left at address 0) are skipped.
func newLineTable(ef *elf.File, loads []elf.ProgHeader) (*lineTable, error) {
	d, err := ef.DWARF()
	if err != nil {
		return nil, fmt.Errorf("read DWARF: %w", err)
	}
	inText := func(addr uint64) bool {
		for _, p := range loads {
			if p.Flags&elf.PF_X != 0 && p.Vaddr <= addr && addr < p.Vaddr+p.Memsz {
				return true
			}
		}
		return false
	}

	t := &lineTable{declLines: make(map[uint64]int)}
	fileIndex := make(map[string]uint32)
	intern := func(f *dwarf.LineFile) uint32 {
		name := ""
		if f != nil {
			name = f.Name
		}
		i, ok := fileIndex[name]
		if !ok {
			i = uint32(len(t.files))
			t.files = append(t.files, name)
			fileIndex[name] = i
		}
		return i
	}

	r := d.Reader()
	var errs []error
	for {
		e, err := r.Next()
		if err != nil {
			errs = append(errs, err)
			break
		}
		if e == nil {
			break
		}
		switch e.Tag {
		case dwarf.TagCompileUnit, dwarf.TagPartialUnit:
			if err := t.addUnit(d, e, intern, inText); err != nil {
				errs = append(errs, err)
			}
		case dwarf.TagSubprogram:
			t.addDeclLine(d, e)
			// Locals and lexical blocks are of no use here; nested functions
			// are rare enough to give up.
			r.SkipChildren()
		case dwarf.TagNamespace, dwarf.TagClassType, dwarf.TagStructType, dwarf.TagModule:
			// Descend: C++ and Rust define functions inside these.
		default:
			if e.Children {
				r.SkipChildren()
			}
		}
	}

	// Stable, and end-of-sequence rows first among equal addresses: a
	// sequence that starts where another ends must win.
	slices.SortStableFunc(t.rows, func(a, b lineRow) int {
		switch {
		case a.addr < b.addr:
			return -1
		case a.addr > b.addr:
			return 1
		case a.file == endOfSequence && b.file != endOfSequence:
			return -1
		case a.file != endOfSequence && b.file == endOfSequence:
			return 1
		}
		return 0
	})
	if len(t.rows) == 0 {
		return nil, errors.Join(append(errs, errors.New("no line rows"))...)
	}
	return t, nil
}

// addUnit appends the rows of the line table of compilation unit cu.
func (t *lineTable) addUnit(d *dwarf.Data, cu *dwarf.Entry, intern func(*dwarf.LineFile) uint32, inText func(uint64) bool) error {
	lr, err := d.LineReader(cu)
	if err != nil {
		return fmt.Errorf("line table of unit at offset %#x: %w", cu.Offset, err)
	}
	if lr == nil {
		return nil
	}
	var (
		e        dwarf.LineEntry
		inSeq    bool // at least one row of the current sequence read
		skipSeq  bool
		lastFile *dwarf.LineFile
		lastIdx  uint32
	)
	for {
		if err := lr.Next(&e); err != nil {
			if err == io.EOF {
				return nil
			}
			return fmt.Errorf("line table of unit at offset %#x: %w", cu.Offset, err)
		}
		if !inSeq {
			inSeq = true
			skipSeq = !inText(e.Address)
		}
		if e.EndSequence {
			if !skipSeq {
				t.rows = append(t.rows, lineRow{addr: e.Address, file: endOfSequence})
			}
			inSeq = false
			continue
		}
		if skipSeq {
			continue
		}
		if e.File != lastFile || lastFile == nil {
			lastFile, lastIdx = e.File, intern(e.File)
		}
		t.rows = append(t.rows, lineRow{addr: e.Address, file: lastIdx, line: uint32(max(e.Line, 0))})
	}
}

// addDeclLine records the declaration line of subprogram e, following
// DW_AT_specification or DW_AT_abstract_origin once when e has none itself.
func (t *lineTable) addDeclLine(d *dwarf.Data, e *dwarf.Entry) {
	low, ok := e.Val(dwarf.AttrLowpc).(uint64)
	if !ok {
		return
	}
	line, ok := e.Val(dwarf.AttrDeclLine).(int64)
	if !ok {
		for _, a := range []dwarf.Attr{dwarf.AttrSpecification, dwarf.AttrAbstractOrigin} {
			off, isOff := e.Val(a).(dwarf.Offset)
			if !isOff {
				continue
			}
			r := d.Reader()
			r.Seek(off)
			if o, err := r.Next(); err == nil && o != nil {
				line, ok = o.Val(dwarf.AttrDeclLine).(int64)
			}
			if ok {
				break
			}
		}
	}
	if ok && line > 0 {
		t.declLines[low] = int(line)
	}
}

// lookup returns the file and line of addr, or "", 0.
func (t *lineTable) lookup(addr uint64) (string, int) {
	i := sort.Search(len(t.rows), func(i int) bool { return t.rows[i].addr > addr }) - 1
	if i < 0 {
		return "", 0
	}
	r := t.rows[i]
	if r.file == endOfSequence {
		return "", 0
	}
	return t.files[r.file], int(r.line)
}

// startLine returns the declaration line of the function that starts at
// entry, or 0.
func (t *lineTable) startLine(entry uint64) int {
	return t.declLines[entry]
}
