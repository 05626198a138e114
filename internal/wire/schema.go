package wire

import "fmt"

// FieldType is the type byte of a schema field. Bit 0x80 marks the field
// optional; the low bits are one of the base types below.
type FieldType uint8

// Base field types, as they appear in schema frames.
const (
	I64               FieldType = 1  // 8 bytes LE, signed
	F64               FieldType = 2  // 8 bytes IEEE-754 LE
	Bool              FieldType = 3  // 1 byte, nonzero is true
	String            FieldType = 4  // u32 length + UTF-8
	Bytes             FieldType = 5  // u32 length + raw bytes
	PooledStackFrames FieldType = 6  // u32 stack-pool id
	PooledString      FieldType = 7  // u32 string-pool id
	StackFrames       FieldType = 8  // u32 count + count × u64
	Varint            FieldType = 9  // LEB128 u64
	StringMap         FieldType = 10 // u32 count + count × (u32 klen, key, u32 vlen, value)
	U8                FieldType = 11
	U16               FieldType = 12
	U32               FieldType = 13
	DynamicList       FieldType = 14 // u32 count + count × (u8 tag, value)
	DynamicMap        FieldType = 15 // u32 count + count × (u8 ktag, key, u8 vtag, value)

	// OptionalFlag marks an optional field: a presence byte 0 or 1 precedes
	// the value.
	OptionalFlag FieldType = 0x80
)

var typeNames = [...]string{"", "I64", "F64", "Bool", "String", "Bytes", "PooledStackFrames",
	"PooledString", "StackFrames", "Varint", "StringMap", "U8", "U16", "U32", "DynamicList", "DynamicMap"}

// Optional returns t marked optional.
func Optional(t FieldType) FieldType { return t | OptionalFlag }

// Base returns t without the optional flag.
func (t FieldType) Base() FieldType { return t &^ OptionalFlag }

// IsOptional reports whether t has the optional flag.
func (t FieldType) IsOptional() bool { return t&OptionalFlag != 0 }

// Valid reports whether t is a base type 1…15, optional or not.
func (t FieldType) Valid() bool { b := t.Base(); return b >= I64 && b <= DynamicMap }

func (t FieldType) String() string {
	if !t.Valid() {
		return fmt.Sprintf("FieldType(0x%02x)", uint8(t))
	}
	if t.IsOptional() {
		return "Optional(" + typeNames[t.Base()] + ")"
	}
	return typeNames[t]
}

// Field is one field of a schema.
type Field struct {
	Name string
	Type FieldType
}

// Schema describes an event type: its name (the Rust struct name for the
// built-in events), whether events carry a timestamp, and the fields in
// encoding order. The timestamp is not one of the fields.
type Schema struct {
	Name         string
	HasTimestamp bool
	Fields       []Field
}

// FieldIndex returns the position of the field called name, or -1.
func (s *Schema) FieldIndex(name string) int {
	for i := range s.Fields {
		if s.Fields[i].Name == name {
			return i
		}
	}
	return -1
}

// Equal reports whether s and t define the same schema, which is when a
// re-registration under the same type id is allowed.
func (s *Schema) Equal(t *Schema) bool {
	if s == t {
		return true
	}
	if s.Name != t.Name || s.HasTimestamp != t.HasTimestamp || len(s.Fields) != len(t.Fields) {
		return false
	}
	for i := range s.Fields {
		if s.Fields[i] != t.Fields[i] {
			return false
		}
	}
	return true
}

// Validate reports what makes s unencodable, or nil.
func (s *Schema) Validate() error {
	if len(s.Name) > 0xFFFF {
		return fmt.Errorf("wire: schema name is %d bytes, limit 65535", len(s.Name))
	}
	if len(s.Fields) > 0xFFFF {
		return fmt.Errorf("wire: schema %s has %d fields, limit 65535", s.Name, len(s.Fields))
	}
	for _, f := range s.Fields {
		if len(f.Name) > 0xFFFF {
			return fmt.Errorf("wire: schema %s: field name is %d bytes, limit 65535", s.Name, len(f.Name))
		}
		if !f.Type.Valid() {
			return fmt.Errorf("wire: schema %s: field %s: %w 0x%02x", s.Name, f.Name, ErrUnknownFieldType, uint8(f.Type))
		}
	}
	return nil
}

// Annotation is one entry of a schema-annotations frame (tag 0x06), e.g.
// key "unit" with value "ns" for a field.
type Annotation struct {
	Field int // index of the annotated field
	Key   string
	Value string
}

// Schemas of the built-in runtime events, as the upstream recorder defines
// them (§A.8 of the spec). They must not be modified.
var (
	PollStartSchema = &Schema{Name: NamePollStart, HasTimestamp: true, Fields: []Field{
		{FieldWorkerID, Varint}, {FieldLocalQueue, U8}, {FieldTaskID, Varint}, {FieldSpawnLoc, PooledString}}}
	PollEndSchema = &Schema{Name: NamePollEnd, HasTimestamp: true, Fields: []Field{
		{FieldWorkerID, Varint}}}
	WorkerParkSchema = &Schema{Name: NameWorkerPark, HasTimestamp: true, Fields: []Field{
		{FieldWorkerID, Varint}, {FieldLocalQueue, U8}, {FieldCPUTimeNs, Varint}, {FieldTid, U32}}}
	WorkerUnparkSchema = &Schema{Name: NameWorkerUnpark, HasTimestamp: true, Fields: []Field{
		{FieldWorkerID, Varint}, {FieldLocalQueue, U8}, {FieldCPUTimeNs, Varint}, {FieldSchedWaitNs, Varint}, {FieldTid, U32}}}
	CpuSampleSchema = &Schema{Name: NameCpuSample, HasTimestamp: true, Fields: []Field{
		{FieldWorkerID, Varint}, {FieldTid, U32}, {FieldSource, U8}, {FieldThreadName, Optional(PooledString)},
		{FieldCallchain, PooledStackFrames}, {FieldCPU, Optional(Varint)}}}
	SymbolTableEntrySchema = &Schema{Name: NameSymbolTableEntry, HasTimestamp: true, Fields: []Field{
		{FieldAddr, Varint}, {FieldSize, Varint}, {FieldSymbolName, PooledString}, {FieldInlineDepth, Varint},
		{FieldSourceFile, PooledString}, {FieldSourceLine, Varint}}}
	ClockSyncSchema = &Schema{Name: NameClockSync, HasTimestamp: true, Fields: []Field{
		{FieldRealtimeNs, Varint}}}
	SegmentMetadataSchema = &Schema{Name: NameSegmentMetadata, HasTimestamp: true, Fields: []Field{
		{FieldEntries, StringMap}}}
)
