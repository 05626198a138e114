package symbolize

import (
	"debug/dwarf"
	"fmt"
	"io"
	"slices"
	"sort"
)

// lineRow is one row of a DWARF line table: from addr up to the
// next row, code comes from files[file]:line. A row with file endOfSequence
// ends a sequence: no line information up to the next row.
type lineRow struct {
	addr uint64
	file uint32
	line uint32
}

const endOfSequence = ^uint32(0)

// lineTable is the DWARF line table of one compilation unit, sorted by
// address. Functions and inlined calls live in .debug_info: see funcTable.
type lineTable struct {
	rows  []lineRow
	files []string
}

// sort orders the rows by address, stably, and end-of-sequence rows first
// among equal addresses: a sequence that starts where another ends must
// win.
func (t *lineTable) sort() {
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
}

// addUnit appends the rows of the line table of compilation unit cu, and
// returns the unit's file table as indexes in t.files. Sequences that start
// outside the executable segments (!inText) are left out.
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

// row returns the last row at or before addr (an end-of-sequence row if
// addr is past the end of its sequence), or false.
func (t *lineTable) row(addr uint64) (lineRow, bool) {
	i := sort.Search(len(t.rows), func(i int) bool { return t.rows[i].addr > addr }) - 1
	if i < 0 {
		return lineRow{}, false
	}
	return t.rows[i], true
}
