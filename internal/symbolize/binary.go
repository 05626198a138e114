package symbolize

import (
	"bytes"
	"container/list"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/perfprof/perfprof/internal/limits"
	"github.com/perfprof/perfprof/internal/unwind"
)

// maxFramesPerBinary bounds the per-binary cache of resolved addresses. When
// it is full it is cleared: hot addresses come back at once, and a clear is
// cheaper than keeping recency per address.
const maxFramesPerBinary = 1 << 16

// fileKey identifies a file when it has no build id.
type fileKey struct {
	dev, inode uint64
	path       string
	size       int64
	mtime      int64 // nanoseconds
}

// An objfile is one executable file (or vDSO image) and, once parsed, its
// symbol and line tables.
type objfile struct {
	name    string // a path it was opened by, for errors
	buildID string
	keys    []fileKey     // file identities that resolve to this binary
	elem    *list.Element // in Cache.lru
	evicted bool          // dropped from the cache; holders must re-acquire

	// Until parsed: the open file. After: nil (dwarf holds the file its
	// DWARF is read from).
	r      io.ReaderAt
	closer io.Closer
	ef     *elf.File

	loads []elf.ProgHeader // PT_LOAD headers, kept for address translation

	parsed   bool
	parseErr error
	syms     *symtab       // ELF symbols, nil if none
	dwarf    *dwarfTables  // DWARF lines, functions and inlined calls, nil if none
	gotab    *goTable      // Go pcln tables, nil if not Go
	unwind   *unwind.Table // .eh_frame compiled (Options.UnwindTables), nil if none
	// unwindRead: unwind was read (by loadUnwind or parse), so a
	// nil unwind means the binary has none.
	unwindRead bool

	// Where the binary was last seen mapped, to find its separate debug
	// file when it is parsed: a process (0 if none) and the path it maps.
	pid  int
	path string

	frames map[uint64][]Frame // ELF vaddr → frames; nil entries for misses
	// framesBytes estimates what frames holds (see Stats.BytesHeld),
	// kept as it changes: Stats and Trim read it every report and every
	// second, and walking 64 Ki entries each time cost more than lookups.
	framesBytes int64
}

// openELF reads the ELF headers and the build id of r. It does not parse
// symbols: that happens on the first lookup, in parse.
func openELF(name string, r io.ReaderAt) (b *objfile, err error) {
	defer func() {
		if p := recover(); p != nil {
			b, err = nil, fmt.Errorf("read ELF headers of %s: panic: %v", name, p)
		}
	}()
	ef, err := elf.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("read ELF headers of %s: %w", name, err)
	}
	b = &objfile{name: name, r: r, ef: ef, buildID: buildID(ef), loads: loadHeaders(ef)}
	return b, nil
}

// loadHeaders returns the PT_LOAD headers of ef.
func loadHeaders(ef *elf.File) []elf.ProgHeader {
	var loads []elf.ProgHeader
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			loads = append(loads, p.ProgHeader)
		}
	}
	return loads
}

// seenAt records that process pid maps b at path.
func (b *objfile) seenAt(pid int, path string) {
	b.pid, b.path = pid, path
}

// release drops the files and tables; a binary is released when evicted.
func (b *objfile) release() error {
	var errs []error
	if b.closer != nil {
		errs = append(errs, b.closer.Close())
	}
	if b.dwarf != nil {
		errs = append(errs, b.dwarf.release())
	}
	*b = objfile{name: b.name, buildID: b.buildID, evicted: true}
	return errors.Join(errs...)
}

// bias returns delta such that, for an address pc in m, pc+delta is the ELF
// virtual address: vaddr = pc - m.Start + m.Offset - seg.Off + seg.Vaddr, with
// seg the PT_LOAD header that holds m.Offset. The kernel maps segments from a
// page-aligned offset, so seg.Off is rounded down to a page for the test. When
// two segments share that page, the executable one wins.
func (b *objfile) bias(m *Mapping) (delta uint64, ok bool) {
	const pageMask = 4096 - 1
	var seg *elf.ProgHeader
	for i := range b.loads {
		p := &b.loads[i]
		if p.Off&^pageMask <= m.Offset && m.Offset < p.Off+p.Filesz {
			if seg == nil || (seg.Flags&elf.PF_X == 0 && p.Flags&elf.PF_X != 0) {
				seg = p
			}
		}
	}
	if seg == nil {
		return 0, false
	}
	return m.Offset - seg.Off + seg.Vaddr - m.Start, true
}

// lookup resolves an ELF virtual address. The returned slice is shared: it
// must not be modified.
func (b *objfile) lookup(vaddr uint64, c *Cache) []Frame {
	if fr, ok := b.frames[vaddr]; ok {
		c.stats.LookupsCached++
		return fr
	}
	b.ensureParsed([]uint64{vaddr}, c)
	if b.parseErr != nil {
		return nil
	}
	c.stats.LookupsResolved++
	fr := b.resolve(vaddr, c)
	if len(b.frames) >= maxFramesPerBinary {
		clear(b.frames)
		b.framesBytes = 0
	}
	b.frames[vaddr] = fr
	b.framesBytes += frameEntryBytes + int64(cap(fr))*frameBytes
	return fr
}

// ensureParsed parses b if it was not yet, decoding the DWARF units of the
// addresses of want (sorted) on the way, and then bounds the cache's bytes.
func (b *objfile) ensureParsed(want []uint64, c *Cache) {
	if b.parsed {
		return
	}
	b.parse(want, c)
	c.touch(b) // the binary in use is never the one trimmed
	c.trimBytes()
}

// prepare parses b if it was not yet, and decodes the DWARF units that the
// lookups of vaddrs will read, in one pass over its .debug_info (see
// Process.Prepare). It sorts vaddrs.
func (b *objfile) prepare(vaddrs []uint64, c *Cache) {
	c.touch(b)
	slices.Sort(vaddrs)
	if !b.parsed {
		b.ensureParsed(slices.Compact(vaddrs), c) // decodes the units on its way
		return
	}
	if b.parseErr != nil || b.dwarf == nil {
		return
	}
	var units []int32
	for _, a := range vaddrs {
		units = b.dwarf.unitsAt(a, units)
	}
	b.dwarf.prepare(units, c)
}

// parse reads the symbol tables and indexes the DWARF compilation units by
// address (see dwarfTables), and closes the binary's file: after this the
// binary lives in memory, but for the file its DWARF is read from, kept
// open to decode units on demand. The units of the addresses of want
// (sorted) are decoded while the index is read: the lookups to come need
// them.
func (b *objfile) parse(want []uint64, c *Cache) {
	b.parsed = true
	c.stats.BinariesParsed++
	delete(c.tableSize, b) // it held the unwind table's size alone
	b.frames = make(map[uint64][]Frame)
	defer func() {
		if p := recover(); p != nil {
			b.parseErr = fmt.Errorf("parse %s: panic: %v", b.name, p)
		}
		b.ef, b.r = nil, nil
		if b.closer != nil {
			b.closer.Close() // read-only file: nothing to report
			b.closer = nil
		}
	}()
	ef := b.ef
	if ef == nil {
		b.parseErr = fmt.Errorf("parse %s: no ELF file", b.name)
		return
	}

	// A stripped binary may have its symbols and DWARF in a separate debug
	// file. It has the same virtual addresses: only the tables come from it,
	// the segments (b.loads) stay those of the binary.
	var (
		dbg       *elf.File
		dbgCloser io.Closer
	)
	if !isGo(ef) && needsDebugFile(ef) {
		if df, f := openDebugFile(ef, b.buildID, b.pid, b.path, c.limits); df != nil {
			dbg, dbgCloser = df, f
			defer func() {
				if dbgCloser != nil {
					dbgCloser.Close() // read-only file: nothing to report
				}
			}()
		}
	}

	symbols := func(f *elf.File, typ elf.SectionType) ([]elf.Symbol, error) {
		if err := symbolsFit(f, typ); err != nil {
			c.limits.Record(b.name, err)
			return nil, err
		}
		if typ == elf.SHT_DYNSYM {
			return f.DynamicSymbols()
		}
		return f.Symbols()
	}
	elfSyms, err := symbols(ef, elf.SHT_SYMTAB)
	if (err != nil || len(elfSyms) == 0) && dbg != nil {
		elfSyms, err = symbols(dbg, elf.SHT_SYMTAB)
	}
	if err != nil || len(elfSyms) == 0 {
		elfSyms, _ = symbols(ef, elf.SHT_DYNSYM)
	}
	b.syms = newSymtab(elfSyms, b.loads)

	if isGo(ef) {
		// A broken pcln table leaves the ELF symbols to answer.
		b.gotab, err = newGoTable(ef, elfSyms)
		c.limits.Record(b.name, err)
	}
	dwarfFile, dwarfCloser := ef, &b.closer
	if dbg != nil && !hasDWARF(ef) && hasDWARF(dbg) {
		dwarfFile, dwarfCloser = dbg, &dbgCloser
	}
	if b.gotab == nil && hasDWARFLines(dwarfFile) {
		// Best effort: without DWARF, the ELF symbols answer. The tables
		// take the file over: it is not closed here.
		t, err := newDWARFTables(b.name, dwarfFile, *dwarfCloser, b.loads, want, c)
		if err == nil {
			b.dwarf, *dwarfCloser = t, nil
		}
		c.limits.Record(b.name, err)
	}
	if c.unwind && !b.unwindRead {
		b.unwind, err = newUnwindTable(ef) // best effort: without it, leaves stay unknown
		c.limits.Record(b.name, err)
		b.unwindRead = true
	}
	if b.syms == nil && b.gotab == nil && b.dwarf == nil {
		b.parseErr = fmt.Errorf("parse %s: no symbols", b.name)
	}
}

// loadUnwind reads what unwinding b's code needs, without its symbols
// where it can: the compiled .eh_frame of native code (a few ms for libc,
// against ~250 ms for its symbols and lines), the whole parse for Go,
// whose pcsp tables come with its symbols.
func (b *objfile) loadUnwind(c *Cache) {
	if b.unwindRead || b.parsed {
		return
	}
	if b.ef == nil || isGo(b.ef) {
		b.parse(nil, c)
		return
	}
	func() {
		defer func() {
			if p := recover(); p != nil {
				b.unwind = nil
			}
		}()
		var err error
		b.unwind, err = newUnwindTable(b.ef) // best effort: frames fall back to the frame pointer
		c.limits.Record(b.name, err)
	}()
	b.unwindRead = true
	delete(c.tableSize, b)
}

// resolve looks vaddr up in the tables, without the cache of addresses; it
// decodes the DWARF units that hold vaddr if they were not yet.
func (b *objfile) resolve(vaddr uint64, c *Cache) (frames []Frame) {
	defer func() {
		if recover() != nil {
			frames = nil
		}
	}()
	if b.gotab != nil {
		if fr := b.gotab.lookup(vaddr); fr != nil {
			return fr
		}
	}
	var sym *symbol
	if b.syms != nil {
		if s, ok := b.syms.lookup(vaddr); ok {
			sym = &s
		}
	}
	file, line := "", 0
	if b.dwarf != nil {
		var fr []Frame
		if fr, file, line = b.dwarf.lookup(vaddr, sym, c); fr != nil {
			return fr
		}
	}
	if sym == nil {
		return nil
	}
	return []Frame{{Function: demangleName(sym.name), SystemName: sym.name, File: file, Line: line}}
}

// buildID returns the hex GNU build id of ef, else its Go build id, else "".
func buildID(ef *elf.File) string {
	const (
		ntGNUBuildID = 3 // NT_GNU_BUILD_ID in <elf.h>
		ntGoBuildID  = 4 // cmd/link/internal/ld.ELF_NOTE_GOBUILDID_TAG
	)
	if s := ef.Section(".note.gnu.build-id"); s != nil {
		if d, err := sectionData(s, maxNoteBytes); err == nil {
			if desc, ok := findNote(d, ef.ByteOrder, "GNU", ntGNUBuildID); ok {
				return hex.EncodeToString(desc)
			}
		}
	}
	// No section headers (or a renamed section): the notes are in PT_NOTE.
	for _, p := range ef.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz > maxNoteBytes {
			continue
		}
		d := make([]byte, p.Filesz)
		if _, err := p.ReadAt(d, 0); err != nil {
			continue
		}
		if desc, ok := findNote(d, ef.ByteOrder, "GNU", ntGNUBuildID); ok {
			return hex.EncodeToString(desc)
		}
	}
	if s := ef.Section(".note.go.buildid"); s != nil {
		if d, err := sectionData(s, maxNoteBytes); err == nil {
			if desc, ok := findNote(d, ef.ByteOrder, "Go", ntGoBuildID); ok {
				return string(desc)
			}
		}
	}
	return ""
}

// findNote returns the descriptor of the first note with the given owner
// name and type in d, a sequence of Elf_Nhdr {namesz, descsz, type} each
// followed by name and descriptor padded to 4 bytes (<elf.h>).
func findNote(d []byte, bo binary.ByteOrder, name string, typ uint32) ([]byte, bool) {
	for len(d) >= 12 {
		namesz, descsz, t := uint64(bo.Uint32(d)), uint64(bo.Uint32(d[4:])), bo.Uint32(d[8:])
		d = d[12:]
		nameEnd := (namesz + 3) &^ 3
		descEnd := nameEnd + (descsz+3)&^3
		if nameEnd > uint64(len(d)) || nameEnd+descsz > uint64(len(d)) {
			return nil, false
		}
		n := bytes.TrimRight(d[:namesz], "\x00")
		if t == typ && string(n) == name {
			return d[nameEnd : nameEnd+descsz], true
		}
		if descEnd > uint64(len(d)) {
			return nil, false
		}
		d = d[descEnd:]
	}
	return nil, false
}

// isGo reports whether ef is a Go binary.
func isGo(ef *elf.File) bool {
	return goPclntabSection(ef) != nil || ef.Section(".go.buildinfo") != nil
}

func hasDWARFLines(ef *elf.File) bool {
	return ef.Section(".debug_line") != nil || ef.Section(".zdebug_line") != nil
}

var errNoBinary = errors.New("no binary for mapping")

// maxNoteBytes bounds a note section read for a build id or a debug link:
// they hold a few dozen bytes.
const maxNoteBytes = 1 << 20

// sectionFits returns an error wrapping a *limits.Error if s is larger
// than max bytes: of kind CompressedSection when it is compressed (its
// header, the target's to write, says what it inflates to, and debug/elf
// inflates all of it), else FileTooLarge (a sparse file can hold a section
// of a TiB that costs its owner nothing).
func sectionFits(s *elf.Section, max uint64) error {
	s.Open() // for a .zdebug section, it reads the size
	if s.Size <= max {
		return nil
	}
	if s.Flags&elf.SHF_COMPRESSED != 0 || strings.HasPrefix(s.Name, ".zdebug") {
		return limits.Errorf(limits.CompressedSection, "%s inflates to %d bytes, more than %d", s.Name, s.Size, max)
	}
	return limits.Errorf(limits.FileTooLarge, "%s: %d bytes, more than %d", s.Name, s.Size, max)
}

// sectionData returns the (decompressed) bytes of s, if they fit in max.
func sectionData(s *elf.Section, max uint64) ([]byte, error) {
	if err := sectionFits(s, max); err != nil {
		return nil, err
	}
	return s.Data()
}

// symbolsFit returns an error wrapping a *limits.Error if the symbol table
// of type typ (SHT_SYMTAB, SHT_DYNSYM) of ef, or its strings, are larger
// than maxSectionBytes: debug/elf reads both whole.
func symbolsFit(ef *elf.File, typ elf.SectionType) error {
	for _, s := range ef.Sections {
		if s.Type != typ {
			continue
		}
		if err := sectionFits(s, maxSectionBytes); err != nil {
			return err
		}
		if int(s.Link) < len(ef.Sections) {
			return sectionFits(ef.Sections[s.Link], maxSectionBytes)
		}
		return nil
	}
	return nil
}
