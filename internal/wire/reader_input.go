package wire

import (
	"encoding/binary"
	"fmt"
	"io"
)

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
