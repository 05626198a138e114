package symbolize

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/perfprof/perfprof/internal/testchild"
)

// TestLazyDWARFMatchesEager resolves many addresses of binaries with DWARF
// through the lazy tables and through the eager parse they replace
// (eager_test.go), and fails on any difference in function names, inlined
// frames, files, lines or start lines: every function symbol's start,
// every line row's address, every inlined call's first and last byte, and
// the bytes of every 64th function, in a random order so that units are
// decoded out of order. libc (with its separate debug file) and the C,
// C++ and Rust test programs are read by aranges (GCC) or top DIEs
// (rustc's LLVM); the Go program's DWARF, which Go binaries otherwise
// leave to their pcln tables, has neither aranges nor per-unit abbrevs.
func TestLazyDWARFMatchesEager(t *testing.T) {
	native := buildNative(t)
	bins := []struct{ name, path string }{
		{"c-g", build(t, "c-g")},
		{"c-nopie", build(t, "c-nopie")},
		{"go", build(t, "go")},
	}
	for _, name := range []string{"c-O2-g", "c-O0-g", "cxx-O1-g", "rust"} {
		if p, ok := native[name]; ok {
			bins = append(bins, struct{ name, path string }{name, p})
		}
	}
	for _, b := range bins {
		t.Run(b.name, func(t *testing.T) { compareDWARF(t, b.path, 0) })
	}
	t.Run("libc", func(t *testing.T) {
		path, _ := libcFuncs(t)
		// Most of libc's code is inlined somewhere: hold the test to it.
		compareDWARF(t, path, 10000)
	})
	if rustSkip != "" {
		t.Log("rust: " + rustSkip)
	}
}

// compareDWARF holds the lazy tables of the DWARF of path (or of its
// separate debug file) to the eager parse, and wants at least minInlined
// addresses in inlined code.
func compareDWARF(t *testing.T, path string, minInlined int) {
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	loads := loadHeaders(ef)
	dwarfFile := ef
	if !hasDWARF(ef) {
		dbg, f := openDebugFile(ef, buildID(ef), 0, path, nil)
		if dbg == nil {
			testchild.Unavailable(t, "%s has no DWARF and no debug file (apt-get install libc6-dbg)", path)
		}
		defer f.Close()
		dwarfFile = dbg
	}
	elfSyms, err := dwarfFile.Symbols()
	if err != nil || len(elfSyms) == 0 {
		elfSyms, _ = ef.Symbols()
	}
	syms := newSymtab(elfSyms, loads)

	d, err := dwarfFile.DWARF()
	if err != nil {
		t.Fatal(err)
	}
	eagerLines, eagerFuncs, err := newEagerDWARFTables(d, loads)
	if err != nil {
		t.Fatal(err)
	}
	c := NewCache(Options{})
	lazy, err := newDWARFTables(path, dwarfFile, nil, loads, nil, c)
	if err != nil {
		t.Fatal(err)
	}

	// The addresses, without duplicates, shuffled.
	seen := make(map[uint64]bool)
	var addrs []uint64
	add := func(a uint64) {
		if !seen[a] {
			seen[a] = true
			addrs = append(addrs, a)
		}
	}
	for i, s := range elfSyms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 {
			continue
		}
		add(s.Value)
		if i%64 == 0 {
			for a := s.Value; a < s.Value+s.Size; a++ {
				add(a)
			}
		}
	}
	if eagerLines != nil {
		for _, r := range eagerLines.rows {
			add(r.addr)
		}
	}
	if eagerFuncs != nil {
		for _, r := range eagerFuncs.inl {
			add(r.lo)
			add(r.hi - 1)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	r.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })

	var inlined, named, twins, diffs int
	check := func(a uint64) {
		var sym *symbol
		if syms != nil {
			if s, ok := syms.lookup(a); ok {
				sym = &s
			}
		}
		wantFr, wantFile, wantLine := eagerLookup(eagerLines, eagerFuncs, a, sym)
		if len(wantFr) > 0 {
			named++
		}
		if len(wantFr) > 1 {
			inlined++
		}
		gotFr, gotFile, gotLine := lazy.lookup(a, sym, c)
		if !reflect.DeepEqual(gotFr, wantFr) && gotFile == wantFile && gotLine == wantLine &&
			slices.ContainsFunc(eagerTwins(eagerFuncs, a, wantFile, wantLine, sym), func(fr []Frame) bool { return reflect.DeepEqual(gotFr, fr) }) {
			twins++
			return
		}
		if !reflect.DeepEqual(gotFr, wantFr) || gotFile != wantFile || gotLine != wantLine {
			if diffs++; diffs <= 10 {
				t.Errorf("%#x:\nlazy  %s (%s:%d)\neager %s (%s:%d)", a, fmtFullFrames(gotFr), gotFile, gotLine, fmtFullFrames(wantFr), wantFile, wantLine)
			}
		}
	}
	// In chunks, as reports look addresses up: the units of a chunk are
	// decoded first (as Process.Prepare does), in one pass over a
	// compressed .debug_info; but those of the last chunk, each decoded
	// by its lookup (and a pass of its own).
	const chunk = 4096
	for start := 0; start < len(addrs); start += chunk {
		part := addrs[start:min(start+chunk, len(addrs))]
		if start+chunk < len(addrs) {
			var units []int32
			for _, a := range part {
				units = lazy.unitsAt(a, units)
			}
			lazy.prepare(units, c)
		}
		for _, a := range part {
			check(a)
		}
	}
	st := c.Stats()
	t.Logf("%d addresses, %d in functions, %d in inlined code, %d in twins; %d of %d units decoded (%d by a lookup), %d by top DIE, %d of unknown extent, whole file: %v; %d differences",
		len(addrs), named, inlined, twins, st.DWARFUnitsDecoded, len(lazy.units), st.DWARFUnprepared, countTopDIE(lazy, dwarfFile), len(lazy.always), lazy.wholeFile, diffs)
	if diffs > 0 {
		t.Errorf("%d of %d addresses differ", diffs, len(addrs))
	}
	if named == 0 || inlined < minInlined {
		t.Errorf("%d addresses in functions, %d in inlined code: want some, and %d inlined", named, inlined, minInlined)
	}
	if st.DWARFLoads != 1 || st.DWARFTooDeep != 0 {
		t.Errorf("stats: %+v", st)
	}
}

// countTopDIE returns how many units of t have no set in .debug_aranges.
func countTopDIE(t *dwarfTables, f *elf.File) int {
	var sets map[uint64][][2]uint64
	if s := dwarfSection(f, "aranges"); s != nil {
		data, _ := s.Data()
		sets, _ = parseAranges(data, f.ByteOrder)
	}
	n := 0
	for _, u := range t.units {
		if _, ok := sets[u.hdr]; !ok {
			n++
		}
	}
	return n
}

// eagerLookup is what (*objfile).resolve did with the eager tables.
func eagerLookup(lt *eagerLineTable, ft *eagerFuncTable, addr uint64, sym *symbol) ([]Frame, string, int) {
	file, line := "", 0
	if lt != nil {
		file, line = lt.lookup(addr)
	}
	if ft != nil {
		if chain := ft.lookup(addr); chain != nil {
			return ft.frames(chain, file, line, sym), file, line
		}
	}
	return nil, file, line
}

// eagerTwins returns the frames of addr by each concrete subprogram whose
// range is the one the eager lookup chooses: the smallest that holds addr,
// of those the last to start. Where several have that very range (an
// assembly function and its aliases, each a DW_TAG_subprogram), the eager
// lookup took the last in the order an unstable sort left them, which no
// rule reproduces; the lazy tables take the last in the file.
func eagerTwins(ft *eagerFuncTable, addr uint64, file string, line int, sym *symbol) [][]Frame {
	if ft == nil {
		return nil
	}
	var best []eagerScopeRange
	for _, r := range ft.top {
		if r.lo > addr || addr >= r.hi {
			continue
		}
		if len(best) > 0 && (r.hi-r.lo > best[0].hi-best[0].lo || (r.hi-r.lo == best[0].hi-best[0].lo && r.lo < best[0].lo)) {
			continue
		}
		if len(best) > 0 && (r.lo != best[0].lo || r.hi != best[0].hi) {
			best = best[:0]
		}
		best = append(best, r)
	}
	var out [][]Frame
	for _, r := range best {
		// The inlined part of eagerFuncTable.lookup.
		inner, depth := r.scope, int32(0)
		c := &ft.scopes[r.scope]
		for _, ir := range ft.inl[c.inlFirst:c.inlEnd] {
			if ir.lo <= addr && addr < ir.hi && ft.scopes[ir.scope].depth > depth {
				inner, depth = ir.scope, ft.scopes[ir.scope].depth
			}
		}
		var chain []int32
		for s := inner; s >= 0; s = ft.scopes[s].parent {
			chain = append(chain, s)
		}
		out = append(out, ft.frames(chain, file, line, sym))
	}
	return out
}

func fmtFullFrames(fs []Frame) string {
	var b strings.Builder
	for i, f := range fs {
		if i > 0 {
			b.WriteString(" <- ")
		}
		fmt.Fprintf(&b, "%s[%s]@%s:%d(start %d)", f.Function, f.SystemName, f.File, f.Line, f.StartLine)
	}
	return b.String()
}

// deepDWARF returns the sections of one DWARF 4 unit whose DIEs nest n
// deep below the unit: each a DW_TAG_lexical_block, or with variable, a
// DW_TAG_variable first and lexical blocks below it, none with a
// DW_AT_sibling. It also returns the offset of the unit's DIE.
func deepDWARF(n int, variable bool) (abbrev, info []byte, die dwarf.Offset) {
	const (
		tagCompileUnit  = 0x11
		tagLexicalBlock = 0x0b
		tagVariable     = 0x34
		childrenYes     = 1
	)
	// Abbreviations 1, 2, 3: no attributes.
	abbrev = []byte{
		1, tagCompileUnit, childrenYes, 0, 0,
		2, tagLexicalBlock, childrenYes, 0, 0,
		3, tagVariable, childrenYes, 0, 0,
		0,
	}
	var body []byte
	body = append(body, 1)
	for i := range n {
		if i == 0 && variable {
			body = append(body, 3)
		} else {
			body = append(body, 2)
		}
	}
	body = append(body, make([]byte, n+1)...)       // the ends of the lists of children
	hdr := binary.LittleEndian.AppendUint16(nil, 4) // version
	hdr = binary.LittleEndian.AppendUint32(hdr, 0)  // debug_abbrev_offset
	hdr = append(hdr, 8)                            // address_size
	info = binary.LittleEndian.AppendUint32(nil, uint32(len(hdr)+len(body)))
	info = append(append(info, hdr...), body...)
	return abbrev, info, dwarf.Offset(4 + len(hdr))
}

// TestDeepDIETree decodes units whose DIEs nest a million deep: the walk
// stops at maxDIEDepth and counts it once, skipping the rest without
// recursion (a DW_TAG_variable's subtree is skipped from the start).
func TestDeepDIETree(t *testing.T) {
	const n = 1_000_000
	for _, tc := range []struct {
		variable bool
		tooDeep  int
	}{{false, 1}, {true, 0}} {
		abbrev, info, die := deepDWARF(n, tc.variable)
		d, err := dwarf.New(abbrev, nil, nil, info, nil, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		heads, err := unitHeaders(info, binary.LittleEndian)
		if err != nil || len(heads) != 1 || heads[0].die != die {
			t.Fatalf("unitHeaders = %+v, %v; want one unit with its DIE at %#x", heads, err, die)
		}
		ut, tooDeep, err := decodeUnit(d, die, func(uint64) bool { return true }, maxUnitLineRows)
		if err != nil || tooDeep != tc.tooDeep || ut.funcs != nil || ut.lines != nil {
			t.Errorf("variable %v: decodeUnit = %+v, %d, %v; want no tables, %d too deep", tc.variable, ut, tooDeep, err, tc.tooDeep)
		}
	}
}

// unitHeaders reads the unit headers of info, as a parse reads those of a
// compressed .debug_info: through a reader that cannot seek.
func unitHeaders(info []byte, bo binary.ByteOrder) ([]unitHeader, error) {
	ur := &unitReader{r: struct{ io.Reader }{bytes.NewReader(info)}, bo: bo, size: uint64(len(info))}
	var heads []unitHeader
	for {
		h, ok, err := ur.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			return heads, nil
		}
		heads = append(heads, h)
	}
}

func TestUnitHeaders(t *testing.T) {
	bo := binary.LittleEndian
	unit := func(version uint16, unitType byte, is64 bool, body int) []byte {
		var h []byte
		h = bo.AppendUint16(h, version)
		off := func(v uint64) {
			if is64 {
				h = bo.AppendUint64(h, v)
			} else {
				h = bo.AppendUint32(h, uint32(v))
			}
		}
		if version >= 5 {
			h = append(h, unitType, 8)
			off(0x40)
			switch unitType {
			case 4, 5:
				h = bo.AppendUint64(h, 7)
			case 2, 6:
				h = bo.AppendUint64(h, 7)
				off(0)
			}
		} else {
			off(0x40)
			h = append(h, 8)
		}
		h = append(h, make([]byte, body)...)
		var u []byte
		if is64 {
			u = bo.AppendUint64(bo.AppendUint32(nil, 0xffffffff), uint64(len(h)))
		} else {
			u = bo.AppendUint32(nil, uint32(len(h)))
		}
		return append(u, h...)
	}
	var info []byte
	var want []unitHeader
	for _, u := range []struct {
		version  uint16
		unitType byte
		is64     bool
		hdr      int // bytes of header before the first DIE
	}{
		{4, 0, false, 11}, {2, 0, false, 11}, {4, 0, true, 23},
		{5, 1, false, 12}, {5, 3, false, 12}, {5, 4, false, 20}, {5, 2, false, 24}, {5, 1, true, 24},
	} {
		off := uint64(len(info))
		b := unit(u.version, u.unitType, u.is64, 3)
		want = append(want, unitHeader{off: off, end: off + uint64(len(b)), die: dwarf.Offset(off + uint64(u.hdr)), abbrev: 0x40, typeUnit: u.unitType == 2})
		info = append(info, b...)
		info = append(info, 0, 0, 0, 0) // padding: a unit of length 0
	}
	got, err := unitHeaders(info, bo)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("unitHeaders =\n%+v, %v\nwant\n%+v", got, err, want)
	}
	for i := range info {
		unitHeaders(info[:i], bo) // must not panic
	}
	if _, err := unitHeaders(unit(6, 0, false, 3), bo); err == nil {
		t.Error("read a version 6 unit")
	}
}

func TestParseAranges(t *testing.T) {
	bo := binary.LittleEndian
	set := func(unit uint32, addrSize, segSize byte, ranges ...uint64) []byte {
		b := bo.AppendUint16(nil, 2)
		b = bo.AppendUint32(b, unit)
		b = append(b, addrSize, segSize)
		for (4+len(b))%(2*int(addrSize)) != 0 {
			b = append(b, 0)
		}
		for _, r := range append(ranges, 0, 0) {
			if addrSize == 8 {
				b = bo.AppendUint64(b, r)
			} else {
				b = bo.AppendUint32(b, uint32(r))
			}
		}
		return append(bo.AppendUint32(nil, uint32(len(b))), b...)
	}
	data := slices.Concat(
		set(0, 8, 0, 0x1000, 0x100, 0x3000, 0x10),
		set(0x80, 4, 0, 0x2000, 0x20),
		set(0x100, 8, 8, 0x5000, 0x10), // a segment selector: left out
		set(0x180, 8, 0),
	)
	got, err := parseAranges(data, bo)
	want := map[uint64][][2]uint64{0: {{0x1000, 0x1100}, {0x3000, 0x3010}}, 0x80: {{0x2000, 0x2020}}, 0x180: nil}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("parseAranges = %v, %v; want %v", got, err, want)
	}
	for i := range data {
		parseAranges(data[:i], bo) // must not panic
	}
}

// TestDWARFAcrossReports looks up addresses of a binary of several
// compilation units over many simulated reports, with Trim after each:
// it is parsed once, its sections are dropped after dwarfIdleTrims reports
// that decoded nothing and read again only when a unit not yet decoded is
// needed, and every answer stays what it was.
func TestDWARFAcrossReports(t *testing.T) {
	dir := t.TempDir()
	names, srcs, mainSrc := unitSources(t, dir)
	bin := filepath.Join(dir, "units")
	if out, err := exec.Command("gcc", append([]string{"-O2", "-g", "-o", bin, mainSrc}, srcs...)...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	syms, _ := ef.Symbols()
	ef.Close()
	addr := map[string]uint64{}
	for _, s := range syms {
		if slices.Contains(names, s.Name) {
			addr[s.Name] = s.Value
		}
	}

	c := NewCache(Options{})
	defer c.Close()
	b, err := c.acquireFile(bin, bin)
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64][]Frame{}
	// lookup resolves a, an address in function n, and checks that it is
	// named as at first.
	lookup := func(n string, off uint64) {
		t.Helper()
		a := addr[n] + off
		fr := b.lookup(a, c)
		if len(fr) == 0 || fr[len(fr)-1].Function != n {
			t.Fatalf("%s+%d: %+v", n, off, fr)
		}
		if w, ok := want[a]; ok && !reflect.DeepEqual(fr, w) {
			t.Errorf("%s+%d: %+v, was %+v", n, off, fr, w)
		}
		want[a] = fr
	}
	report := func() {
		t.Helper()
		before := c.Stats().BytesHeld
		c.Trim()
		if after := c.Stats().BytesHeld; after > before {
			t.Errorf("Trim: %d bytes held, %d before", after, before)
		}
	}
	check := func(step string, loads, drops, units int, loaded bool) {
		t.Helper()
		s := c.Stats()
		if s.BinariesParsed != 1 || s.DWARFLoads != loads || s.DWARFDrops != drops || s.DWARFUnitsDecoded != units || (b.dwarf.sec != nil) != loaded {
			t.Errorf("%s: %+v, sections loaded: %v; want %d loads, %d drops, %d units, loaded: %v",
				step, s, b.dwarf.sec != nil, loads, drops, units, loaded)
		}
	}

	lookup("unit_a", 0)
	check("first lookup", 1, 0, 1, true)
	for i := range dwarfIdleTrims - 1 {
		lookup("unit_a", 0) // cached: no unit decoded
		report()
		check(fmt.Sprintf("report %d", i+1), 1, 0, 1, true)
	}
	held, sections := c.Stats().BytesHeld, b.dwarf.held()
	report()
	check("idle reports", 1, 1, 1, false)
	if s := c.Stats(); sections == 0 || held-s.BytesHeld != sections {
		t.Errorf("dropping %d bytes of sections freed %d bytes", sections, held-s.BytesHeld)
	}
	// Another address of a unit decoded: no load.
	lookup("unit_a", 1)
	report()
	check("decoded unit", 1, 1, 1, false)
	// A new unit: the sections are read again, and held again for
	// dwarfIdleTrims reports; meanwhile other units need no load.
	lookup("unit_b", 0)
	check("new unit", 2, 1, 2, true)
	report()
	lookup("unit_c", 0)
	check("third unit", 2, 1, 3, true)
	for i := range dwarfIdleTrims {
		report()
		check(fmt.Sprintf("idle report %d", i+1), 2, map[bool]int{true: 2, false: 1}[i == dwarfIdleTrims-1], 3, i < dwarfIdleTrims-1)
	}
	// Many quiet reports later, every answer is the same, and a last unit
	// loads the sections a third time.
	for range 20 {
		for _, n := range names[:3] {
			lookup(n, 0)
			lookup(n, 1)
		}
		report()
	}
	check("quiet reports", 2, 2, 3, false)
	lookup("unit_d", 0)
	check("last unit", 3, 2, 4, true)
	if fr := b.lookup(addr["unit_d"], c); !bytes.Contains([]byte(fr[len(fr)-1].File), []byte("unit_d.c")) {
		t.Errorf("unit_d: %+v", fr)
	}
}

// FuzzDWARFUnit feeds damaged DWARF through what the parse and a lookup
// read: unit headers, aranges, abbreviations, and the decoding of each unit
// (which recovers from panics in debug/dwarf: what it must not do is hang
// or overflow the stack); and a unit's bytes read as a stream are those
// in the section.
func FuzzDWARFUnit(f *testing.F) {
	abbrev, info, _ := deepDWARF(300, false)
	f.Add(abbrev, info, []byte(nil))
	ef, err := elf.Open(build(f, "c-g"))
	if err != nil {
		f.Fatal(err)
	}
	sec, err := loadSections(ef, true)
	if err != nil {
		f.Fatal(err)
	}
	aranges, _ := dwarfSection(ef, "aranges").Data()
	ef.Close()
	f.Add(sec.abbrev, sec.info, aranges)
	f.Fuzz(func(t *testing.T, abbrev, info, aranges []byte) {
		parseAranges(aranges, binary.LittleEndian)
		heads, err := unitHeaders(info, binary.LittleEndian)
		if err != nil {
			return
		}
		var offs []uint64
		for _, h := range heads {
			offs = append(offs, h.abbrev)
		}
		scanAbbrevs(abbrev, offs)
		sec := &dwarfSections{abbrev: abbrev}
		for _, h := range heads {
			d, off, err := sec.unitData(info[h.off:h.end], h.off, h.die)
			if err != nil {
				continue
			}
			decodeUnit(d, off, func(uint64) bool { return true }, maxUnitLineRows)
		}
		// Read as a stream, every other unit's bytes are the same.
		ur := &unitReader{r: struct{ io.Reader }{bytes.NewReader(info)}, bo: binary.LittleEndian, size: uint64(len(info))}
		var buf unitBuf
		defer buf.free()
		for i := 0; ; i++ {
			h, ok, err := ur.next()
			if err != nil || !ok {
				break
			}
			if i%2 == 1 {
				continue
			}
			if b, err := ur.unit(&buf); err != nil || !bytes.Equal(b, info[h.off:h.end]) {
				t.Fatalf("unit at %#x: %v; bytes differ: %v", h.off, err, err == nil)
			}
		}
	})
}

// FuzzDWARFInlineWalk feeds forged .debug_abbrev and .debug_info to the
// walk of functions, lexical blocks and inlined calls (funcBuilder), unit
// by unit as decodeUnit reads them, and names every address the tables
// hold: whatever the bytes, the walk ends without overflowing the stack,
// and the tables it builds answer without a panic.
func FuzzDWARFInlineWalk(f *testing.F) {
	abbrev, info, _ := deepDWARF(300, false)
	f.Add(abbrev, info)
	ef, err := elf.Open(buildNative(f)["c-O2-g"])
	if err != nil {
		f.Fatal(err)
	}
	sec, err := loadSections(ef, true)
	ef.Close()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sec.abbrev, sec.info)
	all := func(uint64) bool { return true }
	f.Fuzz(func(t *testing.T, abbrev, info []byte) {
		d, err := dwarf.New(abbrev, nil, nil, info, nil, nil, nil, nil)
		if err != nil {
			return
		}
		r := d.Reader()
		for range 16 {
			e, err := r.Next()
			if err != nil || e == nil {
				return
			}
			ut, _, _ := decodeUnit(d, e.Offset, all, maxUnitLineRows)
			if ft := ut.funcs; ft != nil {
				for _, rg := range ft.top {
					for _, addr := range []uint64{rg.lo, rg.hi - 1} {
						if s, _, _, ok := ft.concrete(addr); ok {
							ft.frames(ft.chain(s, addr), "", 0, nil)
						}
					}
				}
			}
			if skipChildren(r, e) != nil {
				return
			}
		}
	})
}
