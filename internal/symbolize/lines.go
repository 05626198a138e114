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
// merged and sorted by address. Functions and inlined calls live in
// .debug_info: see funcTable.
type lineTable struct {
	rows  []lineRow
	files []string
}

// newDWARFTables reads .debug_line and .debug_info of every compilation unit
// of d: the line table, and the functions with the calls inlined into them.
// Code outside the executable PT_LOAD segments (functions dropped by the
// linker, left at address 0) is skipped. Either table may be nil.
func newDWARFTables(d *dwarf.Data, loads []elf.ProgHeader) (*lineTable, *funcTable, error) {
	inText := func(addr uint64) bool {
		for _, p := range loads {
			if p.Flags&elf.PF_X != 0 && p.Vaddr <= addr && addr < p.Vaddr+p.Memsz {
				return true
			}
		}
		return false
	}

	t := &lineTable{}
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
	fb := newFuncBuilder(d, inText)

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
		if e.Tag != dwarf.TagCompileUnit && e.Tag != dwarf.TagPartialUnit {
			r.SkipChildren()
			continue
		}
		files, err := t.addUnit(d, e, intern, inText)
		if err != nil {
			errs = append(errs, err)
		}
		if !e.Children {
			continue
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		if err := fb.unit(r, files, intern(&dwarf.LineFile{Name: name})); err != nil {
			errs = append(errs, fmt.Errorf("functions of unit at offset %#x: %w", e.Offset, err))
			r.Seek(e.Offset) // and on to the next unit
			r.Next()
			r.SkipChildren()
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
	ft := fb.finish()
	if ft != nil {
		ft.files = t.files
	}
	if len(t.rows) == 0 {
		t = nil
	}
	if t == nil && ft == nil {
		return nil, nil, errors.Join(append(errs, errors.New("no line rows and no functions"))...)
	}
	return t, ft, nil
}

// addUnit appends the rows of the line table of compilation unit cu, and
// returns the unit's file table as indexes in t.files.
func (t *lineTable) addUnit(d *dwarf.Data, cu *dwarf.Entry, intern func(*dwarf.LineFile) uint32, inText func(uint64) bool) ([]uint32, error) {
	lr, err := d.LineReader(cu)
	if err != nil {
		return nil, fmt.Errorf("line table of unit at offset %#x: %w", cu.Offset, err)
	}
	if lr == nil {
		return nil, nil
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
			if err != io.EOF {
				err = fmt.Errorf("line table of unit at offset %#x: %w", cu.Offset, err)
			} else {
				err = nil
			}
			// The file table is complete only at the end (DWARF < 5 can
			// define files in the line program).
			fs := lr.Files()
			files := make([]uint32, len(fs))
			for i, f := range fs {
				files[i] = noFile
				if f != nil {
					files[i] = intern(f)
				}
			}
			return files, err
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
