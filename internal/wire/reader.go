package wire

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"io"
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
	// Layouts for ReadSample: by type id in the stream, and by schema
	// across streams.
	layouts  []*Layout
	layoutBy map[*Schema]*Layout
	arena    []uint64
	key      []byte

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
		src:      src,
		strs:     make(map[uint32]string),
		stacks:   make(map[uint32][]uint64),
		annots:   make(map[*Schema][]Annotation),
		intern:   make(map[string]string),
		schemas:  make(map[string]*Schema),
		layoutBy: make(map[*Schema]*Layout),
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
	_, err := r.readEvent(ev, nil)
	if err != nil {
		r.err = err
	}
	return err
}

func (r *Reader) resetStream() {
	clear(r.types)
	r.types = r.types[:0]
	clear(r.layouts)
	r.layouts = r.layouts[:0]
	clear(r.strs)
	clear(r.stacks)
	clear(r.annots)
	r.ts = 0
}

// readEvent reads frames up to the next event and decodes it into ev, or
// into s if s is not nil and the fast path reads it (see ReadSample).
func (r *Reader) readEvent(ev *Event, s *CpuSampleRead) (sample bool, err error) {
	for {
		r.what, r.name, r.field = "", "", ""
		r.frameOff = r.off()
		tag, ok, err := r.peek()
		if err != nil {
			return false, err
		}
		if !ok {
			if !r.started {
				r.frameTag = tagHeader
				return false, r.fail(io.ErrUnexpectedEOF, "empty input")
			}
			return false, io.EOF
		}
		r.frameTag = tag
		if !r.started && tag != tagHeader {
			r.frameTag = tagHeader
			return false, r.fail(ErrBadMagic, "")
		}
		switch tag {
		case tagHeader:
			if err := r.readHeader(); err != nil {
				return false, err
			}
		case tagSchema:
			r.r++
			if err := r.readSchema(); err != nil {
				return false, err
			}
		case tagEvent:
			r.r++
			sample, err := r.readEventFrame(ev, s)
			if err != nil {
				return false, err
			}
			r.stats.Events++
			return sample, nil
		case tagStringPool:
			r.r++
			if err := r.readStringPool(); err != nil {
				return false, err
			}
		case tagStackPool:
			r.r++
			if err := r.readStackPool(); err != nil {
				return false, err
			}
		case tagTimeReset:
			r.r++
			r.what = "timestamp"
			ts, err := r.u64()
			if err != nil {
				return false, err
			}
			r.ts = ts
			r.stats.TimestampResets++
		case tagAnnotations:
			r.r++
			if err := r.readAnnotations(); err != nil {
				return false, err
			}
		default:
			return false, r.fail(ErrUnknownTag, "")
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
