package pprofiledict

import (
	"slices"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/perfprof/perfprof/internal/convention"
)

// Reader reads entries of one ProfilesDictionary back into the values the
// Builder takes. An index outside its table reads as the empty entry: a
// Reader never panics on what a client sent. Attributes and links are
// decoded once per index, as samples look the same ones up again and
// again.
//
// A Reader is not safe for concurrent use.
type Reader struct {
	d     pprofile.ProfilesDictionary
	attrs []attr // by index; valid where done
	done  []bool
	links map[int32]Link
}

// attr is an attribute of the attribute table, decoded.
type attr struct {
	key  string
	str  string // the value as a string (pcommon.Value.AsString)
	num  int64
	isN  bool // num holds the value (convention.Int)
	unit string
}

// NewReader returns a Reader of d.
func NewReader(d pprofile.ProfilesDictionary) *Reader {
	r := &Reader{}
	r.Reset(d)
	return r
}

// Reset makes r read d, forgetting what it decoded of its last dictionary
// but keeping the room it grew to.
func (r *Reader) Reset(d pprofile.ProfilesDictionary) {
	r.d = d
	clear(r.attrs)
	r.attrs, r.done = r.attrs[:0], r.done[:0]
	if r.links == nil {
		r.links = map[int32]Link{}
	}
	clear(r.links)
}

// Str returns string i of the string table.
func (r *Reader) Str(i int32) string {
	if t := r.d.StringTable(); i >= 0 && int(i) < t.Len() {
		return t.At(int(i))
	}
	return ""
}

func (r *Reader) attr(i int32) *attr {
	t := r.d.AttributeTable()
	if i < 0 || int(i) >= t.Len() {
		return &attr{}
	}
	if len(r.attrs) < t.Len() {
		r.attrs = append(r.attrs, make([]attr, t.Len()-len(r.attrs))...)
		r.done = append(r.done, make([]bool, t.Len()-len(r.done))...)
	}
	a := &r.attrs[i]
	if !r.done[i] {
		kv := t.At(int(i))
		v := kv.Value()
		*a = attr{key: r.Str(kv.KeyStrindex()), str: v.AsString(), unit: r.Str(kv.UnitStrindex())}
		a.num, a.isN = convention.Int(v.AsRaw())
		r.done[i] = true
	}
	return a
}

// Labels reads the attributes at indices (a sample's AttributeIndices)
// into Labels; attributes of other keys are left out, and a number out of
// its field's range reads as absent.
func (r *Reader) Labels(indices pcommon.Int32Slice) Labels {
	l := NoLabels
	for j := range indices.Len() {
		a := r.attr(indices.At(j))
		switch a.key {
		case convention.ThreadName:
			l.ThreadName = a.str
		case convention.ThreadState:
			l.State = a.str
		case convention.RootName:
			l.Root = a.str
		case convention.LinkSource:
			l.LinkSource = a.str
		default:
			if a.key != "" && !a.isN && !convention.SampleAttribute(a.key) {
				l.Context = append(l.Context, KV{a.key, a.str})
			}
		}
		if !a.isN || a.num < 0 {
			continue // the numbers are naturals
		}
		switch a.key {
		case convention.ThreadID:
			if a.num <= 1<<32-1 {
				l.Tid = uint32(a.num)
			}
		case convention.CPU:
			l.CPU = a.num
		case convention.CPUTimeDelta:
			l.CPUDelta = uint64(a.num)
		case convention.WorkerID:
			l.Worker = a.num
		}
	}
	return l
}

// Link is an entry of the link table: a span, by its ids.
type Link struct {
	TraceID pcommon.TraceID
	SpanID  pcommon.SpanID // may be empty when TraceID is not
}

// Linked reports whether l names a trace.
func (l Link) Linked() bool { return !l.TraceID.IsEmpty() }

// Link returns link i; index 0, and a link without a trace id, are no link
// (Link{}).
func (r *Reader) Link(i int32) Link {
	if i <= 0 {
		return Link{}
	}
	if l, ok := r.links[i]; ok {
		return l
	}
	var l Link
	if t := r.d.LinkTable(); in(i, t.Len()) {
		ln := t.At(int(i))
		if l.TraceID = ln.TraceID(); l.Linked() {
			l.SpanID = ln.SpanID()
		}
	}
	r.links[i] = l
	return l
}

// in reports whether i is an entry of a table of n entries other than the
// empty entry 0.
func in(i int32, n int) bool { return i > 0 && int(i) < n }

// find returns the first of the attributes at indices whose key is one of
// keys, nil if none is.
func (r *Reader) find(indices pcommon.Int32Slice, keys ...string) *attr {
	for j := range indices.Len() {
		if a := r.attr(indices.At(j)); slices.Contains(keys, a.key) {
			return a
		}
	}
	return nil
}

// Mapping returns mapping i, with its build id if it has one.
func (r *Reader) Mapping(i int32) Mapping {
	t := r.d.MappingTable()
	if !in(i, t.Len()) {
		return Mapping{}
	}
	m := t.At(int(i))
	out := Mapping{Start: m.MemoryStart(), Limit: m.MemoryLimit(), Offset: m.FileOffset(), File: r.Str(m.FilenameStrindex())}
	if a := r.find(m.AttributeIndices(), convention.BuildIDGNU, convention.BuildIDGo); a != nil {
		out.BuildID = a.str
	}
	return out
}

// Function returns function i.
func (r *Reader) Function(i int32) Function {
	t := r.d.FunctionTable()
	if !in(i, t.Len()) {
		return Function{}
	}
	f := t.At(int(i))
	return Function{Name: r.Str(f.NameStrindex()), SystemName: r.Str(f.SystemNameStrindex()),
		File: r.Str(f.FilenameStrindex()), StartLine: f.StartLine()}
}

// Location is an entry of the location table, read: what Location or
// KernelLocation took, with the mapping and functions in place of their
// indices.
type Location struct {
	Addr    uint64
	Kernel  bool // convention.FrameType is convention.FrameTypeKernel
	Mapping Mapping
	// Frames are the location's lines, inlined functions first, the
	// function that owns the address last.
	Frames []Frame
}

// Frame is a line of a location.
type Frame struct {
	Function
	Line, Column int64
}

// Location reads location i into dst, reusing the room of dst.Frames.
func (r *Reader) Location(i int32, dst *Location) {
	*dst = Location{Frames: dst.Frames[:0]}
	t := r.d.LocationTable()
	if !in(i, t.Len()) {
		return
	}
	l := t.At(int(i))
	dst.Addr = l.Address()
	dst.Mapping = r.Mapping(l.MappingIndex())
	if a := r.find(l.AttributeIndices(), convention.FrameType); a != nil {
		dst.Kernel = a.str == convention.FrameTypeKernel
	}
	lines := l.Lines()
	for j := range lines.Len() {
		ln := lines.At(j)
		dst.Frames = append(dst.Frames, Frame{Function: r.Function(ln.FunctionIndex()), Line: ln.Line(), Column: ln.Column()})
	}
}

// Stack returns the location indices of stack i, leaf first; none for an
// index outside the table.
func (r *Reader) Stack(i int32) pcommon.Int32Slice {
	if t := r.d.StackTable(); in(i, t.Len()) {
		return t.At(int(i)).LocationIndices()
	}
	return pcommon.NewInt32Slice()
}

// OffCPU reports whether prof is an off-CPU profile (sample type
// off_cpu), as SetProfileType writes it; any other is read as on-CPU.
func (r *Reader) OffCPU(prof pprofile.Profile) bool {
	return r.Str(prof.SampleType().TypeStrindex()) == convention.OffCPUType
}

// PeriodNs returns the period of prof in ns, 0 when its period is not in
// nanoseconds.
func (r *Reader) PeriodNs(prof pprofile.Profile) int64 {
	if r.Str(prof.PeriodType().UnitStrindex()) != convention.OnCPUPeriodUnit {
		return 0
	}
	return prof.Period()
}

// ClockOffset returns the offset SetClockOffset gave prof, and whether it
// has one (profiles from other sources have none).
func (r *Reader) ClockOffset(prof pprofile.Profile) (int64, bool) {
	if a := r.find(prof.AttributeIndices(), convention.ClockOffset); a != nil && a.isN {
		return a.num, true
	}
	return 0, false
}

// Values calls fn with each timestamp (Unix ns) of s and its value. A
// sample without timestamps (aggregated, from another source) is one value
// at the profile's start; a missing value is 1.
func Values(prof pprofile.Profile, s pprofile.Sample, fn func(unixNs uint64, v int64)) {
	ts, vals := s.TimestampsUnixNano(), s.Values()
	if ts.Len() == 0 {
		var v int64 = 1
		if vals.Len() > 0 {
			v = vals.At(0)
		}
		fn(uint64(prof.Time()), v)
		return
	}
	for j := range ts.Len() {
		var v int64 = 1
		if vals.Len() == ts.Len() {
			v = vals.At(j)
		}
		fn(ts.At(j), v)
	}
}
