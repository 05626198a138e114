package symbolize

import (
	"sort"
	"sync/atomic"
)

// An Unwinder unwinds the user stacks of one process from the tables its
// binaries had loaded when it was made (see [Process.Unwinder]). It never
// reads a file or parses a table, and it is immutable: any number of
// goroutines may use it while the Process that made it goes on, which is
// what a profiler's ring reader needs. Code mapped after it was made is
// unwound by the frame pointer, as JIT code is.
type Unwinder struct {
	maps []unwindMap // by start
	id   uint64      // names u in a RowCache without keeping it alive
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
	row    unwindRow
}

// get and put work on a nil c, which keeps nothing.
func (c *RowCache) get(id, pc uint64) (unwindRow, bool) {
	if c == nil {
		return unwindRow{}, false
	}
	e := &c.e[rowCacheSlot(pc)]
	return e.row, e.id == id && e.pc == pc
}

func (c *RowCache) put(id, pc uint64, r unwindRow) {
	if c != nil {
		c.e[rowCacheSlot(pc)] = rowCacheEntry{id: id, pc: pc, row: r}
	}
}

// rowCacheSlot mixes the pc's bits: return addresses of one function
// differ in their low bits, functions of one library in the middle ones.
func rowCacheSlot(pc uint64) uint64 {
	return (pc ^ pc>>8 ^ pc>>16) % rowCacheSize
}

// unwindMap is one executable mapping and its binary's tables.
type unwindMap struct {
	start, limit uint64
	delta        uint64 // runtime address + delta = ELF virtual address
	cfi          *unwindTable
	gotab        *goTable
	binary       bool // a binary was read: its code is not JIT code
}

// Unwinder loads the unwind tables of every binary p maps executable
// (their .eh_frame, or pcln tables for Go; not their symbols) and returns
// an Unwinder over them. The tables count in the cache's memory bound with
// the binaries; an Unwinder keeps them alive after an eviction until it is
// dropped. It needs Options.UnwindTables.
func (p *Process) Unwinder() *Unwinder {
	u := &Unwinder{maps: make([]unwindMap, 0, len(p.maps)), id: unwinderIDs.Add(1)}
	for _, ms := range p.maps {
		if ms.bin != nil && ms.bin.evicted {
			p.bind(ms)
		}
		um := unwindMap{start: ms.m.Start, limit: ms.m.Limit}
		if ms.ok {
			b := ms.bin
			b.loadUnwind(p.c)
			p.c.touch(b)
			// A binary without symbols (parseErr) may still have
			// its .eh_frame.
			um.delta, um.binary = ms.delta, true
			um.cfi, um.gotab = b.unwind, b.gotab
		}
		u.maps = append(u.maps, um)
	}
	p.c.trimBytes()
	return u
}

// Binaries returns how many of u's mappings are in a binary whose unwind
// tables were read, and how many of those have an .eh_frame or Go table.
func (u *Unwinder) Binaries() (mapped, withTables int) {
	for _, m := range u.maps {
		if m.binary {
			mapped++
			if m.cfi != nil || m.gotab != nil {
				withTables++
			}
		}
	}
	return mapped, withTables
}

func (u *Unwinder) codeAt(pc uint64) (*unwindTable, *goTable, uint64, bool) {
	i := sort.Search(len(u.maps), func(i int) bool { return u.maps[i].start > pc }) - 1
	if i < 0 || pc >= u.maps[i].limit || !u.maps[i].binary {
		return nil, nil, 0, false
	}
	m := &u.maps[i]
	return m.cfi, m.gotab, pc + m.delta, true
}

// Covered reports whether u has a rule for the code at pc (taken as the
// instruction a thread was at): an .eh_frame row or a Go function. Where
// it has none, the frame is stepped by its frame pointer, which skips the
// caller of a function that has not pushed one; see
// [Process.LeafCallerAtSP] for the leaves that can be told. c (may be
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
		if _, _, ok := gotab.funcAt(vaddr); ok {
			return true
		}
		return cfi.find(vaddr).cfa != cfaUnknown
	}
	r := cfi.find(vaddr)
	c.put(u.id, pc, r)
	return r.cfa != cfaUnknown
}
