package goruntime

import (
	"debug/buildinfo"
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/perfprof/perfprof/internal/limits"
)

var (
	// ErrNotGo is wrapped when the file is not a Go executable.
	ErrNotGo = errors.New("not a Go executable")
	// ErrUnsupported is wrapped when the executable is Go but its layout
	// cannot be known: another architecture, or no DWARF and a release
	// missing from the fallback table.
	ErrUnsupported = errors.New("Go runtime layout unknown")
)

// LabelsKind says what runtime.g.labels points to.
type LabelsKind uint8

const (
	// LabelsNone: runtime/pprof is not linked in, so nothing ever sets
	// g.labels and it stays nil.
	LabelsNone LabelsKind = iota
	// LabelsSlice: a struct holding a []struct{key, value string} sorted
	// by key (runtime/pprof.labelMap since Go 1.24).
	LabelsSlice
	// LabelsMap: a map[string]string (Go 1.23 and older).
	LabelsMap
)

func (k LabelsKind) String() string {
	switch k {
	case LabelsSlice:
		return "slice"
	case LabelsMap:
		return "map"
	}
	return "none"
}

// Layout is where a goroutine's labels are, seen from a thread of a Go
// process on amd64. Offsets are in bytes.
type Layout struct {
	// GoVersion is the toolchain that built the binary, e.g. "go1.26.8".
	GoVersion string
	// TLSG is the offset of the current g pointer from the thread
	// pointer (FS base): -8 for the runtime's own TLS slot, further down
	// when a cgo binary's C code has thread-local variables too.
	TLSG int32
	// GM, GLabels and MCurg are the offsets of runtime.g.m,
	// runtime.g.labels and runtime.m.curg; GGoid of runtime.g.goid,
	// which is 0 in the g0 and gsignal of each thread and set in every
	// other goroutine.
	GM, GLabels, MCurg, GGoid uint32
	// Labels is what g.labels points to; the fields below describe
	// LabelsSlice.
	Labels LabelsKind
	// LabelList is the offset of the label slice in the struct g.labels
	// points to.
	LabelList uint32
	// LabelSize is the size of one label, LabelKey and LabelValue the
	// offsets of its key and value strings (Go string headers: pointer,
	// then length).
	LabelSize, LabelKey, LabelValue uint32
	// FromTable is set when the binary has no DWARF and the offsets come
	// from the table of known releases (see [Known]).
	FromTable bool
}

// ReadFile reads the layout of the executable at name, e.g.
// /proc/PID/exe.
func ReadFile(name string) (Layout, error) {
	f, err := os.Open(name)
	if err != nil {
		return Layout{}, err
	}
	defer f.Close()
	l, err := Read(f)
	if err != nil {
		return Layout{}, fmt.Errorf("%s: %w", name, err)
	}
	return l, nil
}

// Read reads the layout of the executable in r.
func Read(r io.ReaderAt) (Layout, error) {
	f, err := elf.NewFile(r)
	if err != nil {
		return Layout{}, fmt.Errorf("%w: %v", ErrNotGo, err)
	}
	bi, err := buildinfo.Read(r)
	if err != nil {
		return Layout{}, fmt.Errorf("%w: %v", ErrNotGo, err)
	}
	if f.Machine != elf.EM_X86_64 {
		return Layout{}, fmt.Errorf("%w: machine %v (only amd64 is known)", ErrUnsupported, f.Machine)
	}
	if err := sectionsFit(f); err != nil {
		return Layout{}, err
	}
	l := Layout{GoVersion: bi.GoVersion, TLSG: tlsG(f)}
	d, err := f.DWARF()
	if err != nil {
		known, ok := Known(bi.GoVersion)
		if !ok {
			return Layout{}, fmt.Errorf("%w: no DWARF (%v) and %s is not in the table of known releases", ErrUnsupported, err, bi.GoVersion)
		}
		known.GoVersion, known.TLSG, known.FromTable = l.GoVersion, l.TLSG, true
		return known, nil
	}
	if err := l.readDWARF(d); err != nil {
		return Layout{}, fmt.Errorf("read runtime types from DWARF: %w", err)
	}
	return l, nil
}

// maxReadBytes bounds the bytes of the sections Read reads whole: the
// symbol table and its strings, and the DWARF sections, which debug/elf
// inflates to the size their headers claim (the Go linker compresses
// them). docker's 43 MB binary has 37 MiB of DWARF inflated.
const maxReadBytes = 512 << 20

// sectionsFit returns an error wrapping a *limits.Error if the sections
// Read reads whole add up to more than maxReadBytes: of kind
// CompressedSection if one of them is compressed, else FileTooLarge.
func sectionsFit(f *elf.File) error {
	var total uint64
	compressed := false
	for _, s := range f.Sections {
		if s.Type != elf.SHT_SYMTAB && s.Type != elf.SHT_STRTAB &&
			!strings.HasPrefix(s.Name, ".debug_") && !strings.HasPrefix(s.Name, ".zdebug_") {
			continue
		}
		s.Open() // for a .zdebug section, it reads the size
		total += s.Size
		compressed = compressed || s.Flags&elf.SHF_COMPRESSED != 0 || strings.HasPrefix(s.Name, ".zdebug_")
	}
	if total <= maxReadBytes {
		return nil
	}
	if compressed {
		return limits.Errorf(limits.CompressedSection, "symbols and DWARF inflate to %d bytes, more than %d", total, maxReadBytes)
	}
	return limits.Errorf(limits.FileTooLarge, "symbols and DWARF take %d bytes, more than %d", total, maxReadBytes)
}

// tlsG finds the offset of runtime.tlsg from the thread pointer. On amd64
// the main executable's TLS block ends at the thread pointer (ELF TLS
// variant II), so a TLS symbol at offset v of a PT_TLS segment of size s
// and alignment a is at v - roundup(s, a). An internally linked binary has
// no PT_TLS and uses -8; so does a stripped binary, where the symbol is
// gone (wrong for a cgo binary with C thread-locals, which is rare).
func tlsG(f *elf.File) int32 {
	var tls *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_TLS {
			tls = p
		}
	}
	if tls == nil {
		return -8
	}
	syms, err := f.Symbols()
	if err != nil {
		return -8
	}
	for _, s := range syms {
		if s.Name == "runtime.tlsg" && elf.ST_TYPE(s.Info) == elf.STT_TLS {
			align := max(tls.Align, 1)
			size := (tls.Memsz + align - 1) / align * align
			return int32(int64(s.Value) - int64(size))
		}
	}
	return -8
}

// readDWARF fills the offsets from the types of the runtime compile
// unit, where Go's linker emits every type.
func (l *Layout) readDWARF(d *dwarf.Data) error {
	r := d.Reader()
	var g, m, labelMap *dwarf.StructType
	var labelMapTypedef bool
	scan := newTypeScan(d)
	for {
		e, err := r.Next()
		if err != nil {
			return err
		}
		if e == nil {
			break
		}
		if e.Tag == dwarf.TagCompileUnit {
			if name, _ := e.Val(dwarf.AttrName).(string); name != "runtime" {
				r.SkipChildren()
			}
			continue
		}
		if e.Children {
			r.SkipChildren()
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		var dst **dwarf.StructType
		switch name {
		case "runtime.g":
			dst = &g
		case "runtime.m":
			dst = &m
		case "runtime/pprof.labelMap":
			if e.Tag == dwarf.TagTypedef {
				labelMapTypedef = true
				continue
			}
			dst = &labelMap
		default:
			continue
		}
		if e.Tag != dwarf.TagStructType {
			continue
		}
		// debug/dwarf reads a type graph by recursion, which a forged
		// one can make deeper than the stack, and loops over a cycle of
		// typedefs: look at the graph first.
		if err := scan.check(e.Offset); err != nil {
			return fmt.Errorf("type %s: %w", name, err)
		}
		t, err := d.Type(e.Offset)
		if err != nil {
			return fmt.Errorf("type %s: %w", name, err)
		}
		st, ok := t.(*dwarf.StructType)
		if !ok {
			return fmt.Errorf("type %s is a %T, not a struct", name, t)
		}
		*dst = st
	}
	if g == nil || m == nil {
		return errors.New("runtime.g or runtime.m not found")
	}
	var err error
	if l.GM, err = fieldOffset(g, "m"); err != nil {
		return err
	}
	if l.GLabels, err = fieldOffset(g, "labels"); err != nil {
		return err
	}
	if l.GGoid, err = fieldOffset(g, "goid"); err != nil {
		return err
	}
	if l.MCurg, err = fieldOffset(m, "curg"); err != nil {
		return err
	}
	switch {
	case labelMap != nil:
		l.Labels = LabelsSlice
		return l.readLabelSlice(labelMap)
	case labelMapTypedef:
		// A typedef with no struct of the same name: map[string]string.
		l.Labels = LabelsMap
	}
	return nil
}

// readLabelSlice finds the label slice in labelMap, which embeds a label
// set (Go 1.24: pprof.LabelSet{list}; Go 1.25+: label.Set{List}), and the
// layout of its elements.
func (l *Layout) readLabelSlice(labelMap *dwarf.StructType) error {
	off, slice, ok := findSlice(labelMap, 0, 3)
	if !ok {
		return fmt.Errorf("no label slice in %s", labelMap.StructName)
	}
	l.LabelList = off
	var elem *dwarf.StructType
	for _, f := range slice.Field {
		if f.Name == "array" {
			if p, ok := f.Type.(*dwarf.PtrType); ok {
				elem, _ = underlying(p.Type).(*dwarf.StructType)
			}
		}
	}
	if elem == nil {
		return fmt.Errorf("label slice %s has no element struct", slice.StructName)
	}
	var err error
	if l.LabelKey, err = fieldOffset(elem, "key"); err != nil {
		return err
	}
	if l.LabelValue, err = fieldOffset(elem, "value"); err != nil {
		return err
	}
	l.LabelSize = uint32(elem.ByteSize)
	return nil
}

// findSlice looks, depth first through struct fields, for the first Go
// slice (a struct named "[]T" in Go's DWARF) and returns its offset.
func findSlice(st *dwarf.StructType, base uint32, depth int) (uint32, *dwarf.StructType, bool) {
	if depth == 0 {
		return 0, nil, false
	}
	for _, f := range st.Field {
		inner, ok := underlying(f.Type).(*dwarf.StructType)
		if !ok {
			continue
		}
		off := base + uint32(f.ByteOffset)
		if strings.HasPrefix(inner.StructName, "[]") {
			return off, inner, true
		}
		if o, s, ok := findSlice(inner, off, depth-1); ok {
			return o, s, true
		}
	}
	return 0, nil, false
}

// underlying follows typedefs to the type they name. typeScan.check
// bounded their chains; the bound here keeps a loop out all the same.
func underlying(t dwarf.Type) dwarf.Type {
	for range maxTypeChain + 1 {
		td, ok := t.(*dwarf.TypedefType)
		if !ok {
			return t
		}
		t = td.Type
	}
	return nil
}

// fieldOffset returns the offset of the field named name, compared
// without case: runtime/pprof renamed key to Key when it moved the label
// types into internal/runtime/pprof/label.
func fieldOffset(st *dwarf.StructType, name string) (uint32, error) {
	for _, f := range st.Field {
		if strings.EqualFold(f.Name, name) {
			return uint32(f.ByteOffset), nil
		}
	}
	return 0, fmt.Errorf("%s has no field %s", st.StructName, name)
}
