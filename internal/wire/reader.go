package wire

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// Frame tags.
const (
	tagSchema      = 0x01
	tagEvent       = 0x02
	tagStringPool  = 0x03
	tagStackPool   = 0x04
	tagTimeReset   = 0x05
	tagAnnotations = 0x06
	tagHeader      = 0x54 // 'T' of "TRC\x00": a header at a frame boundary resets the stream
)

// Version is the format version this package writes.
const Version = 1

var magic = [4]byte{'T', 'R', 'C', 0}

// HeaderSize is the length of a stream header: the magic and the version.
// A stream of no more bytes holds no frame.
const HeaderSize = len(magic) + 1

const (
	maxDepth     = 64  // nesting of dynamic lists and maps
	maxInternLen = 256 // longer strings are not interned
	maxInterned  = 1 << 16
	minBuf       = 64 << 10
	arenaChunk   = 4096 // u64s per stack-pool arena chunk
)

var le = binary.LittleEndian

// Stats counts what a Reader has consumed.
type Stats struct {
	Bytes            int64 // decompressed bytes consumed
	Headers          int   // stream headers, the first one included
	Schemas          int   // schema frames, re-registrations included
	StringPoolFrames int
	StackPoolFrames  int
	TimestampResets  int
	AnnotationFrames int
	Events           int
}

// Reader decodes a TRC v1 file. It is not safe for concurrent use.
type Reader struct {
	src    io.Reader
	buf    []byte
	r, w   int
	base   int64 // offset of buf[0]
	srcErr error
	err    error // sticky

	// Stream state, reset by every header.
	types   []*Schema
	strs    map[uint32]string
	stacks  map[uint32][]uint64
	ts      uint64
	annots  map[*Schema][]Annotation
	started bool

	intern  map[string]string
	schemas map[string]*Schema // interned schemas across streams, keyed by encoding
	arena   []uint64
	key     []byte

	// Context for errors.
	frameOff int64
	frameTag byte
	what     string // static description of the frame part
	name     string // schema name, if known
	field    string // field name, if decoding a field

	stats Stats
}

// NewReader returns a Reader for r, which may be gzip-compressed (sniffed
// from the bytes 1f 8b). Decompression errors are reported as read errors.
func NewReader(r io.Reader) *Reader {
	br := bufio.NewReaderSize(r, minBuf)
	src := io.Reader(br)
	if b, _ := br.Peek(2); len(b) == 2 && b[0] == 0x1f && b[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			src = errReader{err}
		} else {
			zr.Multistream(true)
			src = zr
		}
	}
	return &Reader{
		src:     src,
		strs:    make(map[uint32]string),
		stacks:  make(map[uint32][]uint64),
		annots:  make(map[*Schema][]Annotation),
		intern:  make(map[string]string),
		schemas: make(map[string]*Schema),
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// Stats returns the frame counts so far.
func (r *Reader) Stats() Stats {
	s := r.stats
	s.Bytes = r.off()
	return s
}

// Annotations returns the annotations of schema s received in the current
// stream.
func (r *Reader) Annotations(s *Schema) []Annotation { return r.annots[s] }

// Next returns the next event in a newly allocated Event, or io.EOF at the
// clean end of the input.
func (r *Reader) Next() (*Event, error) {
	ev := new(Event)
	if err := r.ReadEvent(ev); err != nil {
		return nil, err
	}
	return ev, nil
}

// ReadEvent decodes the next event into ev, reusing its memory (see Event).
// It returns io.EOF at the clean end of the input and a *FormatError for
// undecodable input; after an error, every call returns the same error.
func (r *Reader) ReadEvent(ev *Event) error {
	if r.err != nil {
		return r.err
	}
	err := r.readEvent(ev)
	if err != nil {
		r.err = err
	}
	return err
}

func (r *Reader) off() int64 { return r.base + int64(r.r) }

// fail wraps err with the current position and context.
func (r *Reader) fail(err error, format string, args ...any) error {
	what := r.what
	if r.name != "" {
		what += " " + r.name
	}
	if r.field != "" {
		what += " field " + r.field
	}
	if format != "" {
		if what != "" {
			what += ": "
		}
		what += fmt.Sprintf(format, args...)
	}
	return &FormatError{Offset: r.off(), FrameOffset: r.frameOff, Frame: r.frameTag, What: what, Err: err}
}

// need returns the next n bytes, valid until the next call to need.
func (r *Reader) need(n int) ([]byte, error) {
	if r.w-r.r >= n {
		b := r.buf[r.r : r.r+n : r.r+n]
		r.r += n
		return b, nil
	}
	return r.needSlow(n)
}

func (r *Reader) needSlow(n int) ([]byte, error) {
	if err := r.fill(n); err != nil {
		return nil, err
	}
	b := r.buf[r.r : r.r+n : r.r+n]
	r.r += n
	return b, nil
}

// fill makes n bytes available in buf[r:w]. The buffer grows by doubling
// while data actually arrives, so a huge length read from a corrupt file
// costs no more memory than the file holds.
func (r *Reader) fill(n int) error {
	if n < 0 {
		return r.fail(ErrInvalid, "length overflows int")
	}
	if r.r > 0 {
		copy(r.buf, r.buf[r.r:r.w])
		r.base += int64(r.r)
		r.w -= r.r
		r.r = 0
	}
	for r.w < n {
		if r.srcErr != nil {
			// Report the offset where the data ends.
			saved := r.r
			r.r = r.w
			err := r.srcErr
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			e := r.fail(err, "need %d bytes, have %d", n, r.w-saved)
			r.r = saved
			return e
		}
		if r.w == len(r.buf) {
			nb := make([]byte, max(2*len(r.buf), minBuf))
			copy(nb, r.buf[:r.w])
			r.buf = nb
		}
		m, err := r.src.Read(r.buf[r.w:])
		r.w += m
		if err != nil {
			r.srcErr = err
		}
	}
	return nil
}

// peek returns the next byte without consuming it; ok is false at the end
// of the input (err is then nil at a clean EOF).
func (r *Reader) peek() (b byte, ok bool, err error) {
	if r.r < r.w {
		return r.buf[r.r], true, nil
	}
	if r.srcErr == nil {
		_ = r.fill(1)
	}
	if r.r < r.w {
		return r.buf[r.r], true, nil
	}
	if r.srcErr == io.EOF {
		return 0, false, nil
	}
	return 0, false, r.fail(r.srcErr, "")
}

func (r *Reader) u8() (uint8, error) {
	b, err := r.need(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

func (r *Reader) u16() (uint16, error) {
	b, err := r.need(2)
	if err != nil {
		return 0, err
	}
	return le.Uint16(b), nil
}

func (r *Reader) u32() (uint32, error) {
	b, err := r.need(4)
	if err != nil {
		return 0, err
	}
	return le.Uint32(b), nil
}

func (r *Reader) u64() (uint64, error) {
	b, err := r.need(8)
	if err != nil {
		return 0, err
	}
	return le.Uint64(b), nil
}

func (r *Reader) uvarint() (uint64, error) {
	if r.w-r.r >= binary.MaxVarintLen64 {
		v, n := binary.Uvarint(r.buf[r.r:r.w])
		if n <= 0 {
			return 0, r.fail(ErrInvalid, "varint overflows u64")
		}
		r.r += n
		return v, nil
	}
	var v uint64
	for i := 0; ; i++ {
		c, err := r.u8()
		if err != nil {
			return 0, err
		}
		if i == binary.MaxVarintLen64-1 && c > 1 {
			return 0, r.fail(ErrInvalid, "varint overflows u64")
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, nil
		}
	}
}

// str reads n bytes as an interned string.
func (r *Reader) str(n int) (string, error) {
	b, err := r.need(n)
	if err != nil {
		return "", err
	}
	return r.internBytes(b), nil
}

// str32 reads a string with a u32 length prefix.
func (r *Reader) str32() (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	return r.str(int(n))
}

func (r *Reader) internBytes(b []byte) string {
	if len(b) > maxInternLen {
		return string(b)
	}
	if s, ok := r.intern[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(r.intern) < maxInterned {
		r.intern[s] = s
	}
	return s
}

func (r *Reader) resetStream() {
	clear(r.types)
	r.types = r.types[:0]
	clear(r.strs)
	clear(r.stacks)
	clear(r.annots)
	r.ts = 0
}

func (r *Reader) readEvent(ev *Event) error {
	for {
		r.what, r.name, r.field = "", "", ""
		r.frameOff = r.off()
		tag, ok, err := r.peek()
		if err != nil {
			return err
		}
		if !ok {
			if !r.started {
				r.frameTag = tagHeader
				return r.fail(io.ErrUnexpectedEOF, "empty input")
			}
			return io.EOF
		}
		r.frameTag = tag
		if !r.started && tag != tagHeader {
			r.frameTag = tagHeader
			return r.fail(ErrBadMagic, "")
		}
		switch tag {
		case tagHeader:
			if err := r.readHeader(); err != nil {
				return err
			}
		case tagSchema:
			r.r++
			if err := r.readSchema(); err != nil {
				return err
			}
		case tagEvent:
			r.r++
			if err := r.readEventFrame(ev); err != nil {
				return err
			}
			r.stats.Events++
			return nil
		case tagStringPool:
			r.r++
			if err := r.readStringPool(); err != nil {
				return err
			}
		case tagStackPool:
			r.r++
			if err := r.readStackPool(); err != nil {
				return err
			}
		case tagTimeReset:
			r.r++
			r.what = "timestamp"
			ts, err := r.u64()
			if err != nil {
				return err
			}
			r.ts = ts
			r.stats.TimestampResets++
		case tagAnnotations:
			r.r++
			if err := r.readAnnotations(); err != nil {
				return err
			}
		default:
			return r.fail(ErrUnknownTag, "")
		}
	}
}

func (r *Reader) readHeader() error {
	b, err := r.need(HeaderSize)
	if err != nil {
		return err
	}
	if [4]byte(b[:4]) != magic {
		r.r -= HeaderSize
		return r.fail(ErrBadMagic, "")
	}
	r.started = true
	r.resetStream()
	r.stats.Headers++
	return nil
}

func (r *Reader) readSchema() error {
	r.what = "schema"
	id, err := r.u16()
	if err != nil {
		return err
	}
	n, err := r.u16()
	if err != nil {
		return err
	}
	name, err := r.str(int(n))
	if err != nil {
		return err
	}
	r.name = name
	hasTS, err := r.u8()
	if err != nil {
		return err
	}
	nf, err := r.u16()
	if err != nil {
		return err
	}
	// The key identifies the definition, to share one *Schema between
	// streams and keep decoding allocation-free in steady state.
	key := append(r.key[:0], name...)
	key = append(key, 0, hasTS)
	fields := make([]Field, 0, min(int(nf), 64))
	for i := 0; i < int(nf); i++ {
		fl, err := r.u16()
		if err != nil {
			return err
		}
		fname, err := r.str(int(fl))
		if err != nil {
			return err
		}
		t, err := r.u8()
		if err != nil {
			return err
		}
		if !FieldType(t).Valid() {
			r.r--
			r.field = fname
			return r.fail(ErrUnknownFieldType, "0x%02x", t)
		}
		fields = append(fields, Field{fname, FieldType(t)})
		key = le.AppendUint16(key, fl)
		key = append(key, fname...)
		key = append(key, t)
	}
	r.key = key
	s, ok := r.schemas[string(key)]
	if !ok {
		s = &Schema{Name: name, HasTimestamp: hasTS != 0, Fields: fields}
		if len(r.schemas) < maxInterned {
			r.schemas[string(key)] = s
		}
	}
	if int(id) < len(r.types) && r.types[id] != nil {
		if !r.types[id].Equal(s) {
			return r.fail(ErrSchemaConflict, "type id %d already is %s", id, r.types[id].Name)
		}
	} else {
		for len(r.types) <= int(id) {
			r.types = append(r.types, nil)
		}
		r.types[id] = s
	}
	r.stats.Schemas++
	return nil
}

func (r *Reader) readEventFrame(ev *Event) error {
	r.what = "event"
	id, err := r.u16()
	if err != nil {
		return err
	}
	if int(id) >= len(r.types) || r.types[id] == nil {
		r.r -= 2
		return r.fail(ErrUnknownType, "type id %d", id)
	}
	s := r.types[id]
	r.name = s.Name
	ev.Schema = s
	ev.Timestamp = 0
	if s.HasTimestamp {
		b, err := r.need(3)
		if err != nil {
			return err
		}
		r.ts += uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16
		ev.Timestamp = r.ts
	}
	n := len(s.Fields)
	if cap(ev.Values) < n {
		ev.Values = append(ev.Values[:cap(ev.Values)], make([]Value, n-cap(ev.Values))...)
	}
	ev.Values = ev.Values[:n]
	for i := range s.Fields {
		f := &s.Fields[i]
		r.field = f.Name
		if err := r.value(&ev.Values[i], f.Type, 0); err != nil {
			return err
		}
	}
	return nil
}

// value decodes one value of type t into v.
func (r *Reader) value(v *Value, t FieldType, depth int) error {
	if depth > maxDepth {
		return r.fail(ErrInvalid, "dynamic values nested deeper than %d", maxDepth)
	}
	v.Absent = false
	if t.IsOptional() {
		t = t.Base()
		v.Type = t
		p, err := r.u8()
		if err != nil {
			return err
		}
		switch p {
		case 0:
			v.Absent = true
			return nil
		case 1:
		default:
			r.r--
			return r.fail(ErrInvalid, "presence byte 0x%02x", p)
		}
	}
	v.Type = t
	switch t {
	case I64, F64:
		x, err := r.u64()
		v.U = x
		return err
	case Bool:
		x, err := r.u8()
		v.U = 0
		if x != 0 {
			v.U = 1
		}
		return err
	case U8:
		x, err := r.u8()
		v.U = uint64(x)
		return err
	case U16:
		x, err := r.u16()
		v.U = uint64(x)
		return err
	case U32:
		x, err := r.u32()
		v.U = uint64(x)
		return err
	case Varint:
		x, err := r.uvarint()
		v.U = x
		return err
	case String:
		s, err := r.str32()
		v.S = s
		return err
	case Bytes:
		n, err := r.u32()
		if err != nil {
			return err
		}
		b, err := r.need(int(n))
		if err != nil {
			return err
		}
		v.B = append(v.B[:0], b...)
		return nil
	case PooledString:
		id, err := r.u32()
		if err != nil {
			return err
		}
		s, ok := r.strs[id]
		if !ok {
			r.r -= 4
			return r.fail(ErrUnresolvedPool, "string pool id %d", id)
		}
		v.U, v.S = uint64(id), s
		return nil
	case PooledStackFrames:
		id, err := r.u32()
		if err != nil {
			return err
		}
		f, ok := r.stacks[id]
		if !ok {
			r.r -= 4
			return r.fail(ErrUnresolvedPool, "stack pool id %d", id)
		}
		v.U, v.Frames = uint64(id), f
		return nil
	case StackFrames:
		n, err := r.u32()
		if err != nil {
			return err
		}
		f := v.frames[:0]
		for range n {
			x, err := r.u64()
			if err != nil {
				return err
			}
			f = append(f, x)
		}
		v.frames, v.Frames = f, f
		return nil
	case StringMap:
		n, err := r.u32()
		if err != nil {
			return err
		}
		m := v.Map[:0]
		for range n {
			k, err := r.str32()
			if err != nil {
				return err
			}
			val, err := r.str32()
			if err != nil {
				return err
			}
			m = append(m, StringPair{k, val})
		}
		v.Map = m
		return nil
	case DynamicList:
		n, err := r.u32()
		if err != nil {
			return err
		}
		l := v.List[:0]
		for range n {
			l = grow(l)
			if err := r.dynamic(&l[len(l)-1], depth); err != nil {
				v.List = l
				return err
			}
		}
		v.List = l
		return nil
	case DynamicMap:
		n, err := r.u32()
		if err != nil {
			return err
		}
		m := v.Entries[:0]
		for range n {
			m = grow(m)
			e := &m[len(m)-1]
			if err := r.dynamic(&e.Key, depth); err != nil {
				v.Entries = m
				return err
			}
			if err := r.dynamic(&e.Value, depth); err != nil {
				v.Entries = m
				return err
			}
		}
		v.Entries = m
		return nil
	}
	return r.fail(ErrUnknownFieldType, "0x%02x", uint8(t))
}

// dynamic decodes a tagged value inside a dynamic list or map.
func (r *Reader) dynamic(v *Value, depth int) error {
	t, err := r.u8()
	if err != nil {
		return err
	}
	if !FieldType(t).Valid() {
		r.r--
		return r.fail(ErrUnknownFieldType, "dynamic value tag 0x%02x", t)
	}
	return r.value(v, FieldType(t), depth+1)
}

// grow extends s by one element, reusing the element's old memory when the
// capacity allows.
func grow[T any](s []T) []T {
	if len(s) < cap(s) {
		return s[:len(s)+1]
	}
	var zero T
	return append(s, zero)
}

func (r *Reader) readStringPool() error {
	r.what = "string pool"
	n, err := r.u32()
	if err != nil {
		return err
	}
	for range n {
		id, err := r.u32()
		if err != nil {
			return err
		}
		l, err := r.u32()
		if err != nil {
			return err
		}
		s, err := r.str(int(l))
		if err != nil {
			return err
		}
		r.strs[id] = s
	}
	r.stats.StringPoolFrames++
	return nil
}

func (r *Reader) readStackPool() error {
	r.what = "stack pool"
	n, err := r.u32()
	if err != nil {
		return err
	}
	for range n {
		id, err := r.u32()
		if err != nil {
			return err
		}
		cnt, err := r.u32()
		if err != nil {
			return err
		}
		// Check the data is there before taking arena space for it.
		if err := r.fill(int(min(uint64(cnt)*8, math.MaxInt32))); err != nil {
			return err
		}
		var f []uint64
		if int(cnt) <= arenaChunk {
			if len(r.arena) < int(cnt) {
				r.arena = make([]uint64, arenaChunk)
			}
			f = r.arena[:cnt:cnt]
			r.arena = r.arena[cnt:]
		} else {
			f = make([]uint64, cnt)
		}
		b, err := r.need(int(cnt) * 8)
		if err != nil {
			return err
		}
		for i := range f {
			f[i] = le.Uint64(b[8*i:])
		}
		r.stacks[id] = f
	}
	r.stats.StackPoolFrames++
	return nil
}

func (r *Reader) readAnnotations() error {
	r.what = "annotations"
	id, err := r.uvarint()
	if err != nil {
		return err
	}
	var s *Schema
	if id < uint64(len(r.types)) {
		s = r.types[id]
	}
	n, err := r.u16()
	if err != nil {
		return err
	}
	for range n {
		fi, err := r.u16()
		if err != nil {
			return err
		}
		kl, err := r.u16()
		if err != nil {
			return err
		}
		k, err := r.str(int(kl))
		if err != nil {
			return err
		}
		vl, err := r.u32()
		if err != nil {
			return err
		}
		v, err := r.str(int(vl))
		if err != nil {
			return err
		}
		if s != nil { // annotations of unknown types are ignored
			r.annots[s] = append(r.annots[s], Annotation{Field: int(fi), Key: k, Value: v})
		}
	}
	r.stats.AnnotationFrames++
	return nil
}

// ReadAll reads all events of r, each in its own Event. On error it returns
// the events decoded before it.
func ReadAll(rd io.Reader) ([]*Event, error) {
	r := NewReader(rd)
	var evs []*Event
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}
