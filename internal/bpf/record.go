package bpf

import (
	"encoding/binary"
	"fmt"

	"github.com/perfprof/perfprof/internal/sched"
)

// Flags say what the program found for one sample.
type Flags uint32

// Must match the SC_* enum in spanctx.h.
const (
	// FlagSpan: SpanID holds the span label's value.
	FlagSpan Flags = 1 << iota
	// FlagTrace: TraceID holds the trace label's value.
	FlagTrace
	// FlagLabels: the goroutine had pprof labels; for a thread context,
	// the thread had a valid record.
	FlagLabels
	// FlagNoGoroutine: the thread ran no user goroutine (nil g, m or
	// m.curg: the scheduler between goroutines, or a thread that is not
	// the Go runtime's); for a thread context, the thread had no thread
	// pointer.
	FlagNoGoroutine
	// FlagFault: a read of the process's memory failed (a page not
	// present, or a wrong layout).
	FlagFault
	// FlagBadValue: a span or trace key was found, but its value was not
	// 16 (32) hex digits.
	FlagBadValue
	// FlagNotValid: the thread's context record was being written (its
	// valid byte was not 1): the sample says nothing of the span.
	FlagNotValid
	// FlagThreadContext: read from the thread's OTEP 4947 context record
	// (a target added with AddThreadContextTarget), not goroutine labels.
	FlagThreadContext
	// FlagSwitch: the record of a context-switch sample (the thread
	// leaving the CPU), not of a cpu-clock sample.
	FlagSwitch
	// FlagIdle, with FlagNoGoroutine: a thread of the Go runtime between
	// goroutines (on g0, with no m.curg): the scheduler, the garbage
	// collector's assists of no goroutine, or idle. Without it a
	// FlagNoGoroutine thread may not be the runtime's at all (cgo).
	FlagIdle
	// FlagCPUDelta: CPUDelta holds the thread's CPU time since its
	// previous cpu-clock sample, from the scheduler program's accounting
	// (Options.SchedInterval).
	FlagCPUDelta
	// FlagNoRead: the span was not read (a target added with
	// AddPlainTarget): the record is there for its CPUDelta.
	FlagNoRead
	// FlagWalk: a Node.js walk (AddNodeTarget) did not validate: the
	// thread's heap did not read as the schema says (a table being
	// rehashed, a count out of bounds, a word not tagged as it must be).
	// No span was read; Stats counts why.
	FlagWalk
	// FlagAttrs: TraceFlags and Attrs hold the thread context record's
	// trace flags and attributes (its attrs-data, cut at AttrsMax).
	FlagAttrs
)

// AttrsMax is the most bytes of a context record's attrs-data a record
// carries (SC_ATTRS_MAX).
const AttrsMax = 128

// Attrs is a thread context record's trace flags and attributes, as the
// programs copied them.
type Attrs struct {
	TraceFlags uint8
	// Size is the record's attrs_size: the length of its attrs-data,
	// of which Data holds the first min(Size, AttrsMax) bytes.
	Size uint16
	Data [AttrsMax]byte
}

// Bytes returns the attrs-data copied.
func (a *Attrs) Bytes() []byte { return a.Data[:min(int(a.Size), AttrsMax)] }

// Truncated reports whether the record's attrs-data was longer than
// what was copied: its last entries are missing (one may be cut short).
func (a *Attrs) Truncated() bool { return int(a.Size) > AttrsMax }

func (a *Attrs) decode(b []byte) {
	a.TraceFlags = b[0]
	a.Size = binary.LittleEndian.Uint16(b[2:])
	copy(a.Data[:], b[4:4+AttrsMax])
}

// Record is what the program saw at one sample of a target thread.
type Record struct {
	// Time is bpf_ktime_get_ns at the start of the program: the
	// CLOCK_MONOTONIC clock of perf's sample times, read some hundreds of
	// nanoseconds before perf reads it for the same sample.
	Time     uint64
	Pid, Tid uint32
	CPU      uint32
	Flags    Flags
	SpanID   [8]byte
	TraceID  [16]byte
	CPUDelta uint64 // with FlagCPUDelta, ns
	Attrs    Attrs  // with FlagAttrs
}

// HasSpan reports whether the sample's goroutine carried a valid span id
// (OpenTelemetry's all-zero id is invalid).
func (r *Record) HasSpan() bool { return r.Flags&FlagSpan != 0 && r.SpanID != [8]byte{} }

// HasTrace reports whether it carried a valid trace id.
func (r *Record) HasTrace() bool { return r.Flags&FlagTrace != 0 && r.TraceID != [16]byte{} }

// recordSize is sizeof(struct sample_labels), ctxRecordSize sizeof(struct
// sample_ctx): the record of a thread-context target.
const (
	recordSize    = 56
	attrsSize     = 4 + AttrsMax
	ctxRecordSize = recordSize + attrsSize + 4
)

// decode fills r from the raw ring buffer sample b (struct sample_labels,
// host byte order: little endian on amd64).
func (r *Record) decode(b []byte) error {
	if len(b) < recordSize {
		return fmt.Errorf("bpf: record of %d bytes, want %d", len(b), recordSize)
	}
	le := binary.LittleEndian
	r.Time = le.Uint64(b[0:])
	r.Pid = le.Uint32(b[8:])
	r.Tid = le.Uint32(b[12:])
	r.CPU = le.Uint32(b[16:])
	r.Flags = Flags(le.Uint32(b[20:]))
	copy(r.SpanID[:], b[24:32])
	copy(r.TraceID[:], b[32:48])
	r.CPUDelta = le.Uint64(b[48:])
	if r.Flags&FlagAttrs != 0 {
		if len(b) < ctxRecordSize {
			return fmt.Errorf("bpf: record with attributes of %d bytes, want %d", len(b), ctxRecordSize)
		}
		r.Attrs.decode(b[recordSize:])
	}
	return nil
}

// SchedRecord is a group of off-CPU time of a target thread, written by
// the scheduler program at the switch-in that made the thread's off-CPU
// time of its state cross one or more multiples of the interval: Count
// intervals spread over [Begin, End] (as sched.Group), with the switch-out
// that began the off period that ended there.
type SchedRecord struct {
	Begin, End, Count uint64 // CLOCK_MONOTONIC ns; intervals
	OutTime           uint64 // the switch-out, CLOCK_MONOTONIC ns
	// CaptureTime is the switch-out the stack and span were read at: OutTime,
	// or an earlier one of the thread when OutTime's was not captured
	// (Options.CaptureGap, CaptureEvery); 0 when none was.
	CaptureTime uint64
	Pid, Tid    uint32
	State       sched.State
	// Flags, SpanID and TraceID are the span read at the capture, as in
	// Record (FlagSwitch not set).
	Flags   Flags
	SpanID  [8]byte
	TraceID [16]byte
	Attrs   Attrs // with FlagAttrs
	// Stack is the user stack at the capture, innermost first; empty when
	// it could not be read. KernelStack is the kernel's, with
	// Options.KernelStacks.
	Stack, KernelStack []uint64
}

// Captured reports whether the stack and span are those of OutTime's
// switch-out, the one that began the off period that completed the group.
func (r *SchedRecord) Captured() bool { return r.CaptureTime != 0 && r.CaptureTime == r.OutTime }

// HasSpan and HasTrace are those of Record.
func (r *SchedRecord) HasSpan() bool  { return r.Flags&FlagSpan != 0 && r.SpanID != [8]byte{} }
func (r *SchedRecord) HasTrace() bool { return r.Flags&FlagTrace != 0 && r.TraceID != [16]byte{} }

// schedRecordSize is sizeof(struct sched_record); schedStackMax its
// SC_STACK_MAX.
const (
	schedStackMax   = 64
	schedKStackMax  = 32
	schedAttrsOff   = 88 + 8*schedStackMax + 8*schedKStackMax
	schedRecordSize = schedAttrsOff + attrsSize + 4
)

func (r *SchedRecord) decode(b []byte) error {
	if len(b) < schedRecordSize {
		return fmt.Errorf("bpf: sched record of %d bytes, want %d", len(b), schedRecordSize)
	}
	le := binary.LittleEndian
	r.Begin, r.End, r.Count, r.OutTime = le.Uint64(b[0:]), le.Uint64(b[8:]), le.Uint64(b[16:]), le.Uint64(b[24:])
	r.CaptureTime = le.Uint64(b[32:])
	r.Pid, r.Tid = le.Uint32(b[40:]), le.Uint32(b[44:])
	r.State = sched.State(le.Uint32(b[48:]))
	r.Flags = Flags(le.Uint32(b[52:]))
	copy(r.SpanID[:], b[56:64])
	copy(r.TraceID[:], b[64:80])
	n := min(int(le.Uint32(b[80:])), schedStackMax)
	r.Stack = r.Stack[:0]
	for i := 0; i < n; i++ {
		r.Stack = append(r.Stack, le.Uint64(b[88+8*i:]))
	}
	n = min(int(le.Uint32(b[84:])), schedKStackMax)
	r.KernelStack = r.KernelStack[:0]
	for i := 0; i < n; i++ {
		r.KernelStack = append(r.KernelStack, le.Uint64(b[88+8*schedStackMax+8*i:]))
	}
	if r.Flags&FlagAttrs != 0 {
		r.Attrs.decode(b[schedAttrsOff:])
	}
	return nil
}
