package unwind

import (
	"sort"
	"sync/atomic"
)

// An Unwinder unwinds the user stacks of one process from the tables its
// binaries had loaded when it was made (package symbolize makes them from
// a process's memory map: symbolize.Process.Unwinder). It never
// reads a file or parses a table, and it is immutable: any number of
// goroutines may use it while the process goes on, which is
// what a profiler's ring reader needs. Code mapped after it was made is
// unwound by the frame pointer, as JIT code is.
type Unwinder struct {
	maps []Mapping // by start
	id   uint64    // names u in a RowCache without keeping it alive
}

// unwinderIDs numbers Unwinders from 1 (0 marks a RowCache's empty
// entries).
var unwinderIDs atomic.Uint64

// A RowCache remembers the unwinding rules of the native code at recent
// pcs, of any Unwinder: a profile's samples come back to the same few
// hundred pcs, and a rule found in a large table (libc's has ~40 000
// rows) costs cache misses each time. It is direct-mapped, 8 KiB, and not
// safe for concurrent use: one per ring reader.
type RowCache struct {
	e [rowCacheSize]rowCacheEntry
}

const rowCacheSize = 256

type rowCacheEntry struct {
	id, pc uint64
	row    tableRow
}

// get and put work on a nil c, which keeps nothing.
func (c *RowCache) get(id, pc uint64) (tableRow, bool) {
	if c == nil {
		return tableRow{}, false
	}
	e := &c.e[rowCacheSlot(pc)]
	return e.row, e.id == id && e.pc == pc
}

func (c *RowCache) put(id, pc uint64, r tableRow) {
	if c != nil {
		c.e[rowCacheSlot(pc)] = rowCacheEntry{id: id, pc: pc, row: r}
	}
}

// rowCacheSlot mixes the pc's bits: return addresses of one function
// differ in their low bits, functions of one library in the middle ones.
func rowCacheSlot(pc uint64) uint64 {
	return (pc ^ pc>>8 ^ pc>>16) % rowCacheSize
}

// Mapping is one executable mapping of a process and the tables of the
// binary it maps, which the caller read.
type Mapping struct {
	Start, Limit uint64
	Delta        uint64  // runtime address + Delta = ELF virtual address
	CFI          *Table  // compiled .eh_frame/.debug_frame, nil if none
	Go           GoFuncs // Go's tables, nil if not Go
	// Binary: a binary was read, so its code is not JIT code (even
	// without tables).
	Binary bool
}

// NewUnwinder returns an Unwinder over the mappings of a process, sorted
// by Start; it keeps maps.
func NewUnwinder(maps []Mapping) *Unwinder {
	return &Unwinder{maps: maps, id: unwinderIDs.Add(1)}
}

// Binaries returns how many of u's mappings are in a binary whose unwind
// tables were read, and how many of those have an .eh_frame or Go table.
func (u *Unwinder) Binaries() (mapped, withTables int) {
	for _, m := range u.maps {
		if m.Binary {
			mapped++
			if m.CFI != nil || m.Go != nil {
				withTables++
			}
		}
	}
	return mapped, withTables
}

func (u *Unwinder) codeAt(pc uint64) (*Table, GoFuncs, uint64, bool) {
	i := sort.Search(len(u.maps), func(i int) bool { return u.maps[i].Start > pc }) - 1
	if i < 0 || pc >= u.maps[i].Limit || !u.maps[i].Binary {
		return nil, nil, 0, false
	}
	m := &u.maps[i]
	return m.CFI, m.Go, pc + m.Delta, true
}

// Covered reports whether u has a rule for the code at pc (taken as the
// instruction a thread was at): an .eh_frame row or a Go function. Where
// it has none, the frame is stepped by its frame pointer, which skips the
// caller of a function that has not pushed one; see
// symbolize.Process.LeafCallerAtSP for the leaves that can be told. c (may be
// nil) holds the rows UnwindCached found: the leaf's, when it is asked
// right after.
func (u *Unwinder) Covered(pc uint64, c *RowCache) bool {
	if r, ok := c.get(u.id, pc); ok {
		return r.cfa != cfaUnknown
	}
	cfi, gotab, vaddr, ok := u.codeAt(pc)
	if !ok {
		return false
	}
	if gotab != nil {
		if _, ok := gotab.Func(vaddr, false); ok {
			return true
		}
		return cfi.find(vaddr).cfa != cfaUnknown
	}
	r := cfi.find(vaddr)
	c.put(u.id, pc, r)
	return r.cfa != cfaUnknown
}
