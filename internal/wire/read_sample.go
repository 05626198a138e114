package wire

import (
	"encoding/binary"
	"math"

	"github.com/perfprof/perfprof/internal/convention"
)

// The typed fast path for CPU samples, which are most of a trace: both
// readers' ReadSample decode a sample straight into a CpuSampleRead, with
// none of the Values of the generic form, so that a loader pays for the
// bytes once. What a sample reads as is what Layout.CpuSample reads from
// the generic form; read_test.go holds the two alike.

// CpuSampleRead is a CPU sample in its typed form, as ReadSample fills it.
type CpuSampleRead struct {
	E CpuSampleEvent
	X CpuSampleExt
	// StackID is the stack-pool id of E.Callchain if Pooled (see
	// Layout.StackID).
	StackID uint64
	Pooled  bool
}

// fastField is one field of a schema the fast path reads: its base type,
// whether it is optional, and where it goes (a fastTarget).
type fastField struct {
	t   FieldType
	opt bool
	fastTarget
}

// fastTarget is where a slot's value goes in a CpuSampleRead: a field of
// its own, or the i-th optional integer or string (see readCpuSample).
type fastTarget struct{ to, i uint8 }

const (
	toNone uint8 = iota // not a slot of the typed form
	toWorker
	toTid
	toSource
	toState
	toPid
	toStack
	toOptU64
	toOptStr
)

// fastTargets are the slots Layout.CpuSample reads, and where they go.
var fastTargets = [nSlots]fastTarget{sWorker: {toWorker, 0}, sTid: {toTid, 0}, sSource: {toSource, 0},
	sState: {toState, 0}, sPid: {toPid, 0}, sCallchain: {toStack, 0},
	sCPU: {toOptU64, 0}, sValue: {toOptU64, 1}, sCPUDelta: {toOptU64, 2}, sContextSetID: {toOptU64, 3},
	sThreadName: {toOptStr, 0}, sTraceID: {toOptStr, 1}, sSpanID: {toOptStr, 2}, sRoot: {toOptStr, 3},
	sLinkSource: {toOptStr, 4}}

// fastSizes are the most bytes a value of each type the fast path reads
// can take; the other types keep a schema off the fast path.
var fastSizes = map[FieldType]int{U8: 1, U16: 2, U32: 4, I64: 8, Varint: binary.MaxVarintLen64,
	PooledString: 4, PooledStackFrames: 4}

// planFast sets l.fast for a TRC CPU-sample schema whose every field is
// one its typed form holds, of a fixed-size or pooled type: then an event
// of it can be read without its generic form, and has nothing the typed
// form would lose.
func (l *Layout) planFast(s *Schema) {
	if l.Kind != KindCpuSample || l.Legacy {
		return
	}
	max := 0
	if s.HasTimestamp {
		max = 3
	}
	plan := make([]fastField, 0, len(s.Fields))
	for i, f := range s.Fields {
		var to fastTarget
		for j, k := range l.idx {
			if k == i {
				to = fastTargets[j]
			}
		}
		t := f.Type.Base()
		n, ok := fastSizes[t]
		if to.to == toNone || !ok {
			return
		}
		if f.Type.IsOptional() {
			n++
		}
		max += n
		plan = append(plan, fastField{t, f.Type.IsOptional(), to})
	}
	l.fast, l.fastMax = plan, max
}

// ReadSample reads the next event as ReadEvent does, except that a CPU
// sample of a schema the fast path reads is decoded straight into s, and
// sample is true: ev then has its Schema and Timestamp but no Values. Any
// other event, and a sample the fast path declines (a short buffer, a
// value it would reject), is read into ev as ReadEvent reads it.
func (r *Reader) ReadSample(ev *Event, s *CpuSampleRead) (sample bool, err error) {
	if r.err != nil {
		return false, r.err
	}
	sample, err = r.readEvent(ev, s)
	if err != nil {
		r.err = err
	}
	return sample, err
}

// layout returns the layout of type id of the stream, found once per
// schema.
func (r *Reader) layout(id uint16, s *Schema) *Layout {
	if int(id) < len(r.layouts) {
		if l := r.layouts[id]; l != nil {
			return l
		}
	}
	l, ok := r.layoutBy[s]
	if !ok {
		l = LayoutOf(s)
		if len(r.layoutBy) < maxInterned {
			r.layoutBy[s] = l
		}
	}
	for len(r.layouts) <= int(id) {
		r.layouts = append(r.layouts, nil)
	}
	r.layouts[id] = l
	return l
}

// readCpuSample decodes the body of an event of schema sc (after its type
// id) into out by the plan of l. It reads only when the buffer holds the
// longest body the plan allows, and consumes nothing and returns false at
// anything the generic path would reject, which then reads the event again
// and reports the error.
func (r *Reader) readCpuSample(sc *Schema, l *Layout, out *CpuSampleRead) bool {
	if r.w-r.r < l.fastMax {
		return false
	}
	b := r.buf[r.r:r.w]
	p := 0
	ts := r.ts
	if sc.HasTimestamp {
		ts += uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16
		p = 3
	}
	*out = CpuSampleRead{}
	e, x := &out.E, &out.X
	e.Timestamp = ts
	e.WorkerID = convention.NoWorker
	u64s := [...]*Opt[uint64]{&e.CPU, &x.ValueNs, &x.CPUTimeDeltaNs, &x.ContextSetID}
	strs := [...]*Opt[string]{&e.ThreadName, &x.TraceID, &x.SpanID, &x.SpanRootName, &x.LinkSource}
	for _, f := range l.fast {
		if f.opt {
			switch b[p] {
			case 0:
				p++
				continue
			case 1:
				p++
			default:
				return false
			}
		}
		var u uint64
		var str string
		switch f.t {
		case U8:
			u = uint64(b[p])
			p++
		case U16:
			u = uint64(le.Uint16(b[p:]))
			p += 2
		case U32:
			u = uint64(le.Uint32(b[p:]))
			p += 4
		case I64:
			u = le.Uint64(b[p:])
			p += 8
		case Varint:
			v, n := binary.Uvarint(b[p:])
			if n <= 0 {
				return false
			}
			u = v
			p += n
		case PooledString, PooledStackFrames:
			id := le.Uint32(b[p:])
			p += 4
			var ok bool
			if f.t == PooledString {
				str, ok = r.strs[id]
			} else {
				e.Callchain, ok = r.stacks[id]
				out.StackID, out.Pooled = uint64(id), true
			}
			if !ok {
				return false
			}
		}
		switch f.to {
		case toWorker:
			e.WorkerID = u
		case toTid:
			e.Tid = uint32(min(u, math.MaxUint32))
		case toSource:
			e.Source = uint8(min(u, math.MaxUint8))
		case toState:
			x.ThreadState = Some(uint8(min(u, math.MaxUint8)))
		case toPid:
			x.Pid = Some(uint32(min(u, math.MaxUint32)))
		case toOptU64:
			*u64s[f.i] = Some(u)
		case toOptStr:
			*strs[f.i] = Some(str)
		}
	}
	r.r += p
	r.ts = ts
	return true
}
