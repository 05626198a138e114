package otelctx

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
)

var (
	// ErrNoContext means the thread has no context attached: its
	// otel_thread_ctx_v1 is NULL, or its TLS block for the variable was never
	// allocated (the thread never touched it).
	ErrNoContext = errors.New("no thread context attached")
	// ErrNotValid means the record's valid byte is not 1: the writer is
	// rewriting it in place, or detached it by clearing the flag. Either way
	// its other bytes must not be used.
	ErrNotValid = errors.New("thread context record not valid")
)

// RecordHeaderSize is the fixed part of a thread context record: trace id,
// span id, valid, trace flags, attrs-data-size. Readers read it first, then
// attrs-data-size more bytes.
const RecordHeaderSize = 28

// Offsets in the record (OTEP 4947, "Thread-Local Context Record"): packed,
// native-endian, the record 2-byte aligned.
const (
	offTraceID    = 0  // uint8[16], W3C; all zero: no trace
	offSpanID     = 16 // uint8[8], W3C
	offValid      = 24 // uint8, 1 = valid; anything else: ignore the record
	offTraceFlags = 25 // uint8, W3C trace-flags (bit 0: sampled)
	offAttrsSize  = 26 // uint16, bytes of attrs-data
	offAttrsData  = 28 // entries: key index uint8, length uint8, value [length]byte (UTF-8)
)

// ThreadCtx is a thread's active context as its record says.
type ThreadCtx struct {
	TraceID    [16]byte
	SpanID     [8]byte
	TraceFlags byte
	// Attrs are the record's attributes, one per key index, in the order of
	// their last occurrence (a writer may append a new value for a key
	// rather than rewrite the buffer, and the last one wins).
	Attrs []Attr
	// Record is the record's address in the process (0 for ParseRecord).
	Record uint64
}

// Attr is one attribute of a thread context record.
type Attr struct {
	Key   uint8  // index into threadlocal.attribute_key_map
	Name  string // the key's name, when the key map was known
	Value string
}

// HasSpan reports whether the record names a span: a valid record with a
// zero trace id says no span is active, and may still carry attributes.
func (c ThreadCtx) HasSpan() bool { return c.TraceID != [16]byte{} }

// TraceIDString and SpanIDString return the ids in lowercase hex, as W3C
// traceparent writes them.
func (c ThreadCtx) TraceIDString() string { return hex.EncodeToString(c.TraceID[:]) }
func (c ThreadCtx) SpanIDString() string  { return hex.EncodeToString(c.SpanID[:]) }

// RecordSize returns the full size of the record whose first
// RecordHeaderSize bytes are hdr, so that a reader knows how much more to
// read. It returns ErrNotValid when the valid byte is not 1: the size of an
// invalid record means nothing.
func RecordSize(hdr []byte) (int, error) {
	if len(hdr) < RecordHeaderSize {
		return 0, fmt.Errorf("%w: record header of %d bytes, want %d", ErrInvalid, len(hdr), RecordHeaderSize)
	}
	if v := hdr[offValid]; v != 1 {
		return 0, fmt.Errorf("%w: valid byte is %d", ErrNotValid, v)
	}
	return RecordHeaderSize + int(binary.LittleEndian.Uint16(hdr[offAttrsSize:])), nil
}

// ParseRecord decodes a thread context record: b holds the header and at
// least attrs-data-size bytes of attrs-data. keyMap, if not nil, names the
// key indexes; entries whose index is outside it are dropped, as the OTEP
// asks (a reader that meets an unknown index refreshes its key map first:
// see [Process.ThreadContextAt]). With a nil keyMap all entries are kept,
// unnamed.
func ParseRecord(b []byte, keyMap []string) (ThreadCtx, error) {
	var c ThreadCtx
	size, err := RecordSize(b)
	if err != nil {
		return c, err
	}
	if len(b) < size {
		return c, fmt.Errorf("%w: record of %d bytes, attrs-data-size says %d", ErrInvalid, len(b), size)
	}
	copy(c.TraceID[:], b[offTraceID:])
	copy(c.SpanID[:], b[offSpanID:])
	c.TraceFlags = b[offTraceFlags]
	c.Attrs = parseAttrs(b[offAttrsData:size], keyMap)
	return c, nil
}

// ParseAttrs decodes a record's attrs-data as ParseRecord does; data may
// be cut short (a reader that copied a bounded prefix): the entry cut is
// dropped with those after it.
func ParseAttrs(data []byte, keyMap []string) []Attr { return parseAttrs(data, keyMap) }

// parseAttrs decodes attrs-data. It stops at an entry that does not fit in
// the remaining bytes (the OTEP's rule), so a torn size never reads past
// the buffer.
func parseAttrs(data []byte, keyMap []string) []Attr {
	var attrs []Attr
	for len(data) >= 2 {
		key, n := data[0], int(data[1])
		if 2+n > len(data) {
			break
		}
		val := string(data[2 : 2+n])
		data = data[2+n:]
		if keyMap != nil && int(key) >= len(keyMap) {
			continue
		}
		a := Attr{Key: key, Value: val}
		if keyMap != nil {
			a.Name = keyMap[key]
		}
		// Last occurrence wins: drop an earlier entry of the same key.
		for i := range attrs {
			if attrs[i].Key == key {
				attrs = append(attrs[:i], attrs[i+1:]...)
				break
			}
		}
		attrs = append(attrs, a)
	}
	return attrs
}

// maxKey returns the largest key index in attrs-data, or -1.
func maxKey(data []byte) int {
	m := -1
	for len(data) >= 2 && 2+int(data[1]) <= len(data) {
		m = max(m, int(data[0]))
		data = data[2+int(data[1]):]
	}
	return m
}
