package wire

// This file holds the data model and the writer of the legacy TOKIOTRC format
// (versions 13 to 18), which the recorder wrote from Feb 23 to Mar 17, 2026.
// It exists so that old files can still be read, and so that tests and tools
// can produce them; new traces use TRC v1. See docs/trace-format.md, Part F.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// LegacyCode is the code byte that starts every legacy record. The values are
// those of the recorder's source constants, which the format doc calls
// authoritative (the doc comment there swaps codes 7, 8 and 9).
type LegacyCode uint8

// Legacy record codes.
const (
	LegacyPollStart        LegacyCode = 0
	LegacyPollEnd          LegacyCode = 1
	LegacyWorkerPark       LegacyCode = 2
	LegacyWorkerUnpark     LegacyCode = 3
	LegacyQueueSample      LegacyCode = 4
	LegacySpawnLocationDef LegacyCode = 5
	LegacyTaskSpawn        LegacyCode = 6
	LegacyWakeEvent        LegacyCode = 7
	LegacyCpuSample        LegacyCode = 8
	LegacyCallframeDef     LegacyCode = 9
	LegacyThreadNameDef    LegacyCode = 10
	LegacySegmentMetadata  LegacyCode = 11  // v17+
	LegacyTaskTerminate    LegacyCode = 172 // v14+
)

var legacyCodeNames = map[LegacyCode]string{
	LegacyPollStart:        "PollStart",
	LegacyPollEnd:          "PollEnd",
	LegacyWorkerPark:       "WorkerPark",
	LegacyWorkerUnpark:     "WorkerUnpark",
	LegacyQueueSample:      "QueueSample",
	LegacySpawnLocationDef: "SpawnLocationDef",
	LegacyTaskSpawn:        "TaskSpawn",
	LegacyWakeEvent:        "WakeEvent",
	LegacyCpuSample:        "CpuSample",
	LegacyCallframeDef:     "CallframeDef",
	LegacyThreadNameDef:    "ThreadNameDef",
	LegacySegmentMetadata:  "SegmentMetadata",
	LegacyTaskTerminate:    "TaskTerminate",
}

func (c LegacyCode) String() string {
	if s, ok := legacyCodeNames[c]; ok {
		return s
	}
	return fmt.Sprintf("LegacyCode(%d)", uint8(c))
}

// Versions this package reads and writes. Versions 6 to 12 existed, but their
// layouts are not documented (CpuSample had no tid before v13), so they are
// rejected rather than guessed.
const (
	LegacyMinVersion = 13
	LegacyMaxVersion = 18
)

// LegacyMaxFrames is the most frames a CpuSample can carry: the count is a u8.
const LegacyMaxFrames = 255

// LegacyMaxString is the longest string a record can carry (u16 length). A
// CallframeDef location is one byte shorter, because length 0xFFFF there
// means "no location".
const LegacyMaxString = 0xFFFF

const (
	legacyCodeHeader  = -1 // LegacyError.Code of a header error
	legacyCodeNotRead = -2 // LegacyError.Code when the code byte could not be read
)

const (
	legacyHeaderLen  = 12 // "TOKIOTRC" + u32 version
	legacyNoLocation = 0xFFFF
)

var legacyMagic = [8]byte{'T', 'O', 'K', 'I', 'O', 'T', 'R', 'C'}

// Errors a caller may check with errors.Is.
var (
	// ErrLegacyMagic: the data does not start with "TOKIOTRC".
	ErrLegacyMagic = errors.New("not a TOKIOTRC file")
	// ErrLegacyVersion: the version is outside LegacyMinVersion..LegacyMaxVersion.
	ErrLegacyVersion = errors.New("unsupported TOKIOTRC version")
	// ErrLegacyUnknownCode: a record code that the file's version does not define.
	// The old reader stopped silently here; this package says why it stops.
	ErrLegacyUnknownCode = errors.New("unknown record code")
	// ErrLegacyTooLong: a string or frame list longer than its length field allows.
	ErrLegacyTooLong = errors.New("too long for the legacy format")
)

// LegacyKV is one SegmentMetadata entry. Entries keep their file order.
type LegacyKV struct {
	Key, Value string
}

// LegacyRecord is one legacy record: a tagged struct in which Code says which
// fields are meaningful; the others are zero. Timestamps are microseconds
// since the recorder started (u32, wraps after about 71 minutes).
//
//	code                  fields
//	PollStart (0)         TsUs Worker LocalQueue TaskID SpawnLocID
//	PollEnd (1)           TsUs Worker
//	WorkerPark (2)        TsUs Worker LocalQueue CPUUs
//	WorkerUnpark (3)      TsUs Worker LocalQueue CPUUs SchedWaitUs
//	QueueSample (4)       TsUs GlobalQueue
//	SpawnLocationDef (5)  SpawnLocID Name (the location text)
//	TaskSpawn (6)         TaskID SpawnLocID; TsUs in v15+
//	WakeEvent (7)         TsUs Waker Woken TargetWorker
//	CpuSample (8)         TsUs Worker Tid Source Frames (≤ 255, leaf first)
//	CallframeDef (9)      Addr Symbol Location HasLocation
//	ThreadNameDef (10)    Tid Name
//	SegmentMetadata (11)  Metadata; TsNs in v18 (v17+ only)
//	TaskTerminate (172)   TaskID; TsUs in v15+ (v14+ only)
type LegacyRecord struct {
	Code LegacyCode

	TsUs uint32 // µs since recorder start
	TsNs uint64 // SegmentMetadata in v18 only

	Worker       uint8
	LocalQueue   uint8
	GlobalQueue  uint8
	TargetWorker uint8 // WakeEvent; 255 = unknown
	Source       uint8 // CpuSample: 0 = CPU profile, 1 = sched event

	TaskID      uint32
	SpawnLocID  uint16
	CPUUs       uint32
	SchedWaitUs uint32
	Waker       uint32
	Woken       uint32
	Tid         uint32

	Frames []uint64 // CpuSample

	Addr        uint64 // CallframeDef
	Symbol      string // CallframeDef
	Location    string // CallframeDef; meaningful only if HasLocation
	HasLocation bool   // CallframeDef; false is written as length 0xFFFF

	Name string // SpawnLocationDef text or ThreadNameDef name

	Metadata []LegacyKV // SegmentMetadata
}

// legacyDefined reports whether version defines code.
func legacyDefined(c LegacyCode, version uint32) bool {
	switch {
	case c <= LegacyThreadNameDef:
		return true
	case c == LegacySegmentMetadata:
		return version >= 17
	case c == LegacyTaskTerminate:
		return version >= 14
	}
	return false
}

func legacyVersionOK(v uint32) bool {
	return v >= LegacyMinVersion && v <= LegacyMaxVersion
}

// legacyAppend appends the encoding of rec in the given version to dst.
// On error dst is returned unchanged.
func legacyAppend(dst []byte, version uint32, rec *LegacyRecord) ([]byte, error) {
	if !legacyDefined(rec.Code, version) {
		return dst, fmt.Errorf("record code %d: %w in version %d", rec.Code, ErrLegacyUnknownCode, version)
	}
	tooLong := func(what string, n, limit int) error {
		return fmt.Errorf("record code %d: %s of %d: %w (at most %d)", rec.Code, what, n, ErrLegacyTooLong, limit)
	}
	le := binary.LittleEndian
	b := append(dst, byte(rec.Code))
	switch rec.Code {
	case LegacyPollStart:
		b = le.AppendUint32(b, rec.TsUs)
		b = append(b, rec.Worker, rec.LocalQueue)
		b = le.AppendUint32(b, rec.TaskID)
		b = le.AppendUint16(b, rec.SpawnLocID)
	case LegacyPollEnd:
		b = le.AppendUint32(b, rec.TsUs)
		b = append(b, rec.Worker)
	case LegacyWorkerPark:
		b = le.AppendUint32(b, rec.TsUs)
		b = append(b, rec.Worker, rec.LocalQueue)
		b = le.AppendUint32(b, rec.CPUUs)
	case LegacyWorkerUnpark:
		b = le.AppendUint32(b, rec.TsUs)
		b = append(b, rec.Worker, rec.LocalQueue)
		b = le.AppendUint32(b, rec.CPUUs)
		b = le.AppendUint32(b, rec.SchedWaitUs)
	case LegacyQueueSample:
		b = le.AppendUint32(b, rec.TsUs)
		b = append(b, rec.GlobalQueue)
	case LegacySpawnLocationDef:
		if len(rec.Name) > LegacyMaxString {
			return dst, tooLong("location length", len(rec.Name), LegacyMaxString)
		}
		b = le.AppendUint16(b, rec.SpawnLocID)
		b = legacyAppendString(b, rec.Name)
	case LegacyTaskSpawn:
		if version >= 15 {
			b = le.AppendUint32(b, rec.TsUs)
		}
		b = le.AppendUint32(b, rec.TaskID)
		b = le.AppendUint16(b, rec.SpawnLocID)
	case LegacyWakeEvent:
		b = le.AppendUint32(b, rec.TsUs)
		b = le.AppendUint32(b, rec.Waker)
		b = le.AppendUint32(b, rec.Woken)
		b = append(b, rec.TargetWorker)
	case LegacyCpuSample:
		if len(rec.Frames) > LegacyMaxFrames {
			return dst, tooLong("frame count", len(rec.Frames), LegacyMaxFrames)
		}
		b = le.AppendUint32(b, rec.TsUs)
		b = append(b, rec.Worker)
		b = le.AppendUint32(b, rec.Tid)
		b = append(b, rec.Source, byte(len(rec.Frames)))
		for _, f := range rec.Frames {
			b = le.AppendUint64(b, f)
		}
	case LegacyCallframeDef:
		if len(rec.Symbol) > LegacyMaxString {
			return dst, tooLong("symbol length", len(rec.Symbol), LegacyMaxString)
		}
		if rec.HasLocation && len(rec.Location) >= legacyNoLocation {
			return dst, tooLong("location length", len(rec.Location), legacyNoLocation-1)
		}
		b = le.AppendUint64(b, rec.Addr)
		b = legacyAppendString(b, rec.Symbol)
		if rec.HasLocation {
			b = legacyAppendString(b, rec.Location)
		} else {
			b = le.AppendUint16(b, legacyNoLocation)
		}
	case LegacyThreadNameDef:
		if len(rec.Name) > LegacyMaxString {
			return dst, tooLong("name length", len(rec.Name), LegacyMaxString)
		}
		b = le.AppendUint32(b, rec.Tid)
		b = legacyAppendString(b, rec.Name)
	case LegacySegmentMetadata:
		if len(rec.Metadata) > 0xFFFF {
			return dst, tooLong("entry count", len(rec.Metadata), 0xFFFF)
		}
		for _, kv := range rec.Metadata {
			if len(kv.Key) > LegacyMaxString || len(kv.Value) > LegacyMaxString {
				return dst, tooLong("entry length", max(len(kv.Key), len(kv.Value)), LegacyMaxString)
			}
		}
		if version >= 18 {
			b = le.AppendUint64(b, rec.TsNs)
		}
		b = le.AppendUint16(b, uint16(len(rec.Metadata)))
		for _, kv := range rec.Metadata {
			b = legacyAppendString(b, kv.Key)
			b = legacyAppendString(b, kv.Value)
		}
	case LegacyTaskTerminate:
		if version >= 15 {
			b = le.AppendUint32(b, rec.TsUs)
		}
		b = le.AppendUint32(b, rec.TaskID)
	}
	return b, nil
}

func legacyAppendString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// LegacyWriter writes a TOKIOTRC file. It encodes each record into a reused
// buffer and hands it to the underlying writer in one Write call, so callers
// writing many small records should give it a *bufio.Writer.
type LegacyWriter struct {
	w       io.Writer
	version uint32
	buf     []byte
	off     int64
	err     error // sticky: set once the underlying writer failed
}

// NewLegacyWriter writes the 12-byte header ("TOKIOTRC", u32 LE version) to w
// and returns a writer for records in that version's layout.
func NewLegacyWriter(w io.Writer, version uint32) (*LegacyWriter, error) {
	if !legacyVersionOK(version) {
		return nil, fmt.Errorf("wire: legacy writer: version %d: %w (supported %d..%d)",
			version, ErrLegacyVersion, LegacyMinVersion, LegacyMaxVersion)
	}
	lw := &LegacyWriter{w: w, version: version, buf: make([]byte, 0, 256)}
	hdr := binary.LittleEndian.AppendUint32(legacyMagic[:], version)
	if err := lw.write(hdr); err != nil {
		return nil, fmt.Errorf("wire: legacy writer: header: %w", err)
	}
	return lw, nil
}

// Version returns the version written in the header.
func (w *LegacyWriter) Version() uint32 { return w.version }

// Offset returns the number of bytes written so far, header included.
func (w *LegacyWriter) Offset() int64 { return w.off }

// Write encodes rec. A record the version cannot hold (a code it does not
// define, more than 255 frames, a string over 65535 bytes) is an error and
// nothing is written; the writer stays usable. An error of the underlying
// writer is returned by every later call.
func (w *LegacyWriter) Write(rec *LegacyRecord) error {
	if w.err != nil {
		return w.err
	}
	b, err := legacyAppend(w.buf[:0], w.version, rec)
	if err != nil {
		return fmt.Errorf("wire: legacy writer offset %d: %w", w.off, err)
	}
	w.buf = b
	start := w.off
	if err := w.write(b); err != nil {
		return fmt.Errorf("wire: legacy writer offset %d: record code %d: %w", start, rec.Code, err)
	}
	return nil
}

func (w *LegacyWriter) write(b []byte) error {
	n, err := w.w.Write(b)
	w.off += int64(n)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.err = err
	}
	return err
}

// LegacyError is a decode error of the legacy reader. Offset is the byte
// offset, in the decompressed stream, of the start of the record that failed
// (its code byte), or 0 for the header.
type LegacyError struct {
	Offset int64
	Code   int    // record code; -1 for the header, -2 if the code byte itself could not be read
	Msg    string // what went wrong
	Err    error  // wrapped cause: io.ErrUnexpectedEOF, a sentinel, or a read error
}

func (e *LegacyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "wire: legacy offset %d: ", e.Offset)
	switch e.Code {
	case legacyCodeHeader:
		b.WriteString("header: ")
	case legacyCodeNotRead:
		b.WriteString("record: ")
	default:
		fmt.Fprintf(&b, "record code %d: ", e.Code)
	}
	b.WriteString(e.Msg)
	return b.String()
}

func (e *LegacyError) Unwrap() error { return e.Err }
