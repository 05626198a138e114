package perf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"
)

// Record types, as in enum perf_event_type of <linux/perf_event.h>.
const (
	RecordMmap        = 1
	RecordLost        = 2
	RecordComm        = 3
	RecordExit        = 4
	RecordThrottle    = 5
	RecordUnthrottle  = 6
	RecordFork        = 7
	RecordSample      = 9
	RecordMmap2       = 10
	RecordLostSamples = 13
	RecordSwitch      = 14
	RecordSwitchCPU   = 15
)

// Misc bits of struct perf_event_header that callers look at.
const (
	MiscCPUModeMask = 0x7
	MiscKernel      = 1
	MiscUser        = 2
	// MiscSwitchOut marks a switch record written when the thread left the CPU.
	MiscSwitchOut = 0x2000
	// MiscSwitchOutPreempt marks a switch-out of a thread that was still
	// runnable (preempted) rather than blocked. Same bit as MiscMmapBuildID.
	MiscSwitchOutPreempt = 0x4000
	// MiscMmapBuildID says an MMAP2 record carries a build id instead of
	// device and inode numbers.
	MiscMmapBuildID = 0x4000
	// MiscCommExec marks a COMM record caused by exec.
	MiscCommExec = 0x2000
)

// Callchain context markers (enum perf_callchain_context). Any entry at or
// above ContextMax is a marker, not an address.
const (
	ContextHV     = ^uint64(32 - 1)   // -32
	ContextKernel = ^uint64(128 - 1)  // -128
	ContextUser   = ^uint64(512 - 1)  // -512
	ContextMax    = ^uint64(4095 - 1) // -4095
)

// SampleRecord is a decoded PERF_RECORD_SAMPLE.
type SampleRecord struct {
	ID     uint64    // PERF_SAMPLE_IDENTIFIER: id of the event (of its parent when inherited)
	Kind   EventKind // which event of the session took it, from ID
	IP     uint64
	Pid    uint32
	Tid    uint32
	Time   uint64 // CLOCK_MONOTONIC ns
	CPU    uint32
	Period uint64 // for cpu-clock: CPU nanoseconds this sample stands for
	// Callchain is the raw chain, leaf first, with Context* markers kept so
	// that kernel and user frames can be told apart (see [Frames]).
	Callchain []uint64
	// RegsABI and RegsUser are present when the session samples user
	// registers; StackUser holds the copied top of the user stack.
	RegsABI   uint64
	RegsUser  []uint64
	StackUser []byte
}

// Comm is a decoded PERF_RECORD_COMM.
type Comm struct {
	Pid, Tid uint32
	Comm     []byte // without the NUL
}

// Task is a decoded PERF_RECORD_FORK or PERF_RECORD_EXIT.
type Task struct {
	Pid, Ppid, Tid, Ptid uint32
	Time                 uint64
}

// Mmap2 is a decoded PERF_RECORD_MMAP2.
type Mmap2 struct {
	Pid, Tid    uint32
	Addr, Len   uint64
	Pgoff       uint64
	Maj, Min    uint32
	Ino, InoGen uint64
	BuildID     []byte // set instead of Maj..InoGen when Misc has MiscMmapBuildID
	Prot, Flags uint32
	Filename    []byte
}

// SampleID is the sample_id trailer that sample_id_all adds to every
// non-sample record.
type SampleID struct {
	Pid, Tid uint32
	Time     uint64
	CPU      uint32
	ID       uint64
}

// Record is one decoded record. Only the part named by Type is valid. Slices
// alias the ring buffer and must not be kept after the callback returns.
type Record struct {
	Type uint32
	Misc uint16
	// ID is the trailer of non-sample records (zero for samples; use Sample).
	ID SampleID

	Sample SampleRecord
	Comm   Comm
	Task   Task
	Mmap2  Mmap2
	// Lost is the count of a PERF_RECORD_LOST or PERF_RECORD_LOST_SAMPLES.
	Lost uint64
	// NextPrevPid and NextPrevTid name the other thread of a
	// PERF_RECORD_SWITCH_CPU_WIDE.
	NextPrevPid, NextPrevTid uint32
}

// ErrCorrupt is returned by Decode for a record that does not fit its
// header or the session's sample format.
var ErrCorrupt = errors.New("perf: corrupt record")

// format says which optional fields a sample carries. All events that share
// a ring in a session share one format.
type format struct {
	sampleType uint64
	nRegs      int // popcount of sample_regs_user
	idTrailer  int // size of the sample_id trailer in bytes
}

func newFormat(sampleType, regsMask uint64) format {
	f := format{sampleType: sampleType}
	for m := regsMask; m != 0; m &= m - 1 {
		f.nRegs++
	}
	for _, bit := range []uint64{sampleTID, sampleTime, sampleID, sampleStreamID, sampleCPU, sampleIdentifier} {
		if sampleType&bit != 0 {
			f.idTrailer += 8
		}
	}
	return f
}

const (
	sampleIP         = 0x1
	sampleTID        = 0x2
	sampleTime       = 0x4
	sampleAddr       = 0x8
	sampleRead       = 0x10
	sampleCallchain  = 0x20
	sampleID         = 0x40
	sampleCPU        = 0x80
	samplePeriod     = 0x100
	sampleStreamID   = 0x200
	sampleRaw        = 0x400
	sampleBranch     = 0x800
	sampleRegsUser   = 0x1000
	sampleStackUser  = 0x2000
	sampleIdentifier = 0x10000
)

// supportedSampleType lists the bits decode understands; the layout of the
// others would have to be decoded to skip them.
const supportedSampleType = sampleIdentifier | sampleIP | sampleTID | sampleTime | sampleAddr |
	sampleID | sampleStreamID | sampleCPU | samplePeriod | sampleCallchain | sampleRaw |
	sampleRegsUser | sampleStackUser

var ne = binary.NativeEndian

// u64s views b as native-endian uint64s without copying. b must be 8-byte
// aligned, which ring records are (the kernel pads every record to 8 bytes
// and the rings and scratch buffers are 8-byte aligned).
func u64s(b []byte, n int) []uint64 {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), n)
}

// decode fills rec from one whole record b (header included). It does not
// allocate; slices in rec alias b.
func (f *format) decode(b []byte, rec *Record) error {
	if len(b) < 8 {
		return fmt.Errorf("%w: %d bytes is shorter than a header", ErrCorrupt, len(b))
	}
	rec.Type = ne.Uint32(b[0:])
	rec.Misc = ne.Uint16(b[4:])
	size := int(ne.Uint16(b[6:]))
	if size != len(b) {
		return fmt.Errorf("%w: header says %d bytes, have %d", ErrCorrupt, size, len(b))
	}
	body := b[8:]
	if rec.Type == RecordSample {
		return f.decodeSample(body, &rec.Sample)
	}
	rec.ID = SampleID{}
	if f.idTrailer > 0 {
		if len(body) < f.idTrailer {
			return fmt.Errorf("%w: record type %d: %d bytes cannot hold the sample_id trailer", ErrCorrupt, rec.Type, len(body))
		}
		f.decodeTrailer(body[len(body)-f.idTrailer:], &rec.ID)
		body = body[:len(body)-f.idTrailer]
	}
	switch rec.Type {
	case RecordComm:
		if len(body) < 8 {
			return shortRecord(rec.Type, len(body))
		}
		rec.Comm.Pid, rec.Comm.Tid = ne.Uint32(body), ne.Uint32(body[4:])
		rec.Comm.Comm = cstring(body[8:])
	case RecordFork, RecordExit:
		if len(body) < 24 {
			return shortRecord(rec.Type, len(body))
		}
		t := &rec.Task
		t.Pid, t.Ppid, t.Tid, t.Ptid = ne.Uint32(body), ne.Uint32(body[4:]), ne.Uint32(body[8:]), ne.Uint32(body[12:])
		t.Time = ne.Uint64(body[16:])
	case RecordMmap2:
		if len(body) < 64 {
			return shortRecord(rec.Type, len(body))
		}
		m := &rec.Mmap2
		m.Pid, m.Tid = ne.Uint32(body), ne.Uint32(body[4:])
		m.Addr, m.Len, m.Pgoff = ne.Uint64(body[8:]), ne.Uint64(body[16:]), ne.Uint64(body[24:])
		if rec.Misc&MiscMmapBuildID != 0 {
			n := int(body[32])
			if n > 20 {
				n = 20
			}
			m.BuildID = body[36 : 36+n]
			m.Maj, m.Min, m.Ino, m.InoGen = 0, 0, 0, 0
		} else {
			m.BuildID = nil
			m.Maj, m.Min = ne.Uint32(body[32:]), ne.Uint32(body[36:])
			m.Ino, m.InoGen = ne.Uint64(body[40:]), ne.Uint64(body[48:])
		}
		m.Prot, m.Flags = ne.Uint32(body[56:]), ne.Uint32(body[60:])
		m.Filename = cstring(body[64:])
	case RecordLost:
		if len(body) < 16 {
			return shortRecord(rec.Type, len(body))
		}
		rec.Lost = ne.Uint64(body[8:])
	case RecordLostSamples:
		if len(body) < 8 {
			return shortRecord(rec.Type, len(body))
		}
		rec.Lost = ne.Uint64(body)
	case RecordSwitchCPU:
		if len(body) < 8 {
			return shortRecord(rec.Type, len(body))
		}
		rec.NextPrevPid, rec.NextPrevTid = ne.Uint32(body), ne.Uint32(body[4:])
	}
	return nil
}

func shortRecord(typ uint32, n int) error {
	return fmt.Errorf("%w: record type %d: body of %d bytes is too short", ErrCorrupt, typ, n)
}

func (f *format) decodeTrailer(b []byte, id *SampleID) {
	st := f.sampleType
	if st&sampleTID != 0 {
		id.Pid, id.Tid = ne.Uint32(b), ne.Uint32(b[4:])
		b = b[8:]
	}
	if st&sampleTime != 0 {
		id.Time = ne.Uint64(b)
		b = b[8:]
	}
	if st&sampleID != 0 {
		id.ID = ne.Uint64(b)
		b = b[8:]
	}
	if st&sampleStreamID != 0 {
		b = b[8:]
	}
	if st&sampleCPU != 0 {
		id.CPU = ne.Uint32(b)
		b = b[8:]
	}
	if st&sampleIdentifier != 0 {
		id.ID = ne.Uint64(b)
	}
}

// decodeSample follows the field order of PERF_RECORD_SAMPLE in
// <linux/perf_event.h>. Every read is bounds-checked against the record.
func (f *format) decodeSample(b []byte, s *SampleRecord) error {
	st := f.sampleType
	off := 0
	need := func(n int) bool { return off+n <= len(b) }
	if st&sampleIdentifier != 0 {
		if !need(8) {
			return shortRecord(RecordSample, len(b))
		}
		s.ID = ne.Uint64(b[off:])
		off += 8
	}
	if st&sampleIP != 0 {
		if !need(8) {
			return shortRecord(RecordSample, len(b))
		}
		s.IP = ne.Uint64(b[off:])
		off += 8
	}
	if st&sampleTID != 0 {
		if !need(8) {
			return shortRecord(RecordSample, len(b))
		}
		s.Pid, s.Tid = ne.Uint32(b[off:]), ne.Uint32(b[off+4:])
		off += 8
	}
	if st&sampleTime != 0 {
		if !need(8) {
			return shortRecord(RecordSample, len(b))
		}
		s.Time = ne.Uint64(b[off:])
		off += 8
	}
	if st&sampleAddr != 0 {
		off += 8
	}
	if st&sampleID != 0 {
		if !need(8) {
			return shortRecord(RecordSample, len(b))
		}
		s.ID = ne.Uint64(b[off:])
		off += 8
	}
	if st&sampleStreamID != 0 {
		off += 8
	}
	if st&sampleCPU != 0 {
		if !need(8) {
			return shortRecord(RecordSample, len(b))
		}
		s.CPU = ne.Uint32(b[off:])
		off += 8
	}
	if st&samplePeriod != 0 {
		if !need(8) {
			return shortRecord(RecordSample, len(b))
		}
		s.Period = ne.Uint64(b[off:])
		off += 8
	}
	s.Callchain = nil
	if st&sampleCallchain != 0 {
		if !need(8) {
			return shortRecord(RecordSample, len(b))
		}
		n := ne.Uint64(b[off:])
		off += 8
		if n > uint64(len(b)-off)/8 {
			return fmt.Errorf("%w: callchain of %d entries overruns the record", ErrCorrupt, n)
		}
		s.Callchain = u64s(b[off:], int(n))
		off += int(n) * 8
	}
	if st&sampleRaw != 0 {
		if !need(4) {
			return shortRecord(RecordSample, len(b))
		}
		n := int(ne.Uint32(b[off:]))
		if !need(4 + n) {
			return fmt.Errorf("%w: raw data of %d bytes overruns the record", ErrCorrupt, n)
		}
		off += 4 + n
		// The kernel pads the raw data so that the u32 size plus data is a
		// multiple of 8.
		off = (off + 7) &^ 7
	}
	s.RegsABI, s.RegsUser = 0, nil
	s.StackUser = nil
	// Registers and stack are the last fields and each takes at least 8
	// bytes when present. Only some events of a session (cpu-clock, with
	// Options.StackUser) ask for them: a sample that ends here comes from
	// one that does not.
	if off == len(b) {
		return nil
	}
	if st&sampleRegsUser != 0 {
		if !need(8) {
			return shortRecord(RecordSample, len(b))
		}
		s.RegsABI = ne.Uint64(b[off:])
		off += 8
		if s.RegsABI != 0 {
			if !need(8 * f.nRegs) {
				return fmt.Errorf("%w: %d user registers overrun the record", ErrCorrupt, f.nRegs)
			}
			s.RegsUser = u64s(b[off:], f.nRegs)
			off += 8 * f.nRegs
		}
	}
	if st&sampleStackUser != 0 {
		if !need(8) {
			return shortRecord(RecordSample, len(b))
		}
		n := int(ne.Uint64(b[off:]))
		off += 8
		if n > 0 {
			if n < 0 || !need(n+8) {
				return fmt.Errorf("%w: user stack of %d bytes overruns the record", ErrCorrupt, n)
			}
			dyn := int(ne.Uint64(b[off+n:]))
			if dyn > n {
				dyn = n
			}
			s.StackUser = b[off : off+dyn]
			off += n + 8
		}
	}
	return nil
}

func cstring(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}

// Frames calls fn for each address of a raw callchain, leaf first, with
// kernel reporting whether the address belongs to the kernel part of the
// chain. Context markers are consumed, not passed on.
func Frames(chain []uint64, fn func(addr uint64, kernel bool)) {
	kernel := false
	for _, a := range chain {
		if a >= ContextMax {
			kernel = a == ContextKernel || a == ContextHV
			continue
		}
		fn(a, kernel)
	}
}
