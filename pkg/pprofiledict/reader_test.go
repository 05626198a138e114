package pprofiledict

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/perfprof/perfprof/internal/convention"
)

// TestReaderReadsWhatBuilderWrites writes every kind of entry with a
// Builder and reads it back with a Reader.
func TestReaderReadsWhatBuilderWrites(t *testing.T) {
	pd := pprofile.NewProfiles()
	b := New(pd.Dictionary())
	m := Mapping{Start: 0x400000, Limit: 0x500000, Offset: 0x1000, File: "/bin/app", BuildID: "0123456789abcdef0123456789abcdef01234567"}
	goM := Mapping{Start: 0x600000, Limit: 0x700000, File: "/bin/go", BuildID: "abc/def"}
	fn := Function{Name: "ns::f()", SystemName: "_ZN2ns1fEv", File: "f.cc", StartLine: 12}
	mi, gi, fi := b.Mapping(m), b.Mapping(goM), b.Function(fn)
	user := b.Location(0x401234, mi, Line{Function: fi, Line: 14, Column: 3}, Line{Function: fi, Line: 20})
	kern := b.KernelLocation(0xffffffff81001000, 0, Line{Function: b.Function(Function{Name: "do_syscall_64"})})
	bare := b.Location(0x601000, gi)
	stack := b.Stack([]int32{kern, user, bare})
	link := b.Link(pcommon.TraceID{1, 2}, pcommon.SpanID{3})
	full := Labels{Tid: 7, ThreadName: "w", CPU: 3, CPUDelta: 20_000, Worker: 2, Root: "GET /", LinkSource: convention.LinkSourceGoLabels,
		Context: []KV{{"http.route", "GET /checkout"}, {"user.name", "ann"}}}
	off := Labels{Tid: 8, ThreadName: "", CPU: -1, State: convention.ThreadStateRunnable, Worker: -1}

	p := pd.ResourceProfiles().AppendEmpty().ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	b.SetProfileType(p, true, 10_000_000)
	b.SetClockOffset(p, -42)
	p.SetTime(100)
	s := p.Samples().AppendEmpty()
	b.AppendLabels(s.AttributeIndices(), &full)
	s2 := p.Samples().AppendEmpty()
	b.AppendLabels(s2.AttributeIndices(), &off)

	r := NewReader(pd.Dictionary())
	assert.Equal(t, m, r.Mapping(mi))
	assert.Equal(t, goM, r.Mapping(gi))
	assert.Equal(t, fn, r.Function(fi))
	var l Location
	r.Location(user, &l)
	assert.Equal(t, Location{Addr: 0x401234, Mapping: m, Frames: []Frame{{fn, 14, 3}, {fn, 20, 0}}}, l)
	r.Location(kern, &l)
	assert.Equal(t, Location{Addr: 0xffffffff81001000, Kernel: true, Frames: []Frame{{Function: Function{Name: "do_syscall_64"}}}}, l)
	r.Location(bare, &l)
	assert.Equal(t, Location{Addr: 0x601000, Mapping: goM, Frames: []Frame{}}, l)
	assert.Equal(t, []int32{kern, user, bare}, r.Stack(stack).AsRaw())
	assert.Equal(t, Link{TraceID: pcommon.TraceID{1, 2}, SpanID: pcommon.SpanID{3}}, r.Link(link))
	assert.Equal(t, full, r.Labels(s.AttributeIndices()))
	assert.Equal(t, off, r.Labels(s2.AttributeIndices()))
	assert.Equal(t, NoLabels, r.Labels(pcommon.NewInt32Slice()))
	assert.True(t, r.OffCPU(p))
	assert.Equal(t, int64(10_000_000), r.PeriodNs(p))
	o, ok := r.ClockOffset(p)
	assert.True(t, ok)
	assert.Equal(t, int64(-42), o)

	on := pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().AppendEmpty()
	b.SetProfileType(on, false, 1_000_000)
	assert.False(t, r.OffCPU(on))
	assert.Equal(t, int64(1_000_000), r.PeriodNs(on))
	_, ok = r.ClockOffset(on)
	assert.False(t, ok, "a profile without the attribute has no offset")
}

// TestReaderOutOfRange: indices a client made up read as the empty entry.
func TestReaderOutOfRange(t *testing.T) {
	pd := pprofile.NewProfiles()
	b := New(pd.Dictionary())
	b.Str("x")
	r := NewReader(pd.Dictionary())
	for _, i := range []int32{-1, 1 << 20} {
		assert.Equal(t, "", r.Str(i))
		assert.Equal(t, Mapping{}, r.Mapping(i))
		assert.Equal(t, Function{}, r.Function(i))
		assert.Equal(t, Link{}, r.Link(i))
		var l Location
		r.Location(i, &l)
		assert.Equal(t, Location{}, l)
		assert.Zero(t, r.Stack(i).Len())
		idx := pcommon.NewInt32Slice()
		idx.Append(i)
		assert.Equal(t, NoLabels, r.Labels(idx))
	}
}

// TestValues: one value per timestamp; a sample without timestamps is one
// value at the profile's start.
func TestValues(t *testing.T) {
	p := pprofile.NewProfile()
	p.SetTime(500)
	s := p.Samples().AppendEmpty()
	s.TimestampsUnixNano().FromRaw([]uint64{10, 20})
	s.Values().FromRaw([]int64{3, 4})
	type tv struct {
		t uint64
		v int64
	}
	var got []tv
	Values(p, s, func(t uint64, v int64) { got = append(got, tv{t, v}) })
	require.Equal(t, []tv{{10, 3}, {20, 4}}, got)

	agg := p.Samples().AppendEmpty()
	agg.Values().FromRaw([]int64{9})
	got = nil
	Values(p, agg, func(t uint64, v int64) { got = append(got, tv{t, v}) })
	require.Equal(t, []tv{{500, 9}}, got)
}
