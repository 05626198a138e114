package symbolize

import (
	"cmp"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"

	"golang.org/x/sys/unix"
)

// DWARF is decoded lazily, one compilation unit at a time. The parse reads
// only which unit holds which addresses (.debug_aranges, else the top DIE of
// each unit); the first lookup of an address in a unit decodes its line
// program and its functions and inlined calls, which then stay. For
// Debian's libc, a target touches a few dozen of its ~2 000 units: decoding
// all of them up front cost ~300 ms and 170 MB of garbage for tables a
// report never reads.
//
// Decoding needs the decompressed DWARF sections (~8.5 MB for libc). They
// are held while units are being decoded and dropped by Cache.Trim when no
// unit was decoded for dwarfIdleTrims trims; the file stays open (one
// descriptor per cached binary), so that they can be read again when a new
// unit is needed. A file opened through /proc/PID/map_files stays readable
// after the process exits or the path is replaced; reopening by path could
// read another file.
//
// A unit is decoded with a dwarf.Data of its own bytes of .debug_info (and
// the other sections whole), not with one of the whole file: dwarf.New
// parses the abbreviation table of every unit it is given, 12.8 MB of maps
// for libc's 2 000 tables, more than the sections. References from one
// unit into another (DW_FORM_ref_addr, as dwz and LTO write them) need the
// whole file: a file whose abbreviations allow them is decoded, and held,
// with a dwarf.Data of all its units.

// dwarfIdleTrims is how many Cache.Trim calls (one per report in the
// engine) the DWARF sections of a binary stay loaded without a unit being
// decoded. A steady target stops touching new units after a few reports;
// reading the sections again costs libc ~50 ms of CPU (decompressing them),
// once.
const dwarfIdleTrims = 3

// maxDIEDepth bounds how deep the function walk descends into the DIE tree:
// the walk recurses once per level, and a malicious file could nest DIEs
// millions deep (one byte each). Real trees are shallow: the deepest seen
// is 29 levels (Rust's std, inlined iterator chains). Deeper subtrees are
// skipped and counted in Stats.DWARFTooDeep.
const maxDIEDepth = 256

// dwarfTables is the DWARF of a binary, decoded one compilation unit at a
// time.
type dwarfTables struct {
	name   string    // the file, for errors
	src    *elf.File // where the sections are read from, and read again
	closer io.Closer // of src, if it is a file: held until release
	inText func(uint64) bool

	units  []dwarfUnit
	ranges []unitRange // address ranges of units, sorted by lo
	maxHi  []uint64    // maxHi[i] is the largest hi of ranges[:i+1]
	always []int32     // units of unknown extent: consulted on every lookup

	// wholeFile: units may refer to each other, so they are decoded with
	// one dwarf.Data of all of them, held with the sections.
	wholeFile   bool
	abbrevBytes int64 // estimated size of the abbreviation tables of that dwarf.Data

	sec      *dwarfSections // nil when dropped
	whole    *dwarf.Data    // wholeFile: of sec
	lastUse  int            // Cache.trims when sec was last loaded or used
	loadErr  error          // loading again failed: no more units are decoded
	decoded  int64          // bytes held by the decoded units (sizer)
	indexLen int64          // bytes held by units, ranges, maxHi and always
}

// dwarfUnit is one compilation (or partial) unit.
type dwarfUnit struct {
	hdr, end uint64       // its bytes in .debug_info: header to end
	die      dwarf.Offset // of its top DIE in .debug_info
	tables   *unitTables  // nil until decoded
}

// unitTables is what decoding a unit yields. Either table may be nil.
type unitTables struct {
	lines *lineTable
	funcs *funcTable
}

// unitRange is one address range [lo, hi) of a unit.
type unitRange struct {
	lo, hi uint64
	unit   int32
}

// dwarfSections are the decompressed sections that decoding reads: DIEs
// and their abbreviations, strings, line programs and address ranges
// (DWARF 4 and 5). The others (locations, frames, type units, names,
// macros) are never read, so never held.
type dwarfSections struct {
	abbrev, info, str, line, ranges []byte
	addr, lineStr, strOffsets       []byte
	rngLists                        []byte
	// mapped are the sections read into memory mapped for them, outside
	// the Go heap (see readSection); free unmaps them.
	mapped [][]byte
}

// mapSectionBytes is the size from which a section is read into memory of
// its own rather than the Go heap. The sections are held while units are
// decoded (8.5 MB for libc's debug file) and then dropped: on the heap
// they would double the garbage collector's goal for as long, which set
// the collector's peak RSS.
const mapSectionBytes = 64 << 10

// maxSectionBytes bounds a section's size: a debug file is the target's
// to make, and its headers say what a section inflates to. The largest
// .debug_info of the test machine's debug files is under 10 MB; the
// bound is the symbol cache's default MaxBytes, so that one forged file
// cannot take more than the whole cache may.
const maxSectionBytes = 256 << 20

// readSection returns the (decompressed) bytes of s, large ones in memory
// mapped for them, recorded in sec.mapped.
func (sec *dwarfSections) readSection(s *elf.Section) ([]byte, error) {
	if s.Size > maxSectionBytes {
		return nil, fmt.Errorf("%s: %d bytes, more than %d", s.Name, s.Size, maxSectionBytes)
	}
	if s.Size < mapSectionBytes || s.Type == elf.SHT_NOBITS {
		b, err := s.Data()
		if err != nil && uint64(len(b)) < s.Size {
			return nil, err
		}
		return b, nil
	}
	mem, err := unix.Mmap(-1, 0, int(s.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("map %d bytes for %s: %w", s.Size, s.Name, err)
	}
	sec.mapped = append(sec.mapped, mem)
	if _, err := io.ReadFull(s.Open(), mem); err != nil {
		return nil, err
	}
	return mem, nil
}

// free unmaps the mapped sections. Nothing may use sec after it: the
// decoded units hold copies, never the sections' bytes.
func (sec *dwarfSections) free() {
	if sec == nil {
		return
	}
	for _, m := range sec.mapped {
		_ = unix.Munmap(m) // memory of our own: nothing to report
	}
	*sec = dwarfSections{}
}

// newDWARFTables loads the DWARF of src (a binary or its separate debug
// file) and indexes its units by address. loads are the PT_LOAD headers
// of the binary: code outside its executable segments (functions dropped
// by the linker, left at address 0) is ignored. On success the tables own
// closer; on failure the caller keeps it.
func newDWARFTables(name string, src *elf.File, closer io.Closer, loads []elf.ProgHeader, c *Cache) (t *dwarfTables, err error) {
	var sec *dwarfSections
	defer func() {
		// A damaged file must not cost the binary its symbols.
		if p := recover(); p != nil {
			t, err = nil, fmt.Errorf("DWARF of %s: panic: %v", name, p)
		}
		if err != nil {
			sec.free()
		}
	}()
	inText := func(addr uint64) bool {
		for _, p := range loads {
			if p.Flags&elf.PF_X != 0 && p.Vaddr <= addr && addr < p.Vaddr+p.Memsz {
				return true
			}
		}
		return false
	}
	overlapsText := func(lo, hi uint64) bool {
		for _, p := range loads {
			if p.Flags&elf.PF_X != 0 && lo < p.Vaddr+p.Memsz && p.Vaddr < hi {
				return true
			}
		}
		return false
	}
	sec, err = loadSections(src)
	if err != nil {
		return nil, fmt.Errorf("load DWARF of %s: %w", name, err)
	}
	heads, err := unitHeaders(sec.info, src.ByteOrder)
	if err != nil {
		return nil, fmt.Errorf("DWARF of %s: %w", name, err)
	}
	var tables []uint64
	for _, h := range heads {
		if !slices.Contains(tables, h.abbrev) {
			tables = append(tables, h.abbrev)
		}
	}
	t = &dwarfTables{name: name, src: src, inText: inText, sec: sec, lastUse: c.trims}
	t.wholeFile, t.abbrevBytes = scanAbbrevs(sec.abbrev, tables)
	if t.wholeFile {
		if t.whole, err = sec.data(sec.info); err != nil {
			return nil, fmt.Errorf("DWARF of %s: %w", name, err)
		}
	}
	c.stats.DWARFLoads++

	var aranges map[uint64][][2]uint64
	if s := dwarfSection(src, "aranges"); s != nil {
		if data, err := s.Data(); err == nil {
			// Best effort: a unit without a set is indexed by its DIE.
			aranges, _ = parseAranges(data, src.ByteOrder)
		}
	}
	for _, h := range heads {
		if h.typeUnit {
			continue
		}
		u := int32(len(t.units))
		t.units = append(t.units, dwarfUnit{hdr: h.off, end: h.end, die: h.die})
		rs, ok := aranges[h.off]
		if !ok {
			d, off, err := t.unitData(&t.units[u])
			var e *dwarf.Entry
			if err == nil {
				e, err = unitEntry(d.Reader(), off)
			}
			if err != nil {
				// Not a unit debug/dwarf reads: a walk of the file
				// would not find it either.
				t.units = t.units[:u]
				continue
			}
			rs, _ = d.Ranges(e)
			if len(rs) == 0 {
				if !e.Children && e.Val(dwarf.AttrStmtList) == nil {
					t.units = t.units[:u]
					continue // neither functions nor lines
				}
				// No extent declared: DWARF says it has no code,
				// but it may have line rows or functions all the
				// same. Consulted on every lookup, as a parse of
				// all units would have.
				t.always = append(t.always, u)
			}
		}
		for _, rg := range rs {
			if rg[0] < rg[1] && overlapsText(rg[0], rg[1]) {
				t.ranges = append(t.ranges, unitRange{lo: rg[0], hi: rg[1], unit: u})
			}
		}
	}
	if len(t.units) == 0 {
		return nil, fmt.Errorf("DWARF of %s: no compilation units", name)
	}
	t.units = slices.Clip(t.units)
	t.maxHi = sortByLo(t.ranges, func(r *unitRange) (uint64, uint64) { return r.lo, r.hi })
	t.indexLen = int64(cap(t.units))*int64(reflect.TypeFor[dwarfUnit]().Size()) +
		int64(cap(t.ranges))*int64(reflect.TypeFor[unitRange]().Size()) +
		int64(cap(t.maxHi))*8 + int64(cap(t.always))*4
	t.closer = closer
	return t, nil
}

// dwarfSection returns the section .debug_NAME of f, or its compressed
// .zdebug_NAME, or nil.
func dwarfSection(f *elf.File, name string) *elf.Section {
	if s := f.Section(".debug_" + name); s != nil {
		return s
	}
	return f.Section(".zdebug_" + name)
}

// loadSections reads and decompresses the sections of dwarfSections.
// Unlike (*elf.File).DWARF it applies no relocations: executables and
// shared libraries have none against DWARF, and relocatable objects are
// never mapped.
func loadSections(f *elf.File) (sec *dwarfSections, err error) {
	sec = &dwarfSections{}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
		if err != nil {
			sec.free()
			sec = nil
		}
	}()
	for _, x := range []struct {
		name string
		dst  *[]byte
	}{
		{"abbrev", &sec.abbrev}, {"info", &sec.info}, {"str", &sec.str}, {"line", &sec.line},
		{"ranges", &sec.ranges}, {"addr", &sec.addr}, {"line_str", &sec.lineStr},
		{"str_offsets", &sec.strOffsets}, {"rnglists", &sec.rngLists},
	} {
		s := dwarfSection(f, x.name)
		if s == nil {
			continue
		}
		b, err := sec.readSection(s)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", s.Name, err)
		}
		*x.dst = b
	}
	return sec, nil
}

// data returns a dwarf.Data of info, all of .debug_info or the bytes of
// one unit, with the other sections whole.
func (s *dwarfSections) data(info []byte) (*dwarf.Data, error) {
	d, err := dwarf.New(s.abbrev, nil, nil, info, s.line, nil, s.ranges, s.str)
	if err != nil {
		return nil, err
	}
	for _, x := range []struct {
		name string
		b    []byte
	}{{".debug_addr", s.addr}, {".debug_line_str", s.lineStr}, {".debug_str_offsets", s.strOffsets}, {".debug_rnglists", s.rngLists}} {
		if x.b != nil {
			if err := d.AddSection(x.name, x.b); err != nil {
				return nil, fmt.Errorf("add %s: %w", x.name, err)
			}
		}
	}
	return d, nil
}

// size is the bytes s holds.
func (s *dwarfSections) size() int64 {
	return int64(cap(s.abbrev) + cap(s.info) + cap(s.str) + cap(s.line) + cap(s.ranges) +
		cap(s.addr) + cap(s.lineStr) + cap(s.strOffsets) + cap(s.rngLists))
}

// scanAbbrevs reads the abbreviation tables at offs (those of the units)
// and reports whether an attribute may refer to another unit or file
// (DW_FORM_ref_addr; DW_FORM_indirect, which may be one; the references
// to a supplementary file). It estimates the memory dwarf.New takes for
// the tables: a map entry per abbreviation and an afield per attribute (the
// sizes of debug/dwarf's abbrev and afield, map entries counted twice as
// in sizer). A table it cannot read counts as referring elsewhere.
func scanAbbrevs(abbrev []byte, offs []uint64) (refsOut bool, size int64) {
	const (
		formRefAddr       = 0x10
		formIndirect      = 0x16
		formRefSup4       = 0x1c
		formImplicitConst = 0x21
		formRefSup8       = 0x24
		formGNURefAlt     = 0x1f20
	)
	var nAbbrev, nField int64
	for _, off := range offs {
		if off >= uint64(len(abbrev)) {
			return true, 0
		}
		b := abbrev[off:]
		for {
			code, n := binary.Uvarint(b)
			if n <= 0 {
				return true, 0
			}
			b = b[n:]
			if code == 0 {
				break
			}
			if _, n = binary.Uvarint(b); n <= 0 || n >= len(b) { // the tag, then a byte: children
				return true, 0
			}
			b = b[n+1:]
			nAbbrev++
			for {
				attr, n := binary.Uvarint(b)
				if n <= 0 {
					return true, 0
				}
				b = b[n:]
				form, n := binary.Uvarint(b)
				if n <= 0 {
					return true, 0
				}
				b = b[n:]
				if attr == 0 && form == 0 {
					break
				}
				nField++
				switch form {
				case formRefAddr, formIndirect, formRefSup4, formRefSup8, formGNURefAlt:
					refsOut = true
				case formImplicitConst:
					if _, n = binary.Varint(b); n <= 0 {
						return true, 0
					}
					b = b[n:]
				}
			}
		}
	}
	const abbrevSize, afieldSize = 4 + 32, 24 // a uint32 key and an abbrev; an afield
	return refsOut, 2*nAbbrev*abbrevSize + nField*afieldSize
}

// unitEntry returns the top DIE of the unit whose first DIE is at off.
func unitEntry(r *dwarf.Reader, off dwarf.Offset) (*dwarf.Entry, error) {
	r.Seek(off)
	e, err := r.Next()
	if err != nil {
		return nil, err
	}
	if e == nil || e.Offset != off || (e.Tag != dwarf.TagCompileUnit && e.Tag != dwarf.TagPartialUnit) {
		return nil, fmt.Errorf("no unit at offset %#x", off)
	}
	return e, nil
}

// unitHeader is where a unit of .debug_info is: its header, its first DIE
// and its end, its abbreviation table, and whether it is a type unit (DWARF
// 5), which holds no code.
type unitHeader struct {
	off, end uint64
	die      dwarf.Offset
	abbrev   uint64 // offset in .debug_abbrev
	typeUnit bool
}

// unitHeaders reads the unit headers of .debug_info (DWARF 2 to 5, 32- and
// 64-bit) as debug/dwarf does: .debug_aranges names units by the offset of
// their header, debug/dwarf by the offset of their first DIE, and it does
// not tell one from the other.
func unitHeaders(info []byte, bo binary.ByteOrder) ([]unitHeader, error) {
	var heads []unitHeader
	for off := uint64(0); off < uint64(len(info)); {
		b := info[off:]
		if len(b) < 4 {
			return nil, fmt.Errorf("unit header at offset %#x: truncated", off)
		}
		length, hdr, is64 := uint64(bo.Uint32(b)), uint64(4), false
		if length == 0xffffffff {
			if len(b) < 12 {
				return nil, fmt.Errorf("unit header at offset %#x: truncated", off)
			}
			length, hdr, is64 = bo.Uint64(b[4:]), 12, true
		}
		if length == 0 {
			off += hdr // padding, as debug/dwarf reads it
			continue
		}
		if length > uint64(len(b))-hdr || length < 2 {
			return nil, fmt.Errorf("unit at offset %#x: length %#x out of range", off, length)
		}
		end := off + hdr + length
		version := bo.Uint16(b[hdr:])
		offSize := uint64(4)
		if is64 {
			offSize = 8
		}
		var (
			size     uint64 // of the rest of the header
			abbrevAt uint64 // where debug_abbrev_offset is in it
			typeUnit bool
		)
		switch {
		case 2 <= version && version <= 4:
			size, abbrevAt = 2+offSize+1, 2 // version, debug_abbrev_offset, address_size
		case version == 5:
			if length < 3 {
				return nil, fmt.Errorf("unit at offset %#x: truncated", off)
			}
			size, abbrevAt = 2+1+1+offSize, 4 // version, unit_type, address_size, debug_abbrev_offset
			// Other unit types have nothing more, as debug/dwarf reads them.
			switch b[hdr+2] {
			case 0x04, 0x05: // DW_UT_skeleton, DW_UT_split_compile: dwo_id
				size += 8
			case 0x02, 0x06: // DW_UT_type, DW_UT_split_type: type_signature, type_offset
				size += 8 + offSize
				typeUnit = true
			}
		default:
			return nil, fmt.Errorf("unit at offset %#x: unknown version %d", off, version)
		}
		if size >= length {
			return nil, fmt.Errorf("unit at offset %#x: no DIE", off)
		}
		abbrev := uint64(bo.Uint32(b[hdr+abbrevAt:]))
		if is64 {
			abbrev = bo.Uint64(b[hdr+abbrevAt:])
		}
		heads = append(heads, unitHeader{off: off, end: end, die: dwarf.Offset(off + hdr + size), abbrev: abbrev, typeUnit: typeUnit})
		off = end
	}
	return heads, nil
}

// parseAranges reads .debug_aranges (DWARF 2 to 5): for each set, the
// offset of the header of the unit in .debug_info and its address ranges.
// Sets with a segment selector are left out: their units are indexed by
// their DIE.
func parseAranges(data []byte, bo binary.ByteOrder) (map[uint64][][2]uint64, error) {
	sets := make(map[uint64][][2]uint64)
	for off := uint64(0); off < uint64(len(data)); {
		b := data[off:]
		if len(b) < 4 {
			return sets, fmt.Errorf("aranges set at offset %#x: truncated", off)
		}
		length, hdr, offSize := uint64(bo.Uint32(b)), uint64(4), uint64(4)
		if length == 0xffffffff {
			if len(b) < 12 {
				return sets, fmt.Errorf("aranges set at offset %#x: truncated", off)
			}
			length, hdr, offSize = bo.Uint64(b[4:]), 12, 8
		}
		if length > uint64(len(b))-hdr {
			return sets, fmt.Errorf("aranges set at offset %#x: length %#x out of range", off, length)
		}
		set := b[:hdr+length]
		off += hdr + length
		if uint64(len(set)) < hdr+2+offSize+2 {
			return sets, fmt.Errorf("aranges set at offset %#x: truncated", off)
		}
		p := hdr + 2 // version (2): nothing else is defined
		var unit uint64
		if offSize == 8 {
			unit = bo.Uint64(set[p:])
		} else {
			unit = uint64(bo.Uint32(set[p:]))
		}
		p += offSize
		addrSize, segSize := uint64(set[p]), set[p+1]
		p += 2
		if (addrSize != 4 && addrSize != 8) || segSize != 0 {
			continue
		}
		// Tuples are aligned to their size from the start of the set.
		tuple := 2 * addrSize
		p = (p + tuple - 1) / tuple * tuple
		var rs [][2]uint64
		for ; p+tuple <= uint64(len(set)); p += tuple {
			var lo, n uint64
			if addrSize == 8 {
				lo, n = bo.Uint64(set[p:]), bo.Uint64(set[p+8:])
			} else {
				lo, n = uint64(bo.Uint32(set[p:])), uint64(bo.Uint32(set[p+4:]))
			}
			if lo == 0 && n == 0 {
				break
			}
			if lo+n > lo {
				rs = append(rs, [2]uint64{lo, lo + n})
			}
		}
		sets[unit] = append(sets[unit], rs...)
	}
	return sets, nil
}

// sections returns the DWARF sections, loading them again if Trim dropped
// them.
func (t *dwarfTables) sections(c *Cache) (*dwarfSections, error) {
	if t.sec == nil {
		if t.loadErr != nil {
			return nil, t.loadErr
		}
		sec, err := loadSections(t.src)
		var whole *dwarf.Data
		if err == nil && t.wholeFile {
			whole, err = sec.data(sec.info)
		}
		if err != nil {
			t.loadErr = fmt.Errorf("load DWARF of %s again: %w", t.name, err)
			return nil, t.loadErr
		}
		c.stats.DWARFLoads++
		t.sec, t.whole = sec, whole
	}
	t.lastUse = c.trims
	return t.sec, nil
}

// unitData returns a dwarf.Data that holds unit u, and the offset of its
// top DIE in it. The sections must be loaded.
func (t *dwarfTables) unitData(u *dwarfUnit) (*dwarf.Data, dwarf.Offset, error) {
	if t.wholeFile {
		return t.whole, u.die, nil
	}
	if u.end > uint64(len(t.sec.info)) {
		return nil, 0, fmt.Errorf("unit at offset %#x: past the end of .debug_info", u.hdr)
	}
	d, err := t.sec.data(t.sec.info[u.hdr:u.end])
	if err != nil {
		return nil, 0, fmt.Errorf("unit at offset %#x: %w", u.hdr, err)
	}
	// Offsets in d count from the unit's header.
	return d, u.die - dwarf.Offset(u.hdr), nil
}

// drop lets the sections go; they are read again when a unit needs them.
// It reports whether they were loaded.
func (t *dwarfTables) drop() bool {
	if t.sec == nil {
		return false
	}
	t.whole = nil
	t.sec.free()
	t.sec = nil
	return true
}

// release closes the file.
func (t *dwarfTables) release() error {
	t.whole = nil
	t.sec.free()
	t.sec = nil
	if t.closer == nil {
		return nil
	}
	err := t.closer.Close()
	t.closer = nil
	return err
}

// held is the bytes of the sections while they are loaded, with the
// abbreviation tables of a dwarf.Data of the whole file.
func (t *dwarfTables) held() int64 {
	if t.sec == nil {
		return 0
	}
	n := t.sec.size()
	if t.whole != nil {
		n += t.abbrevBytes
	}
	return n
}

// bytesHeld is what t holds: its index, the decoded units and the
// sections while they are loaded.
func (t *dwarfTables) bytesHeld() int64 {
	return t.indexLen + t.decoded + t.held()
}

// unitTables returns the tables of unit u, decoding it on first use. It
// returns nil when the sections could not be loaded again.
func (t *dwarfTables) unitTables(u int32, c *Cache) *unitTables {
	un := &t.units[u]
	if un.tables != nil {
		return un.tables
	}
	if _, err := t.sections(c); err != nil {
		return nil
	}
	// Best effort, as for the whole file before: what was read of a
	// damaged unit answers, and it is not decoded again.
	ut := &unitTables{}
	if d, off, err := t.unitData(un); err == nil {
		var tooDeep int
		ut, tooDeep, _ = decodeUnit(d, off, t.inText)
		c.stats.DWARFTooDeep += tooDeep
	}
	c.stats.DWARFUnitsDecoded++
	un.tables = ut
	var sz sizer
	sz.add(reflect.ValueOf(ut))
	t.decoded += sz.total()
	return ut
}

// lookup resolves addr: the frames of the function (and inlined calls)
// that hold it, innermost first, or else the file and line of addr for a
// frame named by its ELF symbol. sym, the ELF symbol at addr (nil if
// none), names a function DWARF leaves unnamed. It decodes the units that
// hold addr if they were not yet.
//
// The answer is what one table of all units would give: the last line row
// at or before addr (an end-of-sequence row losing to a row of the same
// address, a later unit winning a tie), and the smallest function range
// that holds addr (a later start winning a tie, then a later unit). So the
// units consulted are those whose ranges hold addr or end at it: GCC ends
// a line program with a row at the end of the unit's code, which names
// the first byte past it.
func (t *dwarfTables) lookup(addr uint64, sym *symbol, c *Cache) (frames []Frame, file string, line int) {
	var (
		cands [8]int32
		units = cands[:0]
	)
	i := searchRanges(t.ranges, addr)
	for ; i >= 0 && t.maxHi[i] >= addr; i-- {
		if r := t.ranges[i]; addr <= r.hi && !slices.Contains(units, r.unit) {
			units = append(units, r.unit)
		}
	}
	for _, u := range t.always {
		if !slices.Contains(units, u) {
			units = append(units, u)
		}
	}
	if len(units) == 0 {
		return nil, "", 0
	}
	slices.Sort(units) // in the order of .debug_info, for ties

	var (
		row      lineRow
		rowUnit  *unitTables
		fnUnit   *unitTables
		fn       int32 = -1
		fnLo     uint64
		fnSize   uint64
		haveLine bool
	)
	for _, u := range units {
		ut := t.unitTables(u, c)
		if ut == nil {
			continue
		}
		if ut.lines != nil {
			if r, ok := ut.lines.row(addr); ok {
				better := !haveLine || r.addr > row.addr ||
					(r.addr == row.addr && !(r.file == endOfSequence && row.file != endOfSequence))
				if better {
					row, rowUnit, haveLine = r, ut, true
				}
			}
		}
		if ut.funcs != nil {
			if s, lo, hi, ok := ut.funcs.concrete(addr); ok {
				size := hi - lo
				if fn < 0 || size < fnSize || (size == fnSize && lo >= fnLo) {
					fn, fnLo, fnSize, fnUnit = s, lo, size, ut
				}
			}
		}
	}
	if haveLine && row.file != endOfSequence {
		file, line = rowUnit.lines.files[row.file], int(row.line)
	}
	if fn < 0 {
		return nil, file, line
	}
	return fnUnit.funcs.frames(fnUnit.funcs.chain(fn, addr), file, line, sym), file, line
}

// searchRanges returns the index of the last range that starts at or
// before addr, or -1.
func searchRanges(rs []unitRange, addr uint64) int {
	i, _ := slices.BinarySearchFunc(rs, addr, func(r unitRange, addr uint64) int {
		if r.lo <= addr {
			return -1
		}
		return 1
	})
	return i - 1
}

// decodeUnit reads the line program and the functions of the unit whose
// top DIE is at off. It returns what it could read, how many DIE subtrees
// it skipped for nesting deeper than maxDIEDepth, and the errors met.
func decodeUnit(d *dwarf.Data, off dwarf.Offset, inText func(uint64) bool) (ut *unitTables, tooDeep int, err error) {
	ut = &unitTables{}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("decode unit at offset %#x: panic: %v", off, p)
		}
	}()
	r := d.Reader()
	e, err := unitEntry(r, off)
	if err != nil {
		return ut, 0, err
	}
	lt := &lineTable{}
	fileIndex := make(map[string]uint32)
	intern := func(f *dwarf.LineFile) uint32 {
		name := ""
		if f != nil {
			name = f.Name
		}
		i, ok := fileIndex[name]
		if !ok {
			i = uint32(len(lt.files))
			lt.files = append(lt.files, name)
			fileIndex[name] = i
		}
		return i
	}
	var errs []error
	files, err := lt.addUnit(d, e, intern, inText)
	if err != nil {
		errs = append(errs, err)
	}
	var fb *funcBuilder
	if e.Children {
		fb = newFuncBuilder(d, inText, typesHoldCode(e))
		name, _ := e.Val(dwarf.AttrName).(string)
		if err := fb.unit(r, files, intern(&dwarf.LineFile{Name: name})); err != nil {
			errs = append(errs, fmt.Errorf("functions of unit at offset %#x: %w", off, err))
		}
		tooDeep = fb.tooDeep
	}
	lt.sort()
	if len(lt.rows) > 0 {
		if cap(lt.rows)-len(lt.rows) > len(lt.rows)/4 {
			// Appends leave up to half the array unused; the table
			// stays for the life of the binary.
			lt.rows = slices.Clone(lt.rows)
		}
		ut.lines = lt
	}
	if fb != nil {
		if ft := fb.finish(); ft != nil {
			ft.files = lt.files
			ut.funcs = ft
		}
	}
	return ut, tooDeep, errors.Join(errs...)
}

// typesHoldCode reports whether the types of unit cu may hold functions
// with code, so that the function walk must descend into them. In C and
// assembly they cannot. C++ compilers define a member function at
// namespace scope, with DW_AT_specification naming its declaration in the
// class; but LLVM puts a method defined without a declaration (as rustc has
// emitted them) inside its type, and other languages may do the same.
func typesHoldCode(cu *dwarf.Entry) bool {
	lang, ok := cu.Val(dwarf.AttrLanguage).(int64)
	if !ok {
		return true
	}
	switch lang {
	case 0x0001, 0x0002, 0x000c, 0x001d, 0x002c: // DW_LANG_C89, C, C99, C11, C17
		return false
	case 0x8001: // DW_LANG_Mips_Assembler, what gas writes
		return false
	}
	return true
}

// sortByLo sorts ranges by their start, stably, and returns the running
// maximum of their ends: maxHi[i] is the largest end of ranges[:i+1], so
// that a search for an address can stop at the first range whose maxHi
// is below it.
func sortByLo[R any](ranges []R, bounds func(*R) (lo, hi uint64)) (maxHi []uint64) {
	slices.SortStableFunc(ranges, func(x, y R) int {
		xl, _ := bounds(&x)
		yl, _ := bounds(&y)
		return cmp.Compare(xl, yl)
	})
	maxHi = make([]uint64, len(ranges))
	var m uint64
	for i := range ranges {
		_, hi := bounds(&ranges[i])
		m = max(m, hi)
		maxHi[i] = m
	}
	return maxHi
}
