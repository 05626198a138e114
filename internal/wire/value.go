package wire

import (
	"bytes"
	"math"
	"slices"
)

// Value is one decoded field value. Type is the base type of the field (or
// of the element, inside dynamic lists and maps); which other fields are set
// depends on it:
//
//	I64, F64, Bool           U holds the 8 bytes (use Int, Float, Bool)
//	Varint, U8, U16, U32     U
//	String                   S
//	PooledString             S, and the pool id in U
//	Bytes                    B
//	StackFrames              Frames
//	PooledStackFrames        Frames (shared with the pool: do not modify), the pool id in U
//	StringMap                Map
//	DynamicList              List
//	DynamicMap               Entries
//
// Absent is true for an optional value that is not present; nothing else is
// set then.
type Value struct {
	Type    FieldType
	Absent  bool
	U       uint64
	S       string
	B       []byte
	Frames  []uint64
	Map     []StringPair
	List    []Value
	Entries []MapEntry

	frames []uint64 // decode buffer for StackFrames, never shared with a pool
}

// StringPair is one entry of a StringMap.
type StringPair struct{ Key, Value string }

// MapEntry is one entry of a DynamicMap.
type MapEntry struct{ Key, Value Value }

// Constructors for values to pass to Writer.Write.

func I64Value(v int64) Value           { return Value{Type: I64, U: uint64(v)} }
func F64Value(v float64) Value         { return Value{Type: F64, U: math.Float64bits(v)} }
func VarintValue(v uint64) Value       { return Value{Type: Varint, U: v} }
func U8Value(v uint8) Value            { return Value{Type: U8, U: uint64(v)} }
func U16Value(v uint16) Value          { return Value{Type: U16, U: uint64(v)} }
func U32Value(v uint32) Value          { return Value{Type: U32, U: uint64(v)} }
func StringValue(s string) Value       { return Value{Type: String, S: s} }
func BytesValue(b []byte) Value        { return Value{Type: Bytes, B: b} }
func PooledStringValue(s string) Value { return Value{Type: PooledString, S: s} }
func StackValue(f []uint64) Value      { return Value{Type: StackFrames, Frames: f} }
func PooledStackValue(f []uint64) Value {
	return Value{Type: PooledStackFrames, Frames: f}
}
func StringMapValue(m []StringPair) Value { return Value{Type: StringMap, Map: m} }
func ListValue(l []Value) Value           { return Value{Type: DynamicList, List: l} }
func MapValue(e []MapEntry) Value         { return Value{Type: DynamicMap, Entries: e} }

// BoolValue returns a Bool value.
func BoolValue(b bool) Value {
	if b {
		return Value{Type: Bool, U: 1}
	}
	return Value{Type: Bool}
}

// Absent is the value of an optional field that is not present.
var Absent = Value{Absent: true}

// Int returns an I64 value.
func (v *Value) Int() int64 { return int64(v.U) }

// Float returns an F64 value.
func (v *Value) Float() float64 { return math.Float64frombits(v.U) }

// Bool returns a Bool value.
func (v *Value) Bool() bool { return v.U != 0 }

// Equal reports whether v and w are the same value. Pool ids are not
// compared (they are an encoding detail), only what they resolve to.
func (v *Value) Equal(w *Value) bool {
	if v.Absent || w.Absent {
		return v.Absent == w.Absent
	}
	if v.Type != w.Type {
		return false
	}
	switch v.Type {
	case String, PooledString:
		return v.S == w.S
	case Bytes:
		return bytes.Equal(v.B, w.B)
	case StackFrames, PooledStackFrames:
		return slices.Equal(v.Frames, w.Frames)
	case StringMap:
		return slices.Equal(v.Map, w.Map)
	case DynamicList:
		return slices.EqualFunc(v.List, w.List, func(a, b Value) bool { return a.Equal(&b) })
	case DynamicMap:
		return slices.EqualFunc(v.Entries, w.Entries, func(a, b MapEntry) bool {
			return a.Key.Equal(&b.Key) && a.Value.Equal(&b.Value)
		})
	case Bool:
		return (v.U != 0) == (w.U != 0)
	}
	return v.U == w.U
}

// Opt is an optional value for the typed event structs.
type Opt[T any] struct {
	V     T
	Valid bool
}

// Some returns a present Opt.
func Some[T any](v T) Opt[T] { return Opt[T]{V: v, Valid: true} }

// Event is one decoded event. Values are in the order of Schema.Fields.
//
// An Event filled by Reader.ReadEvent is reused by the next call: its
// slices (Values, and B, Frames, Map, List, Entries in them) are overwritten
// then. Strings and pooled stacks are not: they may be kept.
type Event struct {
	Schema *Schema
	// Timestamp is absolute nanoseconds on the writer's clock (CLOCK_MONOTONIC
	// upstream), 0 if the schema has no timestamp.
	Timestamp uint64
	Values    []Value
}

// Name returns the schema name.
func (e *Event) Name() string { return e.Schema.Name }

// Field returns the value of the field called name, or nil if the schema has
// no such field.
func (e *Event) Field(name string) *Value {
	if i := e.Schema.FieldIndex(name); i >= 0 && i < len(e.Values) {
		return &e.Values[i]
	}
	return nil
}

// Uint returns the integer value of the field called name (Varint, U8, U16,
// U32, a pool id), and whether it is there and present.
func (e *Event) Uint(name string) (uint64, bool) {
	v := e.Field(name)
	if v == nil || v.Absent {
		return 0, false
	}
	return v.U, true
}

// Str returns the string value of the field called name (String or
// PooledString), and whether it is there and present.
func (e *Event) Str(name string) (string, bool) {
	v := e.Field(name)
	if v == nil || v.Absent {
		return "", false
	}
	return v.S, true
}

// Equal reports whether e and f have equal schemas, timestamps and values.
func (e *Event) Equal(f *Event) bool {
	if !e.Schema.Equal(f.Schema) || e.Timestamp != f.Timestamp || len(e.Values) != len(f.Values) {
		return false
	}
	for i := range e.Values {
		if !e.Values[i].Equal(&f.Values[i]) {
			return false
		}
	}
	return true
}
