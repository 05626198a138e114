package pprofiledict

import (
	"fmt"
	"testing"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatatest/pprofiletest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/perfprof/perfprof/internal/convention"
)

func TestEmptyEntries(t *testing.T) {
	b := New(pprofile.NewProfiles().Dictionary())
	d := b.Dictionary()
	for name, n := range map[string]int{
		"strings": d.StringTable().Len(), "attributes": d.AttributeTable().Len(), "links": d.LinkTable().Len(),
		"mappings": d.MappingTable().Len(), "functions": d.FunctionTable().Len(),
		"locations": d.LocationTable().Len(), "stacks": d.StackTable().Len(),
	} {
		assert.Equal(t, 1, n, "%s: the empty entry only", name)
	}
	// The zero value of every kind of entry is the empty entry.
	for name, i := range map[string]int32{
		"string": b.Str(""), "link": b.Link(pcommon.TraceID{}, pcommon.SpanID{}), "mapping": b.Mapping(Mapping{}),
		"function": b.Function(Function{}), "location": b.Location(0, 0), "stack": b.Stack(nil),
	} {
		assert.Zero(t, i, name)
	}
	assert.Equal(t, "", d.StringTable().At(0))
	assert.Equal(t, 1, d.LocationTable().Len(), "no entry was added")
}

// TestIntern checks, for each kind of entry, that equal inputs give one
// index and inputs that differ in any field give another.
func TestIntern(t *testing.T) {
	tr := pcommon.TraceID{1, 2, 3}
	sp := pcommon.SpanID{4, 5}
	tests := []struct {
		name      string
		same      func(*Builder) int32 // called twice: the same index
		different []func(*Builder) int32
	}{
		{"string", func(b *Builder) int32 { return b.Str("a") },
			[]func(*Builder) int32{func(b *Builder) int32 { return b.Str("b") }}},
		{"string attribute", func(b *Builder) int32 { return b.AttrStr("k", "v") }, []func(*Builder) int32{
			func(b *Builder) int32 { return b.AttrStr("k", "w") },
			func(b *Builder) int32 { return b.AttrStr("j", "v") },
		}},
		{"int attribute", func(b *Builder) int32 { return b.AttrInt("k", 7) }, []func(*Builder) int32{
			func(b *Builder) int32 { return b.AttrInt("k", 8) },
			func(b *Builder) int32 { return b.AttrStr("k", "7") },
			func(b *Builder) int32 { return b.AttrIntUnit("k", 7, "ns") },
		}},
		{"int attribute with unit", func(b *Builder) int32 { return b.AttrIntUnit("k", 7, "ns") }, []func(*Builder) int32{
			func(b *Builder) int32 { return b.AttrIntUnit("k", 7, "ms") },
			func(b *Builder) int32 { return b.AttrStr("k", "ns") },
		}},
		{"link", func(b *Builder) int32 { return b.Link(tr, sp) }, []func(*Builder) int32{
			func(b *Builder) int32 { return b.Link(tr, pcommon.SpanID{4, 6}) },
			func(b *Builder) int32 { return b.Link(pcommon.TraceID{1}, sp) },
		}},
		{"mapping", func(b *Builder) int32 { return b.Mapping(Mapping{Start: 1, Limit: 2, Offset: 3, File: "/a"}) }, []func(*Builder) int32{
			func(b *Builder) int32 { return b.Mapping(Mapping{Start: 1, Limit: 2, Offset: 4, File: "/a"}) },
			func(b *Builder) int32 { return b.Mapping(Mapping{Start: 1, Limit: 2, Offset: 3, File: "/b"}) },
			func(b *Builder) int32 {
				return b.Mapping(Mapping{Start: 1, Limit: 2, Offset: 3, File: "/a", BuildID: "x"})
			},
		}},
		{"function", func(b *Builder) int32 {
			return b.Function(Function{Name: "f", SystemName: "_Z1fv", File: "f.c", StartLine: 3})
		},
			[]func(*Builder) int32{
				func(b *Builder) int32 { return b.Function(Function{Name: "f", File: "f.c", StartLine: 3}) },
				func(b *Builder) int32 {
					return b.Function(Function{Name: "f", SystemName: "_Z1fv", File: "f.c", StartLine: 4})
				},
			}},
		{"location", func(b *Builder) int32 { return b.Location(0x10, 1, Line{Function: 1, Line: 2}) }, []func(*Builder) int32{
			func(b *Builder) int32 { return b.Location(0x11, 1, Line{Function: 1, Line: 2}) },
			func(b *Builder) int32 { return b.Location(0x10, 2, Line{Function: 1, Line: 2}) },
			func(b *Builder) int32 { return b.Location(0x10, 1, Line{Function: 1, Line: 3}) },
			func(b *Builder) int32 { return b.Location(0x10, 1, Line{Function: 1, Line: 2, Column: 1}) },
			func(b *Builder) int32 {
				return b.Location(0x10, 1, Line{Function: 1, Line: 2}, Line{Function: 1, Line: 2})
			},
			func(b *Builder) int32 { return b.Location(0x10, 1) },
			func(b *Builder) int32 { return b.KernelLocation(0x10, 1, Line{Function: 1, Line: 2}) },
		}},
		{"stack", func(b *Builder) int32 { return b.Stack([]int32{1, 2}) }, []func(*Builder) int32{
			func(b *Builder) int32 { return b.Stack([]int32{2, 1}) },
			func(b *Builder) int32 { return b.Stack([]int32{1}) },
			func(b *Builder) int32 { return b.Stack([]int32{1, 2, 0}) },
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := New(pprofile.NewProfiles().Dictionary())
			i := tt.same(b)
			assert.NotZero(t, i)
			assert.Equal(t, i, tt.same(b))
			seen := map[int32]bool{i: true}
			for n, f := range tt.different {
				j := f(b)
				assert.False(t, seen[j], "variant %d got index %d, taken", n, j)
				seen[j] = true
			}
			assert.Equal(t, i, tt.same(b), "still found after the others")
		})
	}
}

// TestEntries checks what the Builder writes into the tables.
func TestEntries(t *testing.T) {
	b := New(pprofile.NewProfiles().Dictionary())
	d := b.Dictionary()
	str := func(i int32) string { return d.StringTable().At(int(i)) }

	a := d.AttributeTable().At(int(b.AttrIntUnit(convention.CPUTimeDelta, 20_000, convention.CPUTimeDeltaUnit)))
	assert.Equal(t, convention.CPUTimeDelta, str(a.KeyStrindex()))
	assert.Equal(t, int64(20_000), a.Value().Int())
	assert.Equal(t, "ns", str(a.UnitStrindex()))
	a = d.AttributeTable().At(int(b.AttrStr(convention.ThreadName, "w")))
	assert.Equal(t, "w", a.Value().Str())
	assert.Equal(t, "", str(a.UnitStrindex()))

	l := d.LinkTable().At(int(b.Link(pcommon.TraceID{9}, pcommon.SpanID{8})))
	assert.Equal(t, pcommon.TraceID{9}, l.TraceID())
	assert.Equal(t, pcommon.SpanID{8}, l.SpanID())

	for _, c := range []struct{ id, key string }{
		{"0123456789abcdef0123456789abcdef01234567", convention.BuildIDGNU},
		{"0123456789abcdef0123456789abcdef", convention.BuildIDGNU},
		{"0123456789ABCDEF0123456789ABCDEF01234567", convention.BuildIDGNU},
		{"abc/def/ghi/jkl", convention.BuildIDGo},
		{"Xz3_-aQ1bC/0123456789abcdef", convention.BuildIDGo},
		{"0123456789abcdef0", convention.BuildIDGo},
	} {
		mi := b.Mapping(Mapping{Start: 0x1000, Limit: 0x2000, Offset: 0x100, File: "/bin/x", BuildID: c.id})
		m := d.MappingTable().At(int(mi))
		assert.Equal(t, []uint64{0x1000, 0x2000, 0x100}, []uint64{m.MemoryStart(), m.MemoryLimit(), m.FileOffset()})
		assert.Equal(t, "/bin/x", str(m.FilenameStrindex()))
		require.Equal(t, 1, m.AttributeIndices().Len())
		ba := d.AttributeTable().At(int(m.AttributeIndices().At(0)))
		assert.Equal(t, c.key, str(ba.KeyStrindex()), c.id)
		assert.Equal(t, c.id, ba.Value().Str())
	}
	assert.Zero(t, d.MappingTable().At(int(b.Mapping(Mapping{File: "/bin/y"}))).AttributeIndices().Len())

	fi := b.Function(Function{Name: "ns::f()", SystemName: "_ZN2ns1fEv", File: "f.cc", StartLine: 12})
	fn := d.FunctionTable().At(int(fi))
	assert.Equal(t, []string{"ns::f()", "_ZN2ns1fEv", "f.cc"}, []string{str(fn.NameStrindex()), str(fn.SystemNameStrindex()), str(fn.FilenameStrindex())})
	assert.Equal(t, int64(12), fn.StartLine())

	li := b.Location(0x1234, 1, Line{Function: fi, Line: 14, Column: 3}, Line{Function: fi, Line: 20})
	loc := d.LocationTable().At(int(li))
	assert.Equal(t, uint64(0x1234), loc.Address())
	assert.Equal(t, int32(1), loc.MappingIndex())
	require.Equal(t, 2, loc.Lines().Len())
	assert.Equal(t, []int64{int64(fi), 14, 3}, []int64{int64(loc.Lines().At(0).FunctionIndex()), loc.Lines().At(0).Line(), loc.Lines().At(0).Column()})
	assert.Equal(t, int64(20), loc.Lines().At(1).Line())

	raw := []int32{li, li}
	si := b.Stack(raw)
	raw[0] = 0 // the table keeps its own copy
	assert.Equal(t, []int32{li, li}, d.StackTable().At(int(si)).LocationIndices().AsRaw())
}

// TestValidProfile builds a profile as the receiver does and has
// collector-contrib's validator check it.
func TestValidProfile(t *testing.T) {
	pd := pprofile.NewProfiles()
	b := New(pd.Dictionary())
	p := pd.ResourceProfiles().AppendEmpty().ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	b.SetValueType(p.SampleType(), convention.OnCPUSampleType, convention.OnCPUSampleUnit)
	b.SetValueType(p.PeriodType(), convention.OnCPUPeriodType, convention.OnCPUPeriodUnit)
	p.SetPeriod(10_101_010)
	p.SetTime(pcommon.Timestamp(1_000))
	p.SetDurationNano(1_000)
	mi := b.Mapping(Mapping{Start: 0x400000, Limit: 0x500000, File: "/bin/app", BuildID: "0123456789abcdef0123456789abcdef01234567"})
	main := b.Function(Function{Name: "main", SystemName: "main", File: "main.c", StartLine: 1})
	work := b.Function(Function{Name: "work", SystemName: "work", File: "work.c", StartLine: 5})
	leaf := b.Location(0x401010, mi, Line{Function: work, Line: 7})
	root := b.Location(0x400100, mi, Line{Function: main, Line: 3})
	for i := range 3 {
		s := p.Samples().AppendEmpty()
		s.SetStackIndex(b.Stack([]int32{leaf, root}))
		s.SetLinkIndex(b.Link(pcommon.TraceID{1}, pcommon.SpanID{byte(i % 2)}))
		s.AttributeIndices().Append(b.AttrInt(convention.ThreadID, 42), b.AttrStr(convention.ThreadName, "app"))
		s.TimestampsUnixNano().Append(uint64(1_000 + i))
		s.Values().Append(1)
	}
	require.NoError(t, pprofiletest.ValidateProfile(pd.Dictionary(), p))
	assert.Equal(t, 2, pd.Dictionary().StackTable().Len())
	assert.Equal(t, 3, pd.Dictionary().LinkTable().Len(), "span 0, span 1 and the empty link")
}

// BenchmarkBuild interns what a report of a busy process holds: 10 000
// samples over 500 stacks of 20 locations from 1 000 functions, each with
// its thread attributes and a link.
func BenchmarkBuild(b *testing.B) {
	const stacks, depth, funcs, samples = 500, 20, 1000, 10_000
	names := make([]string, funcs)
	for i := range names {
		names[i] = fmt.Sprintf("crate::module::function_%d", i)
	}
	b.ReportAllocs()
	for b.Loop() {
		d := New(pprofile.NewProfiles().Dictionary())
		m := d.Mapping(Mapping{Start: 0x400000, Limit: 0x900000, File: "/bin/app"})
		locs := make([]int32, depth)
		for s := range samples {
			st := s % stacks
			for j := range locs {
				f := (st*7 + j*13) % funcs
				fi := d.Function(Function{Name: names[f], SystemName: names[f], File: "/src/lib.rs"})
				locs[j] = d.Location(0x400000+uint64(f)*0x40, m, Line{Function: fi, Line: int64(j)})
			}
			d.Stack(locs)
			d.AttrInt(convention.ThreadID, int64(1000+s%8))
			d.AttrStr(convention.ThreadName, "tokio-rt-worker")
			d.Link(pcommon.TraceID{byte(s)}, pcommon.SpanID{byte(s >> 8)})
		}
	}
}
