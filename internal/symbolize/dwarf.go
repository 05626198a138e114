package symbolize

import (
	"bytes"
	"cmp"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/perfprof/perfprof/internal/limits"
)

// DWARF is decoded lazily, one compilation unit at a time. The parse reads
// only which unit holds which addresses (.debug_aranges, else the top DIE of
// each unit); a unit's line program and its functions and inlined calls are
// decoded when an address in it is first needed, and then stay. For
// Debian's libc, a target touches a few dozen of its ~2 000 units: decoding
// all of them up front cost ~300 ms and 170 MB of garbage for tables a
// report never reads.
//
// .debug_info (5.8 MB for libc, and it grows with the program: hundreds of
// MB for a large C++ service) is never held whole. The parse reads it once
// from start to end (dwarf_stream.go), keeping where each unit is, and
// decoding reads the bytes of the units it needs: by offset when the
// section is stored as is, else (compressed, as Debian ships its debug
// files) in one forward pass for all the units a report needs
// (Process.Prepare), since a compressed section can only be read from its
// start. The parse decodes the units of the addresses that made it parse
// on its way, so that a first report reads the section once.
//
// Decoding also reads the other DWARF sections whole (~2.7 MB for libc):
// abbreviations, line programs, strings, ranges. They are held while units
// are being decoded and dropped by Cache.Trim when no unit was decoded for
// dwarfIdleTrims trims; the file stays open (one descriptor per cached
// binary), so that they can be read again when a new unit is needed. A
// file opened through /proc/PID/map_files stays readable after the process
// exits or the path is replaced; reopening by path could read another
// file.
//
// A unit is decoded with a dwarf.Data of its own bytes of .debug_info (and
// the other sections whole), not with one of the whole file: dwarf.New
// parses the abbreviation table of every unit it is given, 12.8 MB of maps
// for libc's 2 000 tables, more than the sections. References from one
// unit into another (DW_FORM_ref_addr, as dwz and LTO write them) need the
// whole file: a file whose abbreviations allow them is decoded, and held,
// with a dwarf.Data of all its units, and its .debug_info is held whole
// with the other sections.

// dwarfIdleTrims is how many Cache.Trim calls (one per report in the
// engine) the DWARF sections of a binary stay loaded without a unit being
// decoded. A steady target stops touching new units after a few reports;
// reading the sections again costs libc ~20 ms of CPU (decompressing them),
// once.
const dwarfIdleTrims = 3

// maxDIEDepth bounds how deep the function walk descends into the DIE tree:
// the walk recurses once per level, and a malicious file could nest DIEs
// millions deep (one byte each). Real trees are shallow: the deepest seen
// is 29 levels (Rust's std, inlined iterator chains). Deeper subtrees are
// skipped and counted in Stats.DWARFTooDeep.
const maxDIEDepth = 256

// maxUnitLineRows bounds the line rows read from one unit's line program,
// and maxLineRows those decoded from all the units of a binary, 16 bytes
// each: a forged line program makes a row of a byte. They match the
// bytes of a unit read into memory (maxUnitBytes) and of a section
// (maxSectionBytes). Debian's libc has 14 000 rows in its largest unit
// and 290 000 in all. A unit past the bound keeps the rows before it, a
// binary past it decodes no more line rows (Options.Limits counts
// LineRows).
const (
	maxUnitLineRows = 1 << 22
	maxLineRows     = 1 << 24
)

// maxUnits bounds the compilation units a parse indexes, 32 bytes each
// (with their ranges, more): a unit can be a dozen bytes.
const maxUnits = 1 << 20

// dwarfTables is the DWARF of a binary, decoded one compilation unit at a
// time.
type dwarfTables struct {
	name   string    // the file, for errors
	src    *elf.File // where the sections are read from, and read again
	closer io.Closer // of src, if it is a file: held until release
	inText func(uint64) bool

	// info is .debug_info, infoSize its size (decompressed). infoAt reads
	// it at any offset when it is stored as is; nil when it is
	// compressed, and read forward from its start.
	info     *elf.Section
	infoAt   io.ReaderAt
	infoSize uint64
	// holdInfo: .debug_info is loaded whole with the other sections, in
	// sec.info (wholeFile, or Cache.holdInfo).
	holdInfo bool

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
	lineRows int            // line rows of the decoded units, of maxLineRows
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
// (info, only when held whole) and their abbreviations, strings, line
// programs and address ranges (DWARF 4 and 5). The others (locations,
// frames, type units, names, macros) are never read, so never held.
type dwarfSections struct {
	abbrev, info, str, line, ranges []byte
	addr, lineStr, strOffsets       []byte
	rngLists                        []byte
	// mapped are the sections read into memory mapped for them, outside
	// the Go heap (see readSection); free unmaps them.
	mapped [][]byte
}

// mapSectionBytes is the size from which a section (or a unit of
// .debug_info) is read into memory of its own rather than the Go heap.
// The sections are held while units are decoded (2.7 MB for libc's debug
// file) and then dropped: on the heap they would double the garbage
// collector's goal for as long, which set the collector's peak RSS.
const mapSectionBytes = 64 << 10

// maxSectionBytes bounds the size of a section held whole: a debug file
// is the target's to make, and its headers say what a section inflates
// to. The bound is the symbol cache's default MaxBytes, so that one forged
// file cannot take more than the whole cache may. .debug_info, read as a
// stream, is bounded by maxInfoBytes unless it must be held whole.
const maxSectionBytes = 256 << 20

// readSection returns the (decompressed) bytes of s, large ones in memory
// mapped for them, recorded in sec.mapped.
func (sec *dwarfSections) readSection(s *elf.Section) ([]byte, error) {
	if err := sectionFits(s, maxSectionBytes); err != nil {
		return nil, err
	}
	r := s.Open()
	if s.Size < mapSectionBytes || s.Type == elf.SHT_NOBITS {
		b, err := s.Data()
		if err != nil && uint64(len(b)) < s.Size {
			return nil, err
		}
		return b, nil
	}
	mem, err := mapBytes(int(s.Size))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.Name, err)
	}
	sec.mapped = append(sec.mapped, mem)
	if _, err := io.ReadFull(r, mem); err != nil {
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
// by the linker, left at address 0) is ignored. The units that hold the
// addresses of want (sorted) are decoded on the way, as a lookup of each
// would decode them. On success the tables own closer; on failure the
// caller keeps it.
func newDWARFTables(name string, src *elf.File, closer io.Closer, loads []elf.ProgHeader, want []uint64, c *Cache) (_ *dwarfTables, err error) {
	t := &dwarfTables{name: name, src: src, holdInfo: c.holdInfo, lastUse: c.trims}
	defer func() {
		// A damaged file must not cost the binary its symbols.
		if p := recover(); p != nil {
			err = fmt.Errorf("DWARF of %s: panic: %v", name, p)
		}
		if err != nil {
			t.sec.free()
		}
	}()
	t.inText = func(addr uint64) bool {
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
	info := dwarfSection(src, "info")
	if info == nil {
		return nil, fmt.Errorf("DWARF of %s: no .debug_info", name)
	}
	if err := sectionFits(info, maxInfoBytes); err != nil {
		return nil, fmt.Errorf("DWARF of %s: %w", name, err)
	}
	t.info, t.infoSize = info, info.Size
	if info.Flags&elf.SHF_COMPRESSED == 0 && !strings.HasPrefix(info.Name, ".zdebug") && info.Type != elf.SHT_NOBITS && info.ReaderAt != nil {
		t.infoAt = info
	}
	if t.sec, err = loadSections(src, t.holdInfo); err != nil {
		return nil, fmt.Errorf("load DWARF of %s: %w", name, err)
	}
	c.stats.DWARFLoads++
	c.stats.DWARFInfoRead += int64(len(t.sec.info))
	c.notePeak(t, 0)

	var aranges map[uint64][][2]uint64
	if s := dwarfSection(src, "aranges"); s != nil {
		// Best effort: a unit without a set is indexed by its DIE.
		data, err := sectionData(s, maxSectionBytes)
		if err == nil {
			aranges, _ = parseAranges(data, src.ByteOrder)
		}
		c.limits.Record(name, err)
	}
	err = t.index(aranges, overlapsText, want, c)
	if errors.Is(err, errWholeFile) {
		// Read as a stream until a unit turned out to need others:
		// read .debug_info whole, and index it again from it.
		t.holdInfo = true
		if t.sec.info, err = t.sec.readSection(info); err != nil {
			return nil, fmt.Errorf("load DWARF of %s: read %s: %w", name, info.Name, err)
		}
		c.stats.DWARFInfoRead += int64(len(t.sec.info))
		c.notePeak(t, 0)
		err = t.index(aranges, overlapsText, want, c)
	}
	if err != nil {
		return nil, fmt.Errorf("DWARF of %s: %w", name, err)
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

// errWholeFile stops an index read as a stream: a unit may refer to
// others, and .debug_info must be held whole.
var errWholeFile = errors.New("units refer to each other")

// index reads .debug_info from its start, anew: where each unit is, and
// its address ranges, from aranges, else from its top DIE. It decodes the
// units that hold the addresses of want (sorted) on the way, while their
// bytes are at hand; with .debug_info held whole, after it, when it is
// known whether units refer to each other. Read as a stream, it stops with
// errWholeFile at the first unit whose abbreviations may refer to others.
func (t *dwarfTables) index(aranges map[uint64][][2]uint64, overlapsText func(lo, hi uint64) bool, want []uint64, c *Cache) error {
	t.units, t.ranges, t.always, t.decoded = nil, nil, nil, 0
	t.wholeFile, t.abbrevBytes = false, 0
	ur := t.openInfo(c)
	var buf unitBuf
	defer buf.free()
	var (
		tables   = make(map[uint64]bool) // abbreviation tables scanned
		pending  []int32                 // units of want, held whole: decoded after
		tooLarge int
	)
	for {
		h, ok, err := ur.next()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		if !tables[h.abbrev] {
			tables[h.abbrev] = true
			refsOut, size := scanAbbrevs(t.sec.abbrev, []uint64{h.abbrev})
			t.abbrevBytes += size
			if refsOut && t.sec.info == nil {
				return errWholeFile
			}
			t.wholeFile = t.wholeFile || refsOut
		}
		if h.typeUnit {
			continue
		}
		if t.sec.info == nil && h.end-h.off > maxUnitBytes {
			tooLarge++
			continue
		}
		if len(t.units) >= maxUnits {
			return fmt.Errorf("unit at offset %#x: more than %d units", h.off, maxUnits)
		}
		u := int32(len(t.units))
		t.units = append(t.units, dwarfUnit{hdr: h.off, end: h.end, die: h.die})
		var b []byte // the unit's bytes, once read
		rs, ok := aranges[h.off]
		always := false
		if !ok {
			if b, err = t.unitBytes(ur, &buf, c); err != nil {
				return err
			}
			d, off, err := t.sec.unitData(b, h.off, h.die)
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
				always = true
			}
		}
		first := len(t.ranges)
		for _, rg := range rs {
			if rg[0] < rg[1] && overlapsText(rg[0], rg[1]) {
				t.ranges = append(t.ranges, unitRange{lo: rg[0], hi: rg[1], unit: u})
			}
		}
		if len(want) == 0 || !(always || holdsAny(t.ranges[first:], want)) {
			continue
		}
		if t.sec.info != nil {
			pending = append(pending, u)
			continue
		}
		if b == nil {
			if b, err = t.unitBytes(ur, &buf, c); err != nil {
				return err
			}
		}
		t.decodeBytes(u, b, c)
	}
	c.stats.DWARFUnitsTooLarge += tooLarge
	if t.wholeFile {
		var err error
		if t.whole, err = t.sec.data(t.sec.info); err != nil {
			return err
		}
	}
	t.decodeUnits(pending, c)
	return nil
}

// holdsAny reports whether an address of want (sorted) is in one of rs,
// or at its end: the units lookup consults for it.
func holdsAny(rs []unitRange, want []uint64) bool {
	for _, r := range rs {
		i, _ := slices.BinarySearch(want, r.lo)
		if i < len(want) && want[i] <= r.hi {
			return true
		}
	}
	return false
}

// openInfo returns a reader of the units of .debug_info from its start:
// of sec.info when it is held, else of the section.
func (t *dwarfTables) openInfo(c *Cache) *unitReader {
	ur := &unitReader{bo: t.src.ByteOrder, size: t.infoSize}
	switch {
	case t.sec != nil && t.sec.info != nil:
		br := bytes.NewReader(t.sec.info)
		ur.r, ur.seek, ur.size = br, br, uint64(len(t.sec.info))
	case t.infoAt != nil:
		sr := io.NewSectionReader(t.infoAt, 0, int64(t.infoSize))
		ur.r, ur.seek, ur.count = sr, sr, &c.stats.DWARFInfoRead
	default:
		ur.r, ur.count = t.info.Open(), &c.stats.DWARFInfoRead
	}
	return ur
}

// unitBytes returns the bytes of the unit whose header ur just read: in
// sec.info when it is held, else read into buf.
func (t *dwarfTables) unitBytes(ur *unitReader, buf *unitBuf, c *Cache) ([]byte, error) {
	if info := t.sec.info; info != nil {
		return info[ur.cur.off:ur.cur.end], nil
	}
	b, err := ur.unit(buf)
	c.notePeak(t, buf.held())
	return b, err
}

// dwarfSection returns the section .debug_NAME of f, or its compressed
// .zdebug_NAME, or nil.
func dwarfSection(f *elf.File, name string) *elf.Section {
	if s := f.Section(".debug_" + name); s != nil {
		return s
	}
	return f.Section(".zdebug_" + name)
}

// loadSections reads and decompresses the sections of dwarfSections, with
// .debug_info only if withInfo. Unlike (*elf.File).DWARF it applies no
// relocations: executables and shared libraries have none against DWARF,
// and relocatable objects are never mapped.
func loadSections(f *elf.File, withInfo bool) (sec *dwarfSections, err error) {
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
		if x.name == "info" && !withInfo {
			continue
		}
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

// unitData returns a dwarf.Data of one unit, b its bytes of .debug_info
// from its header at hdr, and the offset in it of its top DIE, at die in
// .debug_info.
func (s *dwarfSections) unitData(b []byte, hdr uint64, die dwarf.Offset) (*dwarf.Data, dwarf.Offset, error) {
	d, err := s.data(b)
	if err != nil {
		return nil, 0, fmt.Errorf("unit at offset %#x: %w", hdr, err)
	}
	// Offsets in d count from the unit's header.
	return d, die - dwarf.Offset(hdr), nil
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
		sec, err := loadSections(t.src, t.holdInfo)
		var whole *dwarf.Data
		if err == nil && t.wholeFile {
			if whole, err = sec.data(sec.info); err != nil {
				sec.free()
			}
		}
		if err != nil {
			t.loadErr = fmt.Errorf("load DWARF of %s again: %w", t.name, err)
			c.limits.Record(t.name, t.loadErr)
			return nil, t.loadErr
		}
		c.stats.DWARFLoads++
		c.stats.DWARFInfoRead += int64(len(sec.info))
		t.sec, t.whole = sec, whole
		c.notePeak(t, 0)
	}
	t.lastUse = c.trims
	return t.sec, nil
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
// abbreviation tables of a dwarf.Data of the whole file. The bytes of a
// unit read to decode it are let go before decoding returns: they count
// in Stats.DWARFPeakBytes only.
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

// unitTables returns the tables of unit u, decoding it on first use, by
// itself: for a compressed .debug_info, a pass over the section up to it
// (Stats.DWARFUnprepared). It returns nil when the sections could not be
// loaded again.
func (t *dwarfTables) unitTables(u int32, c *Cache) *unitTables {
	if ut := t.units[u].tables; ut != nil {
		return ut
	}
	t.decodeUnits([]int32{u}, c)
	ut := t.units[u].tables
	if ut != nil {
		c.stats.DWARFUnprepared++
	}
	return ut
}

// prepare decodes the units us (in any order, repeated) that are not yet
// decoded: those of a compressed .debug_info in one pass over it.
func (t *dwarfTables) prepare(us []int32, c *Cache) {
	us = slices.DeleteFunc(us, func(u int32) bool { return t.units[u].tables != nil })
	slices.Sort(us)
	t.decodeUnits(slices.Compact(us), c)
}

// decodeUnits decodes the units us, not yet decoded and in the order of
// .debug_info: each from the dwarf.Data of the whole file, or from its
// bytes, sliced from .debug_info held whole, read at its offset, or read
// on one pass over a compressed section, one unit's bytes at a time.
// Best effort, as for the whole file before: what was read of a damaged
// unit answers, and it is not decoded again.
func (t *dwarfTables) decodeUnits(us []int32, c *Cache) {
	if len(us) == 0 {
		return
	}
	sec, err := t.sections(c)
	if err != nil {
		return
	}
	switch {
	case t.wholeFile:
		for _, u := range us {
			t.decode(u, t.whole, t.units[u].die, c)
		}
		return
	case sec.info != nil:
		for _, u := range us {
			un := &t.units[u]
			if un.end > uint64(len(sec.info)) {
				t.decode(u, nil, 0, c) // the file changed since the parse
				continue
			}
			t.decodeBytes(u, sec.info[un.hdr:un.end], c)
		}
		return
	}
	var (
		buf unitBuf
		ur  *unitReader
	)
	defer buf.free()
	if t.infoAt == nil {
		ur = t.openInfo(c)
	}
	for _, u := range us {
		un := &t.units[u]
		var b []byte
		if ur != nil {
			b, err = ur.read(un.hdr, un.end, &buf)
		} else if b, err = buf.get(un.end - un.hdr); err == nil {
			var n int
			n, err = t.infoAt.ReadAt(b, int64(un.hdr))
			c.stats.DWARFInfoRead += int64(n)
		}
		c.notePeak(t, buf.held())
		if err != nil {
			// A stream that failed fails for the units after it too.
			t.decode(u, nil, 0, c)
			continue
		}
		t.decodeBytes(u, b, c)
	}
}

// decodeBytes decodes unit u from b, its bytes of .debug_info.
func (t *dwarfTables) decodeBytes(u int32, b []byte, c *Cache) {
	un := &t.units[u]
	d, off, err := t.sec.unitData(b, un.hdr, un.die)
	if err != nil {
		d = nil
	}
	t.decode(u, d, off, c)
}

// decode decodes unit u, its top DIE at off in d; with no d, as a unit
// of nothing.
func (t *dwarfTables) decode(u int32, d *dwarf.Data, off dwarf.Offset, c *Cache) {
	ut := &unitTables{}
	if d != nil {
		var (
			tooDeep int
			err     error
		)
		ut, tooDeep, err = decodeUnit(d, off, t.inText, min(maxUnitLineRows, maxLineRows-t.lineRows))
		if ut.lines != nil {
			t.lineRows += len(ut.lines.rows)
		}
		c.limits.Record(t.name, err)
		c.stats.DWARFTooDeep += tooDeep
		if tooDeep > 0 {
			c.limits.Add(limits.DWARFDepth, t.name, int64(tooDeep),
				limits.Errorf(limits.DWARFDepth, "unit at offset %#x: %d DIE subtrees nested deeper than %d levels", t.units[u].hdr, tooDeep, maxDIEDepth))
		}
	}
	c.stats.DWARFUnitsDecoded++
	t.units[u].tables = ut
	var sz sizer
	sz.add(reflect.ValueOf(ut))
	t.decoded += sz.total()
}

// unitsAt appends to units those that lookup consults for addr, each
// once: those with a range that holds addr or ends at it, and those of
// unknown extent.
func (t *dwarfTables) unitsAt(addr uint64, units []int32) []int32 {
	n := len(units)
	i := searchRanges(t.ranges, addr)
	for ; i >= 0 && t.maxHi[i] >= addr; i-- {
		if r := t.ranges[i]; addr <= r.hi && !slices.Contains(units[n:], r.unit) {
			units = append(units, r.unit)
		}
	}
	for _, u := range t.always {
		if !slices.Contains(units[n:], u) {
			units = append(units, u)
		}
	}
	return units
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
	var cands [8]int32
	units := t.unitsAt(addr, cands[:0])
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

// decodeUnit reads the line program, at most maxRows rows of it, and the
// functions of the unit whose top DIE is at off. It returns what it could
// read, how many DIE subtrees it skipped for nesting deeper than
// maxDIEDepth, and the errors met.
func decodeUnit(d *dwarf.Data, off dwarf.Offset, inText func(uint64) bool, maxRows int) (ut *unitTables, tooDeep int, err error) {
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
	files, err := lt.addUnit(d, e, intern, inText, maxRows)
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
