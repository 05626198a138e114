package wire

import (
	"encoding/binary"
	"fmt"
	"io"
	"slices"
)

const flushSize = 64 << 10

// Writer encodes events as a TRC v1 stream, in the frame order of the
// upstream encoder. Output is buffered: call Flush at the end. A Writer is
// not safe for concurrent use.
type Writer struct {
	w   io.Writer
	buf []byte
	err error // sticky write error

	// Stream state, cleared by Reset.
	types     map[*Schema]uint16
	strs      map[string]uint32
	stacks    map[uint64][]stackEntry // by hash of the frames
	nextStr   uint32
	nextStack uint32
	base      uint64
}

type stackEntry struct {
	frames []uint64
	id     uint32
}

// NewWriter returns a Writer that starts a stream (writes a header) on w.
func NewWriter(w io.Writer) *Writer {
	wr := &Writer{
		w:      w,
		buf:    make([]byte, 0, flushSize+4096),
		types:  make(map[*Schema]uint16),
		strs:   make(map[string]uint32),
		stacks: make(map[uint64][]stackEntry),
	}
	wr.header()
	return wr
}

func (w *Writer) header() {
	w.buf = append(w.buf, magic[:]...)
	w.buf = append(w.buf, Version)
}

// Reset starts a new stream: it writes a header and forgets the schemas,
// pools and timestamp base of the previous one.
func (w *Writer) Reset() error {
	clear(w.types)
	clear(w.strs)
	clear(w.stacks)
	w.nextStr, w.nextStack, w.base = 0, 0, 0
	w.header()
	return w.maybeFlush()
}

// Flush writes buffered data to the underlying writer.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if len(w.buf) > 0 {
		_, err := w.w.Write(w.buf)
		w.buf = w.buf[:0]
		if err != nil {
			w.err = fmt.Errorf("wire: write: %w", err)
		}
	}
	return w.err
}

func (w *Writer) maybeFlush() error {
	if len(w.buf) >= flushSize {
		return w.Flush()
	}
	return w.err
}

// Write encodes one event of schema s with timestamp ts (absolute ns,
// ignored if s has no timestamp) and one value per field, in schema order.
// Values must have the field's base type; an optional field takes Absent.
// Pooled strings and stacks are interned by the Writer: pass their content,
// not a pool id. s is identified by pointer; reuse the same *Schema.
func (w *Writer) Write(s *Schema, ts uint64, values ...Value) error {
	if w.err != nil {
		return w.err
	}
	if _, ok := w.types[s]; !ok {
		if err := s.Validate(); err != nil {
			return err
		}
	}
	if len(values) != len(s.Fields) {
		return fmt.Errorf("wire: write %s: %d values for %d fields", s.Name, len(values), len(s.Fields))
	}
	for i, f := range s.Fields {
		v := &values[i]
		if v.Absent {
			if !f.Type.IsOptional() {
				return fmt.Errorf("wire: write %s: field %s is not optional", s.Name, f.Name)
			}
			continue
		}
		if v.Type != f.Type.Base() {
			return fmt.Errorf("wire: write %s: field %s is %v, value is %v", s.Name, f.Name, f.Type.Base(), v.Type)
		}
		if err := checkValue(v, 0); err != nil {
			return fmt.Errorf("wire: write %s: field %s: %w", s.Name, f.Name, err)
		}
	}
	for i := range values {
		w.internValue(&values[i])
	}
	if err := w.begin(s, ts); err != nil {
		return err
	}
	for i, f := range s.Fields {
		v := &values[i]
		if f.Type.IsOptional() {
			if v.Absent {
				w.buf = append(w.buf, 0)
				continue
			}
			w.buf = append(w.buf, 1)
		}
		w.appendValue(v)
	}
	return w.maybeFlush()
}

// checkValue validates what Write cannot encode.
func checkValue(v *Value, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("dynamic values nested deeper than %d", maxDepth)
	}
	if !v.Type.Valid() || v.Type.IsOptional() {
		return fmt.Errorf("%w 0x%02x", ErrUnknownFieldType, uint8(v.Type))
	}
	switch v.Type {
	case U8:
		if v.U > 0xFF {
			return fmt.Errorf("%d overflows U8", v.U)
		}
	case U16:
		if v.U > 0xFFFF {
			return fmt.Errorf("%d overflows U16", v.U)
		}
	case U32:
		if v.U > 0xFFFFFFFF {
			return fmt.Errorf("%d overflows U32", v.U)
		}
	case DynamicList:
		for i := range v.List {
			if !v.List[i].Absent {
				if err := checkValue(&v.List[i], depth+1); err != nil {
					return err
				}
			} else if !v.List[i].Type.Valid() {
				return fmt.Errorf("absent list element needs a type")
			}
		}
	case DynamicMap:
		for i := range v.Entries {
			for _, x := range []*Value{&v.Entries[i].Key, &v.Entries[i].Value} {
				if !x.Absent {
					if err := checkValue(x, depth+1); err != nil {
						return err
					}
				} else if !x.Type.Valid() {
					return fmt.Errorf("absent map key or value needs a type")
				}
			}
		}
	}
	return nil
}

// internValue interns the pooled strings and stacks in v, in encoding order,
// writing pool frames for new ones.
func (w *Writer) internValue(v *Value) {
	if v.Absent {
		return
	}
	switch v.Type {
	case PooledString:
		v.U = uint64(w.internString(v.S))
	case PooledStackFrames:
		v.U = uint64(w.internStack(v.Frames))
	case DynamicList:
		for i := range v.List {
			w.internValue(&v.List[i])
		}
	case DynamicMap:
		for i := range v.Entries {
			w.internValue(&v.Entries[i].Key)
			w.internValue(&v.Entries[i].Value)
		}
	}
}

// internString returns the pool id of s, writing a pool frame if s is new in
// this stream.
func (w *Writer) internString(s string) uint32 {
	if id, ok := w.strs[s]; ok {
		return id
	}
	id := w.nextStr
	w.nextStr++
	w.strs[s] = id
	w.buf = append(w.buf, tagStringPool, 1, 0, 0, 0)
	w.buf = le.AppendUint32(w.buf, id)
	w.buf = le.AppendUint32(w.buf, uint32(len(s)))
	w.buf = append(w.buf, s...)
	return id
}

func hashFrames(f []uint64) uint64 {
	h := uint64(len(f)) * 0x9E3779B97F4A7C15
	for _, x := range f {
		h = (h ^ x) * 0xBF58476D1CE4E5B9
		h ^= h >> 31
	}
	return h
}

// internStack returns the pool id of the stack f, writing a pool frame if it
// is new in this stream.
func (w *Writer) internStack(f []uint64) uint32 {
	h := hashFrames(f)
	for _, e := range w.stacks[h] {
		if slices.Equal(e.frames, f) {
			return e.id
		}
	}
	id := w.nextStack
	w.nextStack++
	w.stacks[h] = append(w.stacks[h], stackEntry{slices.Clone(f), id})
	w.buf = append(w.buf, tagStackPool, 1, 0, 0, 0)
	w.buf = le.AppendUint32(w.buf, id)
	w.buf = le.AppendUint32(w.buf, uint32(len(f)))
	for _, x := range f {
		w.buf = le.AppendUint64(w.buf, x)
	}
	return id
}

// begin writes the schema frame if s is new in this stream, a timestamp
// reset if needed, and the event frame up to its field values.
func (w *Writer) begin(s *Schema, ts uint64) error {
	id, ok := w.types[s]
	if !ok {
		if len(w.types) > 0xFFFF {
			return fmt.Errorf("wire: write %s: more than 65536 schemas in one stream", s.Name)
		}
		id = uint16(len(w.types))
		w.types[s] = id
		w.appendSchema(id, s)
	}
	var delta uint64
	if s.HasTimestamp {
		if ts < w.base || ts-w.base > 0xFFFFFF {
			w.buf = append(w.buf, tagTimeReset)
			w.buf = le.AppendUint64(w.buf, ts)
			w.base = ts
		}
		delta = ts - w.base
		w.base = ts
	}
	w.buf = append(w.buf, tagEvent, byte(id), byte(id>>8))
	if s.HasTimestamp {
		w.buf = append(w.buf, byte(delta), byte(delta>>8), byte(delta>>16))
	}
	return nil
}

func (w *Writer) appendSchema(id uint16, s *Schema) {
	b := append(w.buf, tagSchema)
	b = le.AppendUint16(b, id)
	b = le.AppendUint16(b, uint16(len(s.Name)))
	b = append(b, s.Name...)
	if s.HasTimestamp {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = le.AppendUint16(b, uint16(len(s.Fields)))
	for _, f := range s.Fields {
		b = le.AppendUint16(b, uint16(len(f.Name)))
		b = append(b, f.Name...)
		b = append(b, byte(f.Type))
	}
	w.buf = b
}

// appendValue encodes v (checked and interned) without a presence byte.
func (w *Writer) appendValue(v *Value) {
	b := w.buf
	switch v.Type {
	case I64, F64:
		b = le.AppendUint64(b, v.U)
	case Bool:
		if v.U != 0 {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	case U8:
		b = append(b, byte(v.U))
	case U16:
		b = le.AppendUint16(b, uint16(v.U))
	case U32, PooledString, PooledStackFrames:
		b = le.AppendUint32(b, uint32(v.U))
	case Varint:
		b = binary.AppendUvarint(b, v.U)
	case String:
		b = le.AppendUint32(b, uint32(len(v.S)))
		b = append(b, v.S...)
	case Bytes:
		b = le.AppendUint32(b, uint32(len(v.B)))
		b = append(b, v.B...)
	case StackFrames:
		b = le.AppendUint32(b, uint32(len(v.Frames)))
		for _, x := range v.Frames {
			b = le.AppendUint64(b, x)
		}
	case StringMap:
		b = le.AppendUint32(b, uint32(len(v.Map)))
		for _, p := range v.Map {
			b = le.AppendUint32(b, uint32(len(p.Key)))
			b = append(b, p.Key...)
			b = le.AppendUint32(b, uint32(len(p.Value)))
			b = append(b, p.Value...)
		}
	case DynamicList:
		b = le.AppendUint32(b, uint32(len(v.List)))
		w.buf = b
		for i := range v.List {
			w.appendTagged(&v.List[i])
		}
		return
	case DynamicMap:
		b = le.AppendUint32(b, uint32(len(v.Entries)))
		w.buf = b
		for i := range v.Entries {
			w.appendTagged(&v.Entries[i].Key)
			w.appendTagged(&v.Entries[i].Value)
		}
		return
	}
	w.buf = b
}

// appendTagged encodes an element of a dynamic list or map: its tag, then
// its value. An absent element is written as an absent optional.
func (w *Writer) appendTagged(v *Value) {
	if v.Absent {
		w.buf = append(w.buf, byte(Optional(v.Type)), 0)
		return
	}
	w.buf = append(w.buf, byte(v.Type))
	w.appendValue(v)
}
