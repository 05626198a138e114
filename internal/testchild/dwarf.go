package testchild

import (
	"bytes"
	"debug/dwarf"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"testing"
)

// DWARF attribute forms the DWARFWriter writes (DWARF 4, section 7.5.6).
const (
	FormAddr   = 0x01 // 8-byte address
	FormData1  = 0x0b
	FormData8  = 0x07
	FormString = 0x08 // NUL-terminated, inline
	FormRef4   = 0x13 // offset from the start of the unit
)

// DWARFAttr is one attribute of a forged DIE: Val is a uint64 for the
// address, data and reference forms, a string for FormString.
type DWARFAttr struct {
	Attr dwarf.Attr
	Form uint8
	Val  any
}

// DWARFWriter forges the .debug_abbrev and .debug_info sections of DWARF 4
// units DIE by DIE, for tests that hand a parser debugging information
// that no compiler writes: types that refer to themselves, DIEs nested a
// hundred thousand deep. Each DIE shape gets an abbreviation of its own.
type DWARFWriter struct {
	abbrev  bytes.Buffer
	info    bytes.Buffer
	codes   map[string]uint64
	unit    int // offset in info of the open unit's header
	open    int // DIEs with children not yet ended
	started bool
}

// BeginUnit starts a unit; its DIEs are written until EndUnit.
func (w *DWARFWriter) BeginUnit() {
	if w.codes == nil {
		w.codes = map[string]uint64{}
	}
	w.unit = w.info.Len()
	w.info.Write([]byte{0, 0, 0, 0}) // unit_length, set by EndUnit
	binary.Write(&w.info, binary.LittleEndian, uint16(4))
	binary.Write(&w.info, binary.LittleEndian, uint32(0)) // one abbreviation table for all units
	w.info.WriteByte(8)
	w.started = true
}

// Next is the unit-relative offset of the next DIE, for a FormRef4 to it
// (a DIE that refers to itself takes Next before its Begin).
func (w *DWARFWriter) Next() uint64 { return uint64(w.info.Len() - w.unit) }

// Begin writes a DIE; one with children is closed by End.
func (w *DWARFWriter) Begin(tag dwarf.Tag, children bool, attrs ...DWARFAttr) {
	var key strings.Builder
	fmt.Fprintf(&key, "%d/%v", tag, children)
	for _, a := range attrs {
		fmt.Fprintf(&key, "/%d:%d", a.Attr, a.Form)
	}
	code, ok := w.codes[key.String()]
	if !ok {
		code = uint64(len(w.codes) + 1)
		w.codes[key.String()] = code
		w.abbrev.Write(binary.AppendUvarint(nil, code))
		w.abbrev.Write(binary.AppendUvarint(nil, uint64(tag)))
		if children {
			w.abbrev.WriteByte(1)
		} else {
			w.abbrev.WriteByte(0)
		}
		for _, a := range attrs {
			w.abbrev.Write(binary.AppendUvarint(nil, uint64(a.Attr)))
			w.abbrev.Write(binary.AppendUvarint(nil, uint64(a.Form)))
		}
		w.abbrev.Write([]byte{0, 0})
	}
	w.info.Write(binary.AppendUvarint(nil, code))
	for _, a := range attrs {
		switch a.Form {
		case FormString:
			w.info.WriteString(a.Val.(string))
			w.info.WriteByte(0)
		case FormData1:
			w.info.WriteByte(byte(a.Val.(uint64)))
		case FormRef4:
			binary.Write(&w.info, binary.LittleEndian, uint32(a.Val.(uint64)))
		case FormAddr, FormData8:
			binary.Write(&w.info, binary.LittleEndian, a.Val.(uint64))
		default:
			panic(fmt.Sprintf("DWARFWriter: form %#x", a.Form))
		}
	}
	if children {
		w.open++
	}
}

// End closes the latest DIE with children.
func (w *DWARFWriter) End() {
	w.info.WriteByte(0)
	w.open--
}

// EndUnit closes the DIEs still open and the unit.
func (w *DWARFWriter) EndUnit() {
	for w.open > 0 {
		w.End()
	}
	binary.LittleEndian.PutUint32(w.info.Bytes()[w.unit:], uint32(w.info.Len()-w.unit-4))
}

// Sections returns .debug_abbrev and .debug_info.
func (w *DWARFWriter) Sections() (abbrev, info []byte) {
	return append(w.abbrev.Bytes(), 0), w.info.Bytes()
}

// ReplaceDWARF writes a copy of the ELF file bin named out whose DWARF is
// the forged abbrev and info sections: every other .debug_* and .zdebug_*
// section of bin is removed but the line table, whose presence readers
// take as the sign of usable DWARF (the forged units do not refer to it).
func ReplaceDWARF(tb testing.TB, bin, out string, abbrev, info []byte) {
	tb.Helper()
	bare := Forge(tb, bin, nil, ".debug_*", ".zdebug_*", "!.debug_line", "!.zdebug_line")
	forged := Forge(tb, bare, map[string][]byte{".debug_abbrev": abbrev, ".debug_info": info})
	if err := os.Rename(forged, out); err != nil {
		tb.Fatal(err)
	}
}

// Forged Go runtime types (ForgeGoRuntimeTypes): the runtime.g, runtime.m
// and runtime/pprof.labelMap of a Go binary, each with the fields a
// profiler reads, all of a typedef that is its own type.
func ForgeGoRuntimeTypes(w *DWARFWriter) {
	w.BeginUnit()
	w.Begin(dwarf.TagCompileUnit, true, DWARFAttr{dwarf.AttrName, FormString, "runtime"})
	self := w.Next()
	w.Begin(dwarf.TagTypedef, false, DWARFAttr{dwarf.AttrName, FormString, "runtime.loop"}, DWARFAttr{dwarf.AttrType, FormRef4, self})
	for _, st := range []struct {
		name   string
		fields []string
	}{
		{"runtime.g", []string{"m", "labels", "goid"}},
		{"runtime.m", []string{"curg"}},
		{"runtime/pprof.labelMap", []string{"list"}},
	} {
		w.Begin(dwarf.TagStructType, true, DWARFAttr{dwarf.AttrName, FormString, st.name}, DWARFAttr{dwarf.AttrByteSize, FormData1, uint64(64)})
		for i, f := range st.fields {
			w.Begin(dwarf.TagMember, false, DWARFAttr{dwarf.AttrName, FormString, f},
				DWARFAttr{dwarf.AttrType, FormRef4, self}, DWARFAttr{dwarf.AttrDataMemberLoc, FormData1, uint64(8 * i)})
		}
		w.End()
	}
	w.EndUnit()
}

// ForgeNestedBlocks writes a unit holding one subprogram, name, over
// [lowPC, highPC), whose body is depth lexical blocks each nested in the
// one before, all over the same range.
func ForgeNestedBlocks(w *DWARFWriter, name string, lowPC, highPC uint64, depth int) {
	w.BeginUnit()
	rng := []DWARFAttr{{dwarf.AttrLowpc, FormAddr, lowPC}, {dwarf.AttrHighpc, FormData8, highPC - lowPC}}
	w.Begin(dwarf.TagCompileUnit, true, append([]DWARFAttr{{dwarf.AttrName, FormString, "nested.c"}}, rng...)...)
	w.Begin(dwarf.TagSubprogram, true, append([]DWARFAttr{{dwarf.AttrName, FormString, name}}, rng...)...)
	for range depth {
		w.Begin(dwarf.TagLexDwarfBlock, true, rng...)
	}
	w.EndUnit()
}
