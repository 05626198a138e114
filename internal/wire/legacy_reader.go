package wire

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// LegacyReader reads a TOKIOTRC file record by record.
type LegacyReader struct {
	br      *bufio.Reader
	version uint32
	off     int64 // offset of the next unread byte (decompressed)
	start   int64 // offset of the record being decoded
	code    int   // code of the record being decoded, -1 for the header
	err     error // sticky: io.EOF or the first error

	scratch [LegacyMaxFrames * 8]byte // fixed fields and frame lists
	sbuf    []byte                    // string bytes, grown up to 64 KiB
}

// NewLegacyReader reads and checks the header of a TOKIOTRC file. Data that
// starts with the gzip magic (1f 8b) is decompressed first; offsets in errors
// then count decompressed bytes.
func NewLegacyReader(r io.Reader) (*LegacyReader, error) {
	lr := &LegacyReader{code: -1}
	br := bufio.NewReaderSize(r, 64<<10)
	b, err := br.Peek(2)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, &LegacyError{Code: -1, Msg: "read: " + err.Error(), Err: err}
	}
	if len(b) == 2 && b[0] == 0x1f && b[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, &LegacyError{Code: -1, Msg: "gzip: " + err.Error(), Err: err}
		}
		br = bufio.NewReaderSize(gz, 64<<10)
	}
	lr.br = br

	h, err := lr.fill(legacyHeaderLen)
	if err != nil {
		return nil, err
	}
	if [8]byte(h[:8]) != legacyMagic {
		return nil, &LegacyError{Code: -1, Msg: fmt.Sprintf("magic %q: %v", h[:8], ErrLegacyMagic), Err: ErrLegacyMagic}
	}
	lr.version = binary.LittleEndian.Uint32(h[8:])
	if !legacyVersionOK(lr.version) {
		return nil, &LegacyError{Code: -1, Err: ErrLegacyVersion,
			Msg: fmt.Sprintf("version %d: %v (supported %d..%d)", lr.version, ErrLegacyVersion, LegacyMinVersion, LegacyMaxVersion)}
	}
	return lr, nil
}

// Version returns the version from the header.
func (r *LegacyReader) Version() uint32 { return r.version }

// Read decodes the next record into rec, reusing the backing arrays of
// rec.Frames and rec.Metadata (copy them to keep them past the next Read).
// It returns io.EOF after the last record. A cut-off record returns a
// *LegacyError wrapping io.ErrUnexpectedEOF; a code the version does not
// define returns one wrapping ErrLegacyUnknownCode. After any error, Read
// keeps returning it.
func (r *LegacyReader) Read(rec *LegacyRecord) error {
	if r.err != nil {
		return r.err
	}
	r.start, r.code = r.off, -1
	c, err := r.br.ReadByte()
	if err != nil {
		if err == io.EOF {
			r.err = io.EOF
			return io.EOF
		}
		r.code = legacyCodeNotRead
		return r.fail(err)
	}
	r.off++
	code := LegacyCode(c)
	r.code = int(c)
	if !legacyDefined(code, r.version) {
		r.err = &LegacyError{Offset: r.start, Code: r.code, Err: ErrLegacyUnknownCode,
			Msg: fmt.Sprintf("%v in version %d", ErrLegacyUnknownCode, r.version)}
		return r.err
	}

	frames, meta := rec.Frames[:0], rec.Metadata[:0]
	*rec = LegacyRecord{Code: code}
	le := binary.LittleEndian
	var b []byte
	switch code {
	case LegacyPollStart:
		if b, err = r.fill(12); err != nil {
			return err
		}
		rec.TsUs = le.Uint32(b)
		rec.Worker, rec.LocalQueue = b[4], b[5]
		rec.TaskID = le.Uint32(b[6:])
		rec.SpawnLocID = le.Uint16(b[10:])
	case LegacyPollEnd:
		if b, err = r.fill(5); err != nil {
			return err
		}
		rec.TsUs = le.Uint32(b)
		rec.Worker = b[4]
	case LegacyWorkerPark:
		if b, err = r.fill(10); err != nil {
			return err
		}
		rec.TsUs = le.Uint32(b)
		rec.Worker, rec.LocalQueue = b[4], b[5]
		rec.CPUUs = le.Uint32(b[6:])
	case LegacyWorkerUnpark:
		if b, err = r.fill(14); err != nil {
			return err
		}
		rec.TsUs = le.Uint32(b)
		rec.Worker, rec.LocalQueue = b[4], b[5]
		rec.CPUUs = le.Uint32(b[6:])
		rec.SchedWaitUs = le.Uint32(b[10:])
	case LegacyQueueSample:
		if b, err = r.fill(5); err != nil {
			return err
		}
		rec.TsUs = le.Uint32(b)
		rec.GlobalQueue = b[4]
	case LegacySpawnLocationDef:
		if b, err = r.fill(2); err != nil {
			return err
		}
		rec.SpawnLocID = le.Uint16(b)
		if rec.Name, err = r.str(); err != nil {
			return err
		}
	case LegacyTaskSpawn:
		if r.version >= 15 {
			if b, err = r.fill(4); err != nil {
				return err
			}
			rec.TsUs = le.Uint32(b)
		}
		if b, err = r.fill(6); err != nil {
			return err
		}
		rec.TaskID = le.Uint32(b)
		rec.SpawnLocID = le.Uint16(b[4:])
	case LegacyWakeEvent:
		if b, err = r.fill(13); err != nil {
			return err
		}
		rec.TsUs = le.Uint32(b)
		rec.Waker = le.Uint32(b[4:])
		rec.Woken = le.Uint32(b[8:])
		rec.TargetWorker = b[12]
	case LegacyCpuSample:
		if b, err = r.fill(11); err != nil {
			return err
		}
		rec.TsUs = le.Uint32(b)
		rec.Worker = b[4]
		rec.Tid = le.Uint32(b[5:])
		rec.Source = b[9]
		n := int(b[10])
		if n > 0 {
			if b, err = r.fill(8 * n); err != nil {
				return err
			}
			for i := range n {
				frames = append(frames, le.Uint64(b[8*i:]))
			}
			rec.Frames = frames
		}
	case LegacyCallframeDef:
		if b, err = r.fill(8); err != nil {
			return err
		}
		rec.Addr = le.Uint64(b)
		if rec.Symbol, err = r.str(); err != nil {
			return err
		}
		if b, err = r.fill(2); err != nil {
			return err
		}
		if n := le.Uint16(b); n != legacyNoLocation {
			rec.HasLocation = true
			if rec.Location, err = r.strN(int(n)); err != nil {
				return err
			}
		}
	case LegacyThreadNameDef:
		if b, err = r.fill(4); err != nil {
			return err
		}
		rec.Tid = le.Uint32(b)
		if rec.Name, err = r.str(); err != nil {
			return err
		}
	case LegacySegmentMetadata:
		if r.version >= 18 {
			if b, err = r.fill(8); err != nil {
				return err
			}
			rec.TsNs = le.Uint64(b)
		}
		if b, err = r.fill(2); err != nil {
			return err
		}
		n := int(le.Uint16(b))
		for range n {
			var kv LegacyKV
			if kv.Key, err = r.str(); err != nil {
				return err
			}
			if kv.Value, err = r.str(); err != nil {
				return err
			}
			meta = append(meta, kv)
		}
		if n > 0 {
			rec.Metadata = meta
		}
	case LegacyTaskTerminate:
		if r.version >= 15 {
			if b, err = r.fill(4); err != nil {
				return err
			}
			rec.TsUs = le.Uint32(b)
		}
		if b, err = r.fill(4); err != nil {
			return err
		}
		rec.TaskID = le.Uint32(b)
	}
	return nil
}

// fill reads exactly n ≤ len(r.scratch) bytes into r.scratch.
func (r *LegacyReader) fill(n int) ([]byte, error) {
	b := r.scratch[:n]
	m, err := io.ReadFull(r.br, b)
	r.off += int64(m)
	if err != nil {
		return nil, r.fail(err)
	}
	return b, nil
}

// str reads a u16 length and that many bytes.
func (r *LegacyReader) str() (string, error) {
	b, err := r.fill(2)
	if err != nil {
		return "", err
	}
	return r.strN(int(binary.LittleEndian.Uint16(b)))
}

func (r *LegacyReader) strN(n int) (string, error) {
	if n == 0 {
		return "", nil
	}
	if cap(r.sbuf) < n {
		r.sbuf = make([]byte, n)
	}
	b := r.sbuf[:n]
	m, err := io.ReadFull(r.br, b)
	r.off += int64(m)
	if err != nil {
		return "", r.fail(err)
	}
	return string(b), nil
}

// fail records err for the record being decoded and makes it sticky. Running
// out of data, whether plain EOF or a cut gzip stream, is a truncation.
func (r *LegacyReader) fail(err error) error {
	e := &LegacyError{Offset: r.start, Code: r.code}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		e.Msg, e.Err = "truncated", io.ErrUnexpectedEOF
	} else {
		e.Msg, e.Err = "read: "+err.Error(), err
	}
	r.err = e
	return e
}
