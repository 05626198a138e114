package symbolize

import (
	"debug/dwarf"
	"sort"
)

// funcInfo is a function as DWARF names it, shared by its concrete instance
// and all the places it was inlined into.
type funcInfo struct {
	name     string // DW_AT_name
	linkage  string // DW_AT_linkage_name (mangled), "" if none
	declLine int    // DW_AT_decl_line, 0 if none

	display string // demangled, filled on first use
	shown   bool
}

// systemName is the linkage name, else the plain name.
func (f *funcInfo) systemName() string {
	if f.linkage != "" {
		return f.linkage
	}
	return f.name
}

// displayName is the demangled linkage name, else the plain name: addr2line
// prefers the linkage name too, and it is the qualified one for C++ and Rust.
func (f *funcInfo) displayName() string {
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
type scope struct {
	fn       int32 // in funcTable.funcs
	parent   int32
	depth    int32  // 0 for a concrete subprogram
	callFile uint32 // inlined scopes: the call site, in lineTable.files
	callLine uint32
	// Concrete scopes: the ranges of the calls inlined into them are
	// funcTable.inl[inlFirst:inlEnd].
	inlFirst, inlEnd int32
	unit             uint32 // concrete scopes: DW_AT_name of the unit, in lineTable.files
}

// scopeRange is one address range [lo, hi) of a scope.
type scopeRange struct {
	lo, hi uint64
	scope  int32
}

// funcTable is the functions of the .debug_info of one compilation unit:
// the ranges of the concrete subprograms, and inside each the tree of calls
// inlined into it.
type funcTable struct {
	funcs  []funcInfo
	scopes []scope
	top    []scopeRange // ranges of concrete subprograms, sorted by lo, stably
	maxHi  []uint64     // maxHi[i] is the largest hi of top[:i+1]
	inl    []scopeRange
	files  []string // lineTable.files: call files index it
}

// concrete returns the concrete subprogram that holds addr, and the range
// of it that does: the smallest such range (subprograms rarely overlap:
// GNU C nested functions), of those the one that starts last, of those the
// last in the unit. ok is false when no subprogram holds addr.
func (t *funcTable) concrete(addr uint64) (s int32, lo, hi uint64, ok bool) {
	i := sort.Search(len(t.top), func(i int) bool { return t.top[i].lo > addr }) - 1
	// Walk back only while an earlier range may still reach addr.
	best, bestSize := -1, uint64(0)
	for ; i >= 0 && t.maxHi[i] > addr; i-- {
		r := t.top[i]
		if addr < r.hi && (best < 0 || r.hi-r.lo < bestSize) {
			best, bestSize = i, r.hi-r.lo
		}
	}
	if best < 0 {
		return -1, 0, 0, false
	}
	r := t.top[best]
	return r.scope, r.lo, r.hi, true
}

// chain returns the scopes of concrete subprogram s that hold addr,
// innermost first, ending with s.
func (t *funcTable) chain(s int32, addr uint64) []int32 {
	// The deepest inlined call that holds addr; inlined ranges nest, so its
	// parents hold addr too.
	inner, depth := s, int32(0)
	c := &t.scopes[s]
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

// funcBuilder collects the funcTable of one unit while its line table is
// read.
type funcBuilder struct {
	d        *dwarf.Data
	t        *funcTable
	unitName uint32 // in lineTable.files
	inText   func(uint64) bool
	// typesHoldCode: the walk descends into class, structure and union
	// types (see typesHoldCode).
	typesHoldCode bool
	ref           *dwarf.Reader              // for DW_AT_abstract_origin and DW_AT_specification
	attrs         map[dwarf.Offset]funcAttrs // of referenced entries
	index         map[funcAttrs]int32
	tooDeep       int // subtrees skipped for nesting deeper than maxDIEDepth
}

// funcAttrs is what names a function, merged along its origins.
type funcAttrs struct {
	name, linkage string
	declLine      int
}

func newFuncBuilder(d *dwarf.Data, inText func(uint64) bool, typesHoldCode bool) *funcBuilder {
	return &funcBuilder{
		d:             d,
		t:             &funcTable{},
		inText:        inText,
		typesHoldCode: typesHoldCode,
		ref:           d.Reader(),
		attrs:         make(map[dwarf.Offset]funcAttrs),
		index:         make(map[funcAttrs]int32),
	}
}

// unit reads the children of a compilation unit; files maps the unit's file
// indexes (DW_AT_call_file) to lineTable.files.
func (b *funcBuilder) unit(r *dwarf.Reader, files []uint32, unitName uint32) error {
	b.unitName = unitName
	return b.walk(r, files, -1, nil, 1)
}

// walk reads entries up to the end of the current list of children, at
// depth levels below the unit's DIE. cur is the scope they belong to (-1
// outside functions); inl collects the inlined ranges of the enclosing
// concrete subprogram. It descends only into entries that may hold code,
// and skips the others whole.
func (b *funcBuilder) walk(r *dwarf.Reader, files []uint32, cur int32, inl *[]scopeRange, depth int) error {
	for {
		e, err := r.Next()
		if err != nil {
			return err
		}
		if e == nil || e.Tag == 0 {
			return nil
		}
		if e.Children && depth >= maxDIEDepth {
			b.tooDeep++
			if err := skipChildren(r, e); err != nil {
				return err
			}
			continue
		}
		switch e.Tag {
		case dwarf.TagSubprogram:
			if err := b.subprogram(r, e, files, depth); err != nil {
				return err
			}
		case dwarf.TagInlinedSubroutine:
			if cur < 0 {
				if err := skipChildren(r, e); err != nil {
					return err
				}
				continue
			}
			s := b.newScope(e, cur)
			sc := &b.t.scopes[s]
			if f, ok := e.Val(dwarf.AttrCallFile).(int64); ok && f >= 0 && int(f) < len(files) {
				sc.callFile = files[f]
			} else {
				sc.callFile = noFile
			}
			if l, ok := e.Val(dwarf.AttrCallLine).(int64); ok && l > 0 {
				sc.callLine = uint32(l)
			}
			if rs, err := b.d.Ranges(e); err == nil {
				for _, rg := range rs {
					if rg[0] < rg[1] && b.inText(rg[0]) {
						*inl = append(*inl, scopeRange{lo: rg[0], hi: rg[1], scope: s})
					}
				}
			}
			if e.Children {
				if err := b.walk(r, files, s, inl, depth+1); err != nil {
					return err
				}
			}
		case dwarf.TagLexDwarfBlock, dwarf.TagTryDwarfBlock, dwarf.TagCatchDwarfBlock,
			dwarf.TagNamespace, dwarf.TagModule:
			// Inlined calls sit in lexical blocks; C++ and Rust define
			// functions inside namespaces.
			if e.Children {
				if err := b.walk(r, files, cur, inl, depth+1); err != nil {
					return err
				}
			}
		case dwarf.TagClassType, dwarf.TagStructType, dwarf.TagUnionType:
			if e.Children && b.typesHoldCode {
				if err := b.walk(r, files, cur, inl, depth+1); err != nil {
					return err
				}
			} else if err := skipChildren(r, e); err != nil {
				return err
			}
		default:
			// Variables, parameters, members, enumerators, call
			// sites: no code below them.
			if err := skipChildren(r, e); err != nil {
				return err
			}
		}
	}
}

// skipChildren moves r, which just returned e, past the children of e. It
// does what Reader.SkipChildren does, with a loop where that recurses once
// per level (a DIE without DW_AT_sibling): its depth is not bounded.
func skipChildren(r *dwarf.Reader, e *dwarf.Entry) error {
	if !e.Children {
		return nil
	}
	if sib, ok := e.Val(dwarf.AttrSibling).(dwarf.Offset); ok && sib > e.Offset {
		r.Seek(sib)
		return nil
	}
	for depth := 1; depth > 0; {
		e, err := r.Next()
		if err != nil {
			return err
		}
		switch {
		case e == nil:
			return nil
		case e.Tag == 0:
			depth--
		case e.Children:
			if sib, ok := e.Val(dwarf.AttrSibling).(dwarf.Offset); ok && sib > e.Offset {
				r.Seek(sib)
			} else {
				depth++
			}
		}
	}
	return nil
}

// subprogram adds e if it has code (declarations and abstract instances of
// inline functions have none: they are only referenced). e is at depth.
func (b *funcBuilder) subprogram(r *dwarf.Reader, e *dwarf.Entry, files []uint32, depth int) error {
	if decl, _ := e.Val(dwarf.AttrDeclaration).(bool); decl {
		// Its children are the parameters of a prototype.
		return skipChildren(r, e)
	}
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
			return b.walk(r, files, -1, nil, depth+1)
		}
		return nil
	}
	s := b.newScope(e, -1)
	b.t.scopes[s].unit = b.unitName
	for _, rg := range ranges {
		b.t.top = append(b.t.top, scopeRange{lo: rg[0], hi: rg[1], scope: s})
	}
	var inl []scopeRange
	if e.Children {
		if err := b.walk(r, files, s, &inl, depth+1); err != nil {
			return err
		}
	}
	b.t.scopes[s].inlFirst = int32(len(b.t.inl))
	b.t.inl = append(b.t.inl, inl...)
	b.t.scopes[s].inlEnd = int32(len(b.t.inl))
	return nil
}

// noFile marks an unknown call file.
const noFile = ^uint32(0)

func (b *funcBuilder) newScope(e *dwarf.Entry, parent int32) int32 {
	a := b.attrsOf(e, 0)
	fn, ok := b.index[a]
	if !ok {
		fn = int32(len(b.t.funcs))
		b.t.funcs = append(b.t.funcs, funcInfo{name: a.name, linkage: a.linkage, declLine: a.declLine})
		b.index[a] = fn
	}
	sc := scope{fn: fn, parent: parent, callFile: noFile}
	if parent >= 0 {
		sc.depth = b.t.scopes[parent].depth + 1
	}
	b.t.scopes = append(b.t.scopes, sc)
	return int32(len(b.t.scopes) - 1)
}

// attrsOf returns the name attributes of e, completed from the entries its
// DW_AT_abstract_origin or DW_AT_specification refers to.
func (b *funcBuilder) attrsOf(e *dwarf.Entry, depth int) funcAttrs {
	var a funcAttrs
	a.name, _ = e.Val(dwarf.AttrName).(string)
	a.linkage, _ = e.Val(dwarf.AttrLinkageName).(string)
	if a.linkage == "" {
		a.linkage, _ = e.Val(attrMIPSLinkageName).(string)
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

// finish sorts the ranges of concrete subprograms, stably: the order of
// the unit breaks ties (see concrete).
func (b *funcBuilder) finish() *funcTable {
	t := b.t
	if len(t.top) == 0 {
		return nil
	}
	t.maxHi = sortByLo(t.top, func(r *scopeRange) (uint64, uint64) { return r.lo, r.hi })
	return t
}

// attrMIPSLinkageName is DW_AT_MIPS_linkage_name, which older compilers
// emit for DW_AT_linkage_name.
const attrMIPSLinkageName dwarf.Attr = 0x2007

// frames returns the frames of chain (from chain), innermost first: the
// innermost function at file:line, then each caller at the line it calls
// from. sym, the ELF symbol at the address (nil if none), names a concrete
// subprogram DWARF leaves unnamed.
func (t *funcTable) frames(chain []int32, file string, line int, sym *symbol) []Frame {
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
		if sc.callFile != noFile && int(sc.callFile) < len(t.files) {
			file = t.files[sc.callFile]
		}
	}
	return frames
}
