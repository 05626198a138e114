package symbolize

import (
	"debug/dwarf"
	"fmt"
	"io"
	"slices"
	"sort"

	"github.com/perfprof/perfprof/internal/limits"
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

// addUnit appends the rows of the line table of compilation unit cu, at
// most maxRows of them, and returns the unit's file table as indexes in
// t.files. Sequences that start outside the executable segments (!inText)
// are left out. Past maxRows it stops, with an error wrapping a
// *limits.Error of kind LineRows: a line program is the target's to write,
// and one byte of it can make a row.
func (t *lineTable) addUnit(d *dwarf.Data, cu *dwarf.Entry, intern func(*dwarf.LineFile) uint32, inText func(uint64) bool, maxRows int) ([]uint32, error) {
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
	for n := 0; ; n++ {
		err := lr.Next(&e)
		if err == nil && n+1 >= maxRows {
			// Rows read, kept or not, so that the time is bounded too;
			// one is left for the end.
			err = limits.Errorf(limits.LineRows, "line table of unit at offset %#x: more than %d rows", cu.Offset, maxRows)
			if inSeq && !skipSeq && len(t.rows) > 0 {
				// The addresses past the last row kept have no line,
				// rather than its; an end at its own address would
				// sort before it.
				end := max(e.Address, t.rows[len(t.rows)-1].addr+1)
				t.rows = append(t.rows, lineRow{addr: end, file: endOfSequence})
			}
		}
		if err != nil {
			if _, ok := limits.KindOf(err); ok {
				// Kept as it is: the rows before it answer.
			} else if err != io.EOF {
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
