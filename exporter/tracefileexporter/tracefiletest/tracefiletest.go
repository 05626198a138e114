// Package tracefiletest builds pdata profiles and spans as the perfprof
// receiver and instrumented runtimes send them, for the tests of the
// tracefile exporter and of the tools that read its files.
package tracefiletest

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/pkg/pprofiledict"
)

// ProfBuilder builds pdata profiles as the perfprof receiver emits them:
// one dictionary, a ResourceProfiles per process, a sample per timestamp.
type ProfBuilder struct {
	Profiles pprofile.Profiles
	// Dict interns the dictionary's entries; the methods below are
	// shorthands for what tests need most.
	Dict *pprofiledict.Builder
}

// NewProfBuilder returns a builder whose dictionary holds the empty entries
// that index 0 of each table stands for.
func NewProfBuilder() *ProfBuilder {
	pd := pprofile.NewProfiles()
	return &ProfBuilder{Profiles: pd, Dict: pprofiledict.New(pd.Dictionary())}
}

// Str interns s in the string table.
func (b *ProfBuilder) Str(s string) int32 { return b.Dict.Str(s) }

// Fn is a frame of a location.
type Fn struct {
	Name, File string
	Line       int64
}

// F returns the frame name in file at line.
func F(name, file string, line int64) Fn { return Fn{Name: name, File: file, Line: line} }

// Location returns the user-space location at addr, in no mapping, whose
// frames are inlined-first (pprof's order: the last frame owns the address).
func (b *ProfBuilder) Location(addr uint64, frames ...Fn) int32 {
	return b.Dict.Location(addr, 0, b.lines(frames)...)
}

// KernelLocation is Location for a kernel address, marked as the receiver
// marks kernel locations.
func (b *ProfBuilder) KernelLocation(addr uint64, frames ...Fn) int32 {
	return b.Dict.KernelLocation(addr, 0, b.lines(frames)...)
}

func (b *ProfBuilder) lines(frames []Fn) []pprofiledict.Line {
	lines := make([]pprofiledict.Line, len(frames))
	for i, f := range frames {
		lines[i] = pprofiledict.Line{Function: b.Dict.Function(pprofiledict.Function{Name: f.Name, File: f.File}), Line: f.Line}
	}
	return lines
}

// Stack returns the stack of locs, leaf first.
func (b *ProfBuilder) Stack(locs ...int32) int32 { return b.Dict.Stack(locs) }

// Attr returns the attribute key=v; v is an int or a string.
func (b *ProfBuilder) Attr(key string, v any) int32 {
	switch v := v.(type) {
	case int:
		return b.Dict.AttrInt(key, int64(v))
	case string:
		return b.Dict.AttrStr(key, v)
	}
	panic("tracefiletest: attribute value must be an int or a string")
}

// Labels returns the attributes of a sample with labels l, as the
// receiver writes them (start from pprofiledict.NoLabels).
func (b *ProfBuilder) Labels(l pprofiledict.Labels) []int32 {
	s := pcommon.NewInt32Slice()
	b.Dict.AppendLabels(s, &l)
	return s.AsRaw()
}

// Link returns the link to span of trace.
func (b *ProfBuilder) Link(trace [16]byte, span [8]byte) int32 { return b.Dict.Link(trace, span) }

// Profile adds a process with one profile: on-CPU (samples/count, period
// 1 ms) or off-CPU (off_cpu/nanoseconds, period 10 ms, the receiver's
// default off_cpu_interval).
func (b *ProfBuilder) Profile(pid int, service string, off bool) pprofile.Profile {
	rp := b.Profiles.ResourceProfiles().AppendEmpty()
	rp.Resource().Attributes().PutInt(convention.ProcessPid, int64(pid))
	if service != "" {
		rp.Resource().Attributes().PutStr(convention.ServiceName, service)
	}
	sp := rp.ScopeProfiles().AppendEmpty()
	sp.Scope().SetName(convention.ScopeName)
	p := sp.Profiles().AppendEmpty()
	if off {
		b.Dict.SetProfileType(p, true, 10_000_000)
	} else {
		b.Dict.SetProfileType(p, false, 1_000_000)
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
	rs.Resource().Attributes().PutStr(convention.ServiceName, service)
	rs.Resource().Attributes().PutInt(convention.ProcessPid, int64(pid))
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
		case float64:
			s.Attributes().PutDouble(k, v)
		case bool:
			s.Attributes().PutBool(k, v)
		case string:
			s.Attributes().PutStr(k, v)
		}
	}
}
