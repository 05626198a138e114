package symbolize

// The eager parse of DWARF as it was before units were decoded lazily
// (commit 3178210: lines.go and dwarf_inline.go, names prefixed with
// "eager"), kept unchanged as the reference that TestLazyDWARFMatchesEager
// holds the lazy tables to. Do not fix it: it is what the lazy tables must
// answer.

import (
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
)

// eagerLineRow is one row of the merged DWARF line tables: from addr up to the
// next row, code comes from files[file]:line. A row with file eagerEndOfSequence
// ends a sequence: no line information up to the next row.
type eagerLineRow struct {
	addr uint64
	file uint32
	line uint32
}

const eagerEndOfSequence = ^uint32(0)

// eagerLineTable is the DWARF line tables of all compilation units of a binary,
// merged and sorted by address. Functions and inlined calls live in
// .debug_info: see eagerFuncTable.
type eagerLineTable struct {
	rows  []eagerLineRow
	files []string
}

// newEagerDWARFTables reads .debug_line and .debug_info of every compilation unit
// of d: the line table, and the functions with the calls inlined into them.
// Code outside the executable PT_LOAD segments (functions dropped by the
// linker, left at address 0) is skipped. Either table may be nil.
func newEagerDWARFTables(d *dwarf.Data, loads []elf.ProgHeader) (*eagerLineTable, *eagerFuncTable, error) {
	inText := func(addr uint64) bool {
		for _, p := range loads {
			if p.Flags&elf.PF_X != 0 && p.Vaddr <= addr && addr < p.Vaddr+p.Memsz {
				return true
			}
		}
		return false
	}

	t := &eagerLineTable{}
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
	fb := newEagerFuncBuilder(d, inText)

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
	slices.SortStableFunc(t.rows, func(a, b eagerLineRow) int {
		switch {
		case a.addr < b.addr:
			return -1
		case a.addr > b.addr:
			return 1
		case a.file == eagerEndOfSequence && b.file != eagerEndOfSequence:
			return -1
		case a.file != eagerEndOfSequence && b.file == eagerEndOfSequence:
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
func (t *eagerLineTable) addUnit(d *dwarf.Data, cu *dwarf.Entry, intern func(*dwarf.LineFile) uint32, inText func(uint64) bool) ([]uint32, error) {
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
				files[i] = eagerNoFile
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
				t.rows = append(t.rows, eagerLineRow{addr: e.Address, file: eagerEndOfSequence})
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
		t.rows = append(t.rows, eagerLineRow{addr: e.Address, file: lastIdx, line: uint32(max(e.Line, 0))})
	}
}

// lookup returns the file and line of addr, or "", 0.
func (t *eagerLineTable) lookup(addr uint64) (string, int) {
	i := sort.Search(len(t.rows), func(i int) bool { return t.rows[i].addr > addr }) - 1
	if i < 0 {
		return "", 0
	}
	r := t.rows[i]
	if r.file == eagerEndOfSequence {
		return "", 0
	}
	return t.files[r.file], int(r.line)
}

// eagerFuncInfo is a function as DWARF names it, shared by its concrete instance
// and all the places it was inlined into.
type eagerFuncInfo struct {
	name     string // DW_AT_name
	linkage  string // DW_AT_linkage_name (mangled), "" if none
	declLine int    // DW_AT_decl_line, 0 if none

	display string // demangled, filled on first use
	shown   bool
}

// systemName is the linkage name, else the plain name.
func (f *eagerFuncInfo) systemName() string {
	if f.linkage != "" {
		return f.linkage
	}
	return f.name
}

// displayName is the demangled linkage name, else the plain name: addr2line
// prefers the linkage name too, and it is the qualified one for C++ and Rust.
func (f *eagerFuncInfo) displayName() string {
	if !f.shown {
		f.shown = true
		f.display = f.name
		if f.linkage != "" {
			f.display = demangleName(f.linkage)
		}
	}
	return f.display
}

// scope is one instance of a function in the code: a concrete subprogram
// (parent -1), or an inlined call (DW_TAG_inlined_subroutine) with the scope
// it was inlined into as parent.
type eagerScope struct {
	fn       int32 // in eagerFuncTable.funcs
	parent   int32
	depth    int32  // 0 for a concrete subprogram
	callFile uint32 // inlined scopes: the call site, in eagerLineTable.files
	callLine uint32
	// Concrete scopes: the ranges of the calls inlined into them are
	// eagerFuncTable.inl[inlFirst:inlEnd].
	inlFirst, inlEnd int32
	unit             uint32 // concrete scopes: DW_AT_name of the unit, in eagerLineTable.files
}

// eagerScopeRange is one address range [lo, hi) of a scope.
type eagerScopeRange struct {
	lo, hi uint64
	scope  int32
}

// eagerFuncTable is the functions of the DWARF .debug_info of a binary: the
// ranges of the concrete subprograms, and inside each the tree of calls
// inlined into it.
type eagerFuncTable struct {
	funcs  []eagerFuncInfo
	scopes []eagerScope
	top    []eagerScopeRange // ranges of concrete subprograms, sorted by lo
	maxHi  []uint64          // maxHi[i] is the largest hi of top[:i+1]
	inl    []eagerScopeRange
	files  []string // eagerLineTable.files: call files index it
}

// lookup returns the scopes that hold addr, innermost first, ending with the
// concrete subprogram; nil when no subprogram holds addr.
func (t *eagerFuncTable) lookup(addr uint64) []int32 {
	i := sort.Search(len(t.top), func(i int) bool { return t.top[i].lo > addr }) - 1
	// Subprograms rarely overlap (GNU C nested functions): walk back only
	// while an earlier range may still reach addr, and take the smallest.
	best, bestSize := int32(-1), uint64(0)
	for ; i >= 0 && t.maxHi[i] > addr; i-- {
		r := t.top[i]
		if addr < r.hi && (best < 0 || r.hi-r.lo < bestSize) {
			best, bestSize = r.scope, r.hi-r.lo
		}
	}
	if best < 0 {
		return nil
	}
	// The deepest inlined call that holds addr; inlined ranges nest, so its
	// parents hold addr too.
	inner, depth := best, int32(0)
	c := &t.scopes[best]
	for _, r := range t.inl[c.inlFirst:c.inlEnd] {
		if r.lo <= addr && addr < r.hi && t.scopes[r.scope].depth > depth {
			inner, depth = r.scope, t.scopes[r.scope].depth
		}
	}
	chain := make([]int32, 0, depth+1)
	for s := inner; s >= 0; s = t.scopes[s].parent {
		chain = append(chain, s)
	}
	return chain
}

// eagerFuncBuilder collects a eagerFuncTable while eagerLineTable reads the units.
type eagerFuncBuilder struct {
	d        *dwarf.Data
	t        *eagerFuncTable
	unitName uint32 // of the unit being read
	inText   func(uint64) bool
	ref      *dwarf.Reader                   // for DW_AT_abstract_origin and DW_AT_specification
	attrs    map[dwarf.Offset]eagerFuncAttrs // of referenced entries
	index    map[eagerFuncAttrs]int32
}

// eagerFuncAttrs is what names a function, merged along its origins.
type eagerFuncAttrs struct {
	name, linkage string
	declLine      int
}

func newEagerFuncBuilder(d *dwarf.Data, inText func(uint64) bool) *eagerFuncBuilder {
	return &eagerFuncBuilder{
		d:      d,
		t:      &eagerFuncTable{},
		inText: inText,
		ref:    d.Reader(),
		attrs:  make(map[dwarf.Offset]eagerFuncAttrs),
		index:  make(map[eagerFuncAttrs]int32),
	}
}

// unit reads the children of a compilation unit; files maps the unit's file
// indexes (DW_AT_call_file) to eagerLineTable.files.
func (b *eagerFuncBuilder) unit(r *dwarf.Reader, files []uint32, unitName uint32) error {
	b.unitName = unitName
	return b.walk(r, files, -1, nil)
}

// walk reads entries up to the end of the current list of children. cur is
// the scope they belong to (-1 outside functions); inl collects the inlined
// ranges of the enclosing concrete subprogram.
func (b *eagerFuncBuilder) walk(r *dwarf.Reader, files []uint32, cur int32, inl *[]eagerScopeRange) error {
	for {
		e, err := r.Next()
		if err != nil {
			return err
		}
		if e == nil || e.Tag == 0 {
			return nil
		}
		switch e.Tag {
		case dwarf.TagSubprogram:
			if err := b.subprogram(r, e, files); err != nil {
				return err
			}
		case dwarf.TagInlinedSubroutine:
			if cur < 0 {
				r.SkipChildren()
				continue
			}
			s := b.newScope(e, cur)
			sc := &b.t.scopes[s]
			if f, ok := e.Val(dwarf.AttrCallFile).(int64); ok && f >= 0 && int(f) < len(files) {
				sc.callFile = files[f]
			} else {
				sc.callFile = eagerNoFile
			}
			if l, ok := e.Val(dwarf.AttrCallLine).(int64); ok && l > 0 {
				sc.callLine = uint32(l)
			}
			if rs, err := b.d.Ranges(e); err == nil {
				for _, rg := range rs {
					if rg[0] < rg[1] && b.inText(rg[0]) {
						*inl = append(*inl, eagerScopeRange{lo: rg[0], hi: rg[1], scope: s})
					}
				}
			}
			if e.Children {
				if err := b.walk(r, files, s, inl); err != nil {
					return err
				}
			}
		case dwarf.TagLexDwarfBlock, dwarf.TagTryDwarfBlock, dwarf.TagCatchDwarfBlock,
			dwarf.TagNamespace, dwarf.TagClassType, dwarf.TagStructType, dwarf.TagUnionType, dwarf.TagModule:
			// Inlined calls sit in lexical blocks; C++ and Rust define
			// functions inside namespaces and types.
			if e.Children {
				if err := b.walk(r, files, cur, inl); err != nil {
					return err
				}
			}
		default:
			if e.Children {
				r.SkipChildren()
			}
		}
	}
}

// subprogram adds e if it has code (declarations and abstract instances of
// inline functions have none: they are only referenced).
func (b *eagerFuncBuilder) subprogram(r *dwarf.Reader, e *dwarf.Entry, files []uint32) error {
	rs, err := b.d.Ranges(e)
	var ranges [][2]uint64
	if err == nil {
		for _, rg := range rs {
			if rg[0] < rg[1] && b.inText(rg[0]) {
				ranges = append(ranges, rg)
			}
		}
	}
	if len(ranges) == 0 {
		if e.Children {
			// A nested function may still have code.
			return b.walk(r, files, -1, nil)
		}
		return nil
	}
	s := b.newScope(e, -1)
	b.t.scopes[s].unit = b.unitName
	for _, rg := range ranges {
		b.t.top = append(b.t.top, eagerScopeRange{lo: rg[0], hi: rg[1], scope: s})
	}
	var inl []eagerScopeRange
	if e.Children {
		if err := b.walk(r, files, s, &inl); err != nil {
			return err
		}
	}
	b.t.scopes[s].inlFirst = int32(len(b.t.inl))
	b.t.inl = append(b.t.inl, inl...)
	b.t.scopes[s].inlEnd = int32(len(b.t.inl))
	return nil
}

// eagerNoFile marks an unknown call file.
const eagerNoFile = ^uint32(0)

func (b *eagerFuncBuilder) newScope(e *dwarf.Entry, parent int32) int32 {
	a := b.attrsOf(e, 0)
	fn, ok := b.index[a]
	if !ok {
		fn = int32(len(b.t.funcs))
		b.t.funcs = append(b.t.funcs, eagerFuncInfo{name: a.name, linkage: a.linkage, declLine: a.declLine})
		b.index[a] = fn
	}
	sc := eagerScope{fn: fn, parent: parent, callFile: eagerNoFile}
	if parent >= 0 {
		sc.depth = b.t.scopes[parent].depth + 1
	}
	b.t.scopes = append(b.t.scopes, sc)
	return int32(len(b.t.scopes) - 1)
}

// attrsOf returns the name attributes of e, completed from the entries its
// DW_AT_abstract_origin or DW_AT_specification refers to.
func (b *eagerFuncBuilder) attrsOf(e *dwarf.Entry, depth int) eagerFuncAttrs {
	var a eagerFuncAttrs
	a.name, _ = e.Val(dwarf.AttrName).(string)
	a.linkage, _ = e.Val(dwarf.AttrLinkageName).(string)
	if a.linkage == "" {
		a.linkage, _ = e.Val(eagerAttrMIPSLinkageName).(string)
	}
	if l, ok := e.Val(dwarf.AttrDeclLine).(int64); ok && l > 0 {
		a.declLine = int(l)
	}
	if (a.name != "" && a.linkage != "" && a.declLine != 0) || depth >= 4 {
		return a
	}
	for _, at := range []dwarf.Attr{dwarf.AttrAbstractOrigin, dwarf.AttrSpecification} {
		off, ok := e.Val(at).(dwarf.Offset)
		if !ok {
			continue
		}
		o, ok := b.attrs[off]
		if !ok {
			b.ref.Seek(off)
			oe, err := b.ref.Next()
			if err != nil || oe == nil {
				continue
			}
			o = b.attrsOf(oe, depth+1)
			b.attrs[off] = o
		}
		if a.name == "" {
			a.name = o.name
		}
		if a.linkage == "" {
			a.linkage = o.linkage
		}
		if a.declLine == 0 {
			a.declLine = o.declLine
		}
		break
	}
	return a
}

// finish sorts the ranges of concrete subprograms.
func (b *eagerFuncBuilder) finish() *eagerFuncTable {
	t := b.t
	if len(t.top) == 0 {
		return nil
	}
	slices.SortFunc(t.top, func(x, y eagerScopeRange) int {
		switch {
		case x.lo < y.lo:
			return -1
		case x.lo > y.lo:
			return 1
		}
		return 0
	})
	t.maxHi = make([]uint64, len(t.top))
	var m uint64
	for i, r := range t.top {
		m = max(m, r.hi)
		t.maxHi[i] = m
	}
	return t
}

// eagerAttrMIPSLinkageName is DW_AT_MIPS_linkage_name, which older compilers
// emit for DW_AT_linkage_name.
const eagerAttrMIPSLinkageName dwarf.Attr = 0x2007

// frames returns the frames of chain (from lookup), innermost first: the
// innermost function at file:line, then each caller at the line it calls
// from. sym, the ELF symbol at the address (nil if none), names a concrete
// subprogram DWARF leaves unnamed.
func (t *eagerFuncTable) frames(chain []int32, file string, line int, sym *symbol) []Frame {
	frames := make([]Frame, len(chain))
	for i, s := range chain {
		sc := &t.scopes[s]
		fn := &t.funcs[sc.fn]
		f := Frame{Function: fn.displayName(), SystemName: fn.systemName(), File: file, Line: line, StartLine: fn.declLine}
		if f.SystemName == "" && sym != nil {
			f.Function, f.SystemName = demangleName(sym.name), sym.name
		}
		if f.File == "" && f.Line == 0 && i == 0 {
			// No line row: like addr2line, name the unit at least.
			u := &t.scopes[chain[len(chain)-1]]
			if int(u.unit) < len(t.files) {
				f.File = t.files[u.unit]
			}
		}
		frames[i] = f
		// The caller is at this call site.
		file, line = "", int(sc.callLine)
		if sc.callFile != eagerNoFile && int(sc.callFile) < len(t.files) {
			file = t.files[sc.callFile]
		}
	}
	return frames
}
