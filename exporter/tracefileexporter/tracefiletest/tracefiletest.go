// Package tracefiletest builds pdata profiles and spans as the perfprof
// receiver and instrumented runtimes send them, for the tests of the
// tracefile exporter and of the tools that read its files.
package tracefiletest

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// ProfBuilder builds pdata profiles as the perfprof receiver emits them:
// one dictionary, a ResourceProfiles per process, a sample per timestamp.
type ProfBuilder struct {
	Profiles pprofile.Profiles
	d        pprofile.ProfilesDictionary
	strs     map[string]int32
	funcs    map[string]int32
}

// NewProfBuilder returns a builder whose dictionary holds the zero entries
// that index 0 of each table stands for.
func NewProfBuilder() *ProfBuilder {
	pd := pprofile.NewProfiles()
	b := &ProfBuilder{Profiles: pd, d: pd.Dictionary(), strs: map[string]int32{}, funcs: map[string]int32{}}
	b.Str("")
	b.d.MappingTable().AppendEmpty()
	b.d.LinkTable().AppendEmpty()
	b.d.StackTable().AppendEmpty()
	b.d.AttributeTable().AppendEmpty()
	return b
}

// Str interns s in the string table.
func (b *ProfBuilder) Str(s string) int32 {
	if i, ok := b.strs[s]; ok {
		return i
	}
	i := int32(b.d.StringTable().Len())
	b.d.StringTable().Append(s)
	b.strs[s] = i
	return i
}

// Fn is a frame of a location.
type Fn struct {
	Name, File string
	Line       int64
}

// F returns the frame name in file at line.
func F(name, file string, line int64) Fn { return Fn{Name: name, File: file, Line: line} }

// Location adds a location at addr whose frames are inlined-first (pprof's
// order: the last frame owns the address).
func (b *ProfBuilder) Location(addr uint64, frames ...Fn) int32 {
	i := int32(b.d.LocationTable().Len())
	l := b.d.LocationTable().AppendEmpty()
	l.SetAddress(addr)
	for _, f := range frames {
		k := f.Name + "\x00" + f.File
		fi, ok := b.funcs[k]
		if !ok {
			fi = int32(b.d.FunctionTable().Len())
			fu := b.d.FunctionTable().AppendEmpty()
			fu.SetNameStrindex(b.Str(f.Name))
			fu.SetFilenameStrindex(b.Str(f.File))
			b.funcs[k] = fi
		}
		ln := l.Lines().AppendEmpty()
		ln.SetFunctionIndex(fi)
		ln.SetLine(f.Line)
	}
	return i
}

func (b *ProfBuilder) Stack(locs ...int32) int32 {
	i := int32(b.d.StackTable().Len())
	b.d.StackTable().AppendEmpty().LocationIndices().FromRaw(locs)
	return i
}

func (b *ProfBuilder) Attr(key string, v any) int32 {
	i := int32(b.d.AttributeTable().Len())
	a := b.d.AttributeTable().AppendEmpty()
	a.SetKeyStrindex(b.Str(key))
	switch v := v.(type) {
	case int:
		a.Value().SetInt(int64(v))
	case string:
		a.Value().SetStr(v)
	}
	return i
}

func (b *ProfBuilder) Link(trace [16]byte, span [8]byte) int32 {
	i := int32(b.d.LinkTable().Len())
	l := b.d.LinkTable().AppendEmpty()
	l.SetTraceID(trace)
	l.SetSpanID(span)
	return i
}

// Profile adds a process with one profile: on-CPU (samples/count, period
// 1 ms) or off-CPU (off_cpu/nanoseconds).
func (b *ProfBuilder) Profile(pid int, service string, off bool) pprofile.Profile {
	rp := b.Profiles.ResourceProfiles().AppendEmpty()
	rp.Resource().Attributes().PutInt("process.pid", int64(pid))
	if service != "" {
		rp.Resource().Attributes().PutStr("service.name", service)
	}
	p := rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	if off {
		p.SampleType().SetTypeStrindex(b.Str("off_cpu"))
		p.SampleType().SetUnitStrindex(b.Str("nanoseconds"))
	} else {
		p.SampleType().SetTypeStrindex(b.Str("samples"))
		p.SampleType().SetUnitStrindex(b.Str("count"))
		p.PeriodType().SetTypeStrindex(b.Str("cpu"))
		p.PeriodType().SetUnitStrindex(b.Str("nanoseconds"))
		p.SetPeriod(1_000_000)
	}
	return p
}

// Sample adds a sample of stack with attributes, a link (0 = none) and one
// value per timestamp.
func (b *ProfBuilder) Sample(p pprofile.Profile, stack, link int32, attrs []int32, ts []uint64, vals []int64) {
	s := p.Samples().AppendEmpty()
	s.SetStackIndex(stack)
	s.SetLinkIndex(link)
	s.AttributeIndices().FromRaw(attrs)
	s.TimestampsUnixNano().FromRaw(ts)
	s.Values().FromRaw(vals)
}

// AddSpan adds a span to td, with its own resource.
func AddSpan(td ptrace.Traces, service string, pid int, name string, trace [16]byte, span, parent [8]byte,
	start, end uint64, attrs map[string]any) {
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", service)
	rs.Resource().Attributes().PutInt("process.pid", int64(pid))
	s := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	s.SetName(name)
	s.SetTraceID(trace)
	s.SetSpanID(span)
	s.SetParentSpanID(parent)
	s.SetStartTimestamp(pcommon.Timestamp(start))
	s.SetEndTimestamp(pcommon.Timestamp(end))
	for k, v := range attrs {
		switch v := v.(type) {
		case int:
			s.Attributes().PutInt(k, int64(v))
		case bool:
			s.Attributes().PutBool(k, v)
		case string:
			s.Attributes().PutStr(k, v)
		}
	}
}
