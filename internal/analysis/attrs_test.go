package analysis_test

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/perfprof/perfprof/internal/analysis"
	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/wire"
)

// attrSegment is a segment of samples with context attributes, as the
// exporter writes one: routes[i] is the http.route of the set with id i
// (user.name "u"+route), and each sample names its set (-1: none), is
// on-CPU unless offNs > 0, and is linked to a span when spanned.
type attrSegment struct {
	routes  []string
	samples []attrSample
}

type attrSample struct {
	set     int
	offNs   uint64
	spanned bool
}

func (seg attrSegment) write(t *testing.T, w *wire.Writer, ts *uint64) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.WriteSegmentMetadata(wire.SegmentMetadataEvent{Timestamp: *ts,
		Entries: []wire.StringPair{{Key: convention.MetaSamplePeriod, Value: "1000000"}}}))
	must(w.WriteSymbolTableEntry(wire.SymbolTableEntry{Addr: 0x1000, SymbolName: "work"}))
	for i, r := range seg.routes {
		must(w.WriteContextAttributeSet(wire.ContextAttributeSet{ID: uint64(i), Attributes: []wire.StringPair{
			{Key: convention.HTTPRoute, Value: r}, {Key: "user.name", Value: "u" + r}}}))
	}
	for _, s := range seg.samples {
		*ts += 1_000_000
		e := wire.CpuSampleEvent{Timestamp: *ts, WorkerID: convention.NoWorker, Tid: 7, Callchain: []uint64{0x1000}}
		var x wire.CpuSampleExt
		if s.set >= 0 {
			x.ContextSetID = wire.Some(uint64(s.set))
		}
		if s.offNs > 0 {
			e.Source, x.ValueNs, x.ThreadState = convention.SourceOffCPU, wire.Some(s.offNs), wire.Some[uint8](wire.ThreadBlocked)
		}
		if s.spanned {
			x.TraceID, x.SpanID = wire.Some("0102030405060708090a0b0c0d0e0f10"), wire.Some("1112131415161718")
		}
		must(w.WriteCpuSampleExt(e, x))
	}
	must(w.Flush())
}

// writeSegments writes each segment as a file of its own, or all of them
// concatenated into one file.
func writeSegments(t *testing.T, concat bool, segs ...attrSegment) []string {
	dir := t.TempDir()
	var paths []string
	var all bytes.Buffer
	ts := uint64(1e9)
	for i, seg := range segs {
		var buf bytes.Buffer
		seg.write(t, wire.NewWriter(&buf), &ts)
		if concat {
			all.Write(buf.Bytes())
			continue
		}
		p := filepath.Join(dir, "trace."+string(rune('1'+i))+".bin")
		if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	if concat {
		p := filepath.Join(dir, "all.bin")
		if err := os.WriteFile(p, all.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		paths = []string{p}
	}
	return paths
}

// routeCounts are a trace's samples per http.route value, "(none)" for
// those without, on-CPU and off-CPU.
func routeCounts(tr *analysis.Trace) map[string][2]int64 {
	out := map[string][2]int64{}
	gs, none := tr.BreakdownBy(nil, tr.ByAttr(convention.HTTPRoute))
	for _, g := range gs {
		out[g.Name] = [2]int64{g.OnSamples, g.OffSamples}
	}
	if none.OnSamples+none.OffSamples > 0 {
		out["(none)"] = [2]int64{none.OnSamples, none.OffSamples}
	}
	return out
}

// TestContextAttributes: samples are grouped by the value of a context
// attribute of their set, an id meaning the set last defined under it in
// its file: across the files of a directory, in files concatenated into
// one, with and without span links.
func TestContextAttributes(t *testing.T) {
	first := attrSegment{routes: []string{"GET /a", "GET /b"}, samples: []attrSample{
		{set: 0, spanned: true}, {set: 0, spanned: true}, {set: 0}, {set: 1}, {set: 0, offNs: 5_000_000}, {set: -1}}}
	// The next segment numbers its sets from 0 again, for other routes.
	second := attrSegment{routes: []string{"GET /b", "GET /c"}, samples: []attrSample{{set: 0}, {set: 1}, {set: 1}}}
	want := map[string][2]int64{"GET /a": {3, 1}, "GET /b": {2, 0}, "GET /c": {2, 0}, "(none)": {1, 0}}
	for _, concat := range []bool{false, true} {
		tr := load(t, writeSegments(t, concat, first, second)...)
		if got := routeCounts(tr); !reflect.DeepEqual(got, want) {
			t.Errorf("concatenated %v: samples per route %v, want %v", concat, got, want)
		}
		if len(tr.Warnings) > 0 {
			t.Errorf("concatenated %v: warnings %v", concat, tr.Warnings)
		}
		keys := tr.AttrKeys(nil)
		wantKeys := []analysis.AttrKey{{Key: convention.HTTPRoute, Samples: 8, Values: 3}, {Key: "user.name", Samples: 8, Values: 3}}
		if !reflect.DeepEqual(keys, wantKeys) {
			t.Errorf("concatenated %v: keys %+v, want %+v", concat, keys, wantKeys)
		}
		gs, _ := tr.BreakdownBy(analysis.OnCPU, tr.ByAttr(convention.HTTPRoute))
		if gs[0].Name != "GET /a" || gs[0].OnCPU != 3_000_000 || gs[0].Period != 1_000_000 {
			t.Errorf("concatenated %v: first route %+v, want GET /a with 3 ms on CPU", concat, gs[0])
		}
		for i := range tr.Samples {
			s := &tr.Samples[i]
			r, _ := tr.Attrs(s).Get(convention.HTTPRoute)
			if u, _ := tr.Attrs(s).Get("user.name"); u != "" && u != "u"+r {
				t.Errorf("concatenated %v: sample %d has user.name %q beside route %q", concat, i, u, r)
			}
		}
		// A sample with attributes alone is in no span: the off-CPU one is
		// not a blocking stack.
		if blk, _ := tr.Blocking(); blk.Samples != 0 {
			t.Errorf("concatenated %v: %d blocking samples, want 0", concat, blk.Samples)
		}
	}
}

// TestContextAttributesCompat: a file whose samples predate context_set_id
// reads as without attributes, and a sample naming a set no event defined
// reads so too, with a warning.
func TestContextAttributesCompat(t *testing.T) {
	old := &wire.Schema{Name: wire.NameCpuSample, HasTimestamp: true,
		Fields: wire.CpuSampleExtSchema.Fields[:len(wire.CpuSampleExtSchema.Fields)-1]}
	var buf bytes.Buffer
	w := wire.NewWriter(&buf)
	vals := []wire.Value{wire.VarintValue(255), wire.U32Value(7), wire.U8Value(0), wire.Absent, wire.PooledStackValue([]uint64{0x1000}), wire.Absent}
	for len(vals) < len(old.Fields) {
		vals = append(vals, wire.Absent)
	}
	if err := w.Write(old, 1e9, vals...); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteCpuSampleExt(wire.CpuSampleEvent{Timestamp: 1e9 + 1, WorkerID: 255, Tid: 7, Callchain: []uint64{0x1000}},
		wire.CpuSampleExt{ContextSetID: wire.Some[uint64](9)}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "old.bin")
	if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	tr := load(t, p)
	if got := routeCounts(tr); !reflect.DeepEqual(got, map[string][2]int64{"(none)": {2, 0}}) {
		t.Errorf("samples per route %v", got)
	}
	if len(tr.Warnings) != 1 || !strings.Contains(tr.Warnings[0], "1 samples name a context attribute set") {
		t.Errorf("warnings %v", tr.Warnings)
	}
	if len(tr.AttrKeys(nil)) != 0 {
		t.Errorf("keys %v", tr.AttrKeys(nil))
	}
}
