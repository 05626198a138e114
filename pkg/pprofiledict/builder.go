package pprofiledict

import (
	"encoding/binary"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/perfprof/perfprof/internal/convention"
)

// Builder interns entries into one ProfilesDictionary. Every method returns
// the index of its entry, adding the entry on first use; the zero value of
// each kind of entry (the empty string, a zero link, Mapping{},
// Function{}, a location with no address, mapping or lines, an empty stack)
// is index 0.
//
// A Builder is not safe for concurrent use. It assumes it is the only
// writer of its dictionary: entries appended by others are not found.
type Builder struct {
	d         pprofile.ProfilesDictionary
	strings   map[string]int32
	attrs     map[attrKey]int32
	links     map[[24]byte]int32
	mappings  map[Mapping]int32
	functions map[Function]int32
	locations map[string]int32
	stacks    map[string]int32
	key       []byte // scratch for the keys of locations and stacks
}

type attrKey struct {
	key, unit string
	str       string
	num       int64
	kind      byte // 's' string, 'i' int
}

// New returns a Builder over d, which must be empty (a new Profiles'
// dictionary); New adds the empty entry at index 0 of every table.
func New(d pprofile.ProfilesDictionary) *Builder {
	b := &Builder{
		d:         d,
		strings:   map[string]int32{"": 0},
		attrs:     map[attrKey]int32{},
		links:     map[[24]byte]int32{{}: 0},
		mappings:  map[Mapping]int32{{}: 0},
		functions: map[Function]int32{{}: 0},
		locations: map[string]int32{},
		stacks:    map[string]int32{"": 0},
	}
	d.StringTable().Append("")
	d.AttributeTable().AppendEmpty()
	d.LinkTable().AppendEmpty()
	d.MappingTable().AppendEmpty()
	d.FunctionTable().AppendEmpty()
	d.LocationTable().AppendEmpty()
	d.StackTable().AppendEmpty()
	b.locations[string(b.locationKey(0, 0, false, nil))] = 0
	return b
}

// Dictionary returns the dictionary the Builder writes.
func (b *Builder) Dictionary() pprofile.ProfilesDictionary { return b.d }

// Str returns the index of s in the string table.
func (b *Builder) Str(s string) int32 {
	if i, ok := b.strings[s]; ok {
		return i
	}
	i := int32(b.d.StringTable().Len())
	b.d.StringTable().Append(s)
	b.strings[s] = i
	return i
}

// SetValueType sets vt (a profile's sample or period type) to typ and unit,
// such as convention.OnCPUSampleType and convention.OnCPUSampleUnit.
func (b *Builder) SetValueType(vt pprofile.ValueType, typ, unit string) {
	vt.SetTypeStrindex(b.Str(typ))
	vt.SetUnitStrindex(b.Str(unit))
}

// AttrStr returns the index of the string attribute key=val.
func (b *Builder) AttrStr(key, val string) int32 {
	k := attrKey{key: key, str: val, kind: 's'}
	if i, ok := b.attrs[k]; ok {
		return i
	}
	i, a := b.appendAttr(key, "")
	a.Value().SetStr(val)
	b.attrs[k] = i
	return i
}

// AttrInt returns the index of the integer attribute key=val.
func (b *Builder) AttrInt(key string, val int64) int32 { return b.AttrIntUnit(key, val, "") }

// AttrIntUnit returns the index of the integer attribute key=val measured
// in unit ("" for none), such as convention.CPUTimeDelta in "ns".
func (b *Builder) AttrIntUnit(key string, val int64, unit string) int32 {
	k := attrKey{key: key, unit: unit, num: val, kind: 'i'}
	if i, ok := b.attrs[k]; ok {
		return i
	}
	i, a := b.appendAttr(key, unit)
	a.Value().SetInt(val)
	b.attrs[k] = i
	return i
}

func (b *Builder) appendAttr(key, unit string) (int32, pprofile.KeyValueAndUnit) {
	// Intern the strings first: the attribute is then complete as soon as
	// it is in the table.
	ki, ui := b.Str(key), b.Str(unit)
	i := int32(b.d.AttributeTable().Len())
	a := b.d.AttributeTable().AppendEmpty()
	a.SetKeyStrindex(ki)
	a.SetUnitStrindex(ui)
	return i, a
}

// Link returns the index of the link to span spanID of trace traceID.
func (b *Builder) Link(traceID pcommon.TraceID, spanID pcommon.SpanID) int32 {
	var k [24]byte
	copy(k[:16], traceID[:])
	copy(k[16:], spanID[:])
	if i, ok := b.links[k]; ok {
		return i
	}
	i := int32(b.d.LinkTable().Len())
	l := b.d.LinkTable().AppendEmpty()
	l.SetTraceID(traceID)
	l.SetSpanID(spanID)
	b.links[k] = i
	return i
}

// Mapping is a mapped file of a process: [Start, Limit) maps File from
// Offset.
type Mapping struct {
	Start, Limit, Offset uint64
	File                 string
	// BuildID, if not "", becomes the mapping's attribute BuildIDKey(BuildID).
	BuildID string
}

// Mapping returns the index of mapping m.
func (b *Builder) Mapping(m Mapping) int32 {
	if i, ok := b.mappings[m]; ok {
		return i
	}
	fi := b.Str(m.File)
	var ai int32
	if m.BuildID != "" {
		ai = b.AttrStr(BuildIDKey(m.BuildID), m.BuildID)
	}
	i := int32(b.d.MappingTable().Len())
	mp := b.d.MappingTable().AppendEmpty()
	mp.SetMemoryStart(m.Start)
	mp.SetMemoryLimit(m.Limit)
	mp.SetFileOffset(m.Offset)
	mp.SetFilenameStrindex(fi)
	if m.BuildID != "" {
		mp.AttributeIndices().Append(ai)
	}
	b.mappings[m] = i
	return i
}

// BuildIDKey returns the mapping attribute that holds build id id:
// convention.BuildIDGNU for a GNU build id (hex digits: 40 for the usual
// SHA-1, 32 for MD5 or UUID ids), else convention.BuildIDGo (Go's build
// ids are slash-separated base64 hashes).
func BuildIDKey(id string) string {
	if id != "" && len(id)%2 == 0 && strings.Trim(id, "0123456789abcdefABCDEF") == "" {
		return convention.BuildIDGNU
	}
	return convention.BuildIDGo
}

// Function is a function of the program; the lines of a location name it.
type Function struct {
	Name       string // human-readable (demangled)
	SystemName string // as in the symbol table (mangled)
	File       string
	StartLine  int64
}

// Function returns the index of function f.
func (b *Builder) Function(f Function) int32 {
	if i, ok := b.functions[f]; ok {
		return i
	}
	ni, si, fi := b.Str(f.Name), b.Str(f.SystemName), b.Str(f.File)
	i := int32(b.d.FunctionTable().Len())
	fn := b.d.FunctionTable().AppendEmpty()
	fn.SetNameStrindex(ni)
	fn.SetSystemNameStrindex(si)
	fn.SetFilenameStrindex(fi)
	fn.SetStartLine(f.StartLine)
	b.functions[f] = i
	return i
}

// Line is one frame of a location: a line in a function (an index the
// Builder returned).
type Line struct {
	Function     int32
	Line, Column int64
}

// Location returns the index of the user-space location at address addr
// in mapping (an index from Mapping, 0 for none) whose frames are lines, in
// pprof's order: inlined functions first, the function that owns the
// address last. Two locations are the same when address, mapping, lines
// and kind (user or kernel) are.
func (b *Builder) Location(addr uint64, mapping int32, lines ...Line) int32 {
	return b.location(addr, mapping, false, lines)
}

// KernelLocation is Location for an address of the kernel: the location
// carries the attribute convention.FrameType = convention.FrameTypeKernel,
// so that a reader knows it without guessing from the address.
func (b *Builder) KernelLocation(addr uint64, mapping int32, lines ...Line) int32 {
	return b.location(addr, mapping, true, lines)
}

func (b *Builder) location(addr uint64, mapping int32, kernel bool, lines []Line) int32 {
	b.key = b.locationKey(addr, mapping, kernel, lines)
	if i, ok := b.locations[string(b.key)]; ok {
		return i
	}
	var ai int32
	if kernel {
		ai = b.AttrStr(convention.FrameType, convention.FrameTypeKernel)
	}
	i := int32(b.d.LocationTable().Len())
	l := b.d.LocationTable().AppendEmpty()
	l.SetAddress(addr)
	l.SetMappingIndex(mapping)
	if kernel {
		l.AttributeIndices().Append(ai)
	}
	ls := l.Lines()
	ls.EnsureCapacity(len(lines))
	for _, ln := range lines {
		pl := ls.AppendEmpty()
		pl.SetFunctionIndex(ln.Function)
		pl.SetLine(ln.Line)
		pl.SetColumn(ln.Column)
	}
	b.locations[string(b.key)] = i
	return i
}

// locationKey encodes a location as varints into b.key's storage: they
// delimit themselves, so two locations have the same key only if they are
// the same.
func (b *Builder) locationKey(addr uint64, mapping int32, kernel bool, lines []Line) []byte {
	k := binary.AppendUvarint(b.key[:0], addr)
	k = binary.AppendVarint(k, int64(mapping))
	if kernel {
		k = append(k, 1)
	} else {
		k = append(k, 0)
	}
	for _, ln := range lines {
		k = binary.AppendVarint(k, int64(ln.Function))
		k = binary.AppendVarint(k, ln.Line)
		k = binary.AppendVarint(k, ln.Column)
	}
	return k
}

// Stack returns the index of the stack of locations (indices from
// Location), leaf first.
func (b *Builder) Stack(locations []int32) int32 {
	k := b.key[:0]
	for _, l := range locations {
		k = binary.LittleEndian.AppendUint32(k, uint32(l))
	}
	b.key = k
	if i, ok := b.stacks[string(k)]; ok {
		return i
	}
	i := int32(b.d.StackTable().Len())
	b.d.StackTable().AppendEmpty().LocationIndices().FromRaw(locations)
	b.stacks[string(k)] = i
	return i
}
