package tracefileexporter

import (
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/perfprof/perfprof/exporter/tracefileexporter/internal/metadata"
	"github.com/perfprof/perfprof/internal/wire"
)

// profBuilder builds pdata profiles as the perfprof receiver emits them:
// one dictionary, a ResourceProfiles per process, a sample per timestamp.
type profBuilder struct {
	pd    pprofile.Profiles
	d     pprofile.ProfilesDictionary
	strs  map[string]int32
	funcs map[string]int32
}

func newProfBuilder() *profBuilder {
	pd := pprofile.NewProfiles()
	b := &profBuilder{pd: pd, d: pd.Dictionary(), strs: map[string]int32{}, funcs: map[string]int32{}}
	b.str("")
	b.d.MappingTable().AppendEmpty()
	b.d.LinkTable().AppendEmpty()
	b.d.StackTable().AppendEmpty()
	b.d.AttributeTable().AppendEmpty()
	return b
}

func (b *profBuilder) str(s string) int32 {
	if i, ok := b.strs[s]; ok {
		return i
	}
	i := int32(b.d.StringTable().Len())
	b.d.StringTable().Append(s)
	b.strs[s] = i
	return i
}

// fn is a frame of a test location: "name@file:line".
type fn struct {
	name, file string
	line       int64
}

// location adds a location at addr whose frames are inlined-first (pprof's
// order: the last frame owns the address).
func (b *profBuilder) location(addr uint64, frames ...fn) int32 {
	i := int32(b.d.LocationTable().Len())
	l := b.d.LocationTable().AppendEmpty()
	l.SetAddress(addr)
	for _, f := range frames {
		k := f.name + "\x00" + f.file
		fi, ok := b.funcs[k]
		if !ok {
			fi = int32(b.d.FunctionTable().Len())
			fu := b.d.FunctionTable().AppendEmpty()
			fu.SetNameStrindex(b.str(f.name))
			fu.SetFilenameStrindex(b.str(f.file))
			b.funcs[k] = fi
		}
		ln := l.Lines().AppendEmpty()
		ln.SetFunctionIndex(fi)
		ln.SetLine(f.line)
	}
	return i
}

func (b *profBuilder) stack(locs ...int32) int32 {
	i := int32(b.d.StackTable().Len())
	b.d.StackTable().AppendEmpty().LocationIndices().FromRaw(locs)
	return i
}

func (b *profBuilder) attr(key string, v any) int32 {
	i := int32(b.d.AttributeTable().Len())
	a := b.d.AttributeTable().AppendEmpty()
	a.SetKeyStrindex(b.str(key))
	switch v := v.(type) {
	case int:
		a.Value().SetInt(int64(v))
	case string:
		a.Value().SetStr(v)
	}
	return i
}

func (b *profBuilder) link(trace [16]byte, span [8]byte) int32 {
	i := int32(b.d.LinkTable().Len())
	l := b.d.LinkTable().AppendEmpty()
	l.SetTraceID(trace)
	l.SetSpanID(span)
	return i
}

// profile adds a process with one profile: on-CPU (samples/count, period
// 1 ms) or off-CPU (off_cpu/nanoseconds).
func (b *profBuilder) profile(pid int, service string, off bool) pprofile.Profile {
	rp := b.pd.ResourceProfiles().AppendEmpty()
	rp.Resource().Attributes().PutInt("process.pid", int64(pid))
	if service != "" {
		rp.Resource().Attributes().PutStr("service.name", service)
	}
	p := rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	if off {
		p.SampleType().SetTypeStrindex(b.str("off_cpu"))
		p.SampleType().SetUnitStrindex(b.str("nanoseconds"))
	} else {
		p.SampleType().SetTypeStrindex(b.str("samples"))
		p.SampleType().SetUnitStrindex(b.str("count"))
		p.PeriodType().SetTypeStrindex(b.str("cpu"))
		p.PeriodType().SetUnitStrindex(b.str("nanoseconds"))
		p.SetPeriod(1_000_000)
	}
	return p
}

// sample adds a sample of stack with attributes, a link (0 = none) and one
// value per timestamp.
func (b *profBuilder) sample(p pprofile.Profile, stack, link int32, attrs []int32, ts []uint64, vals []int64) {
	s := p.Samples().AppendEmpty()
	s.SetStackIndex(stack)
	s.SetLinkIndex(link)
	s.AttributeIndices().FromRaw(attrs)
	s.TimestampsUnixNano().FromRaw(ts)
	s.Values().FromRaw(vals)
}

// span adds a span to td.
func addSpan(td ptrace.Traces, service string, pid int, name string, trace [16]byte, span, parent [8]byte,
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

// newTestFile returns a started traceFile writing into dir.
func newTestFile(t testing.TB, dir string, f func(*Config)) *traceFile {
	t.Helper()
	cfg := createDefaultConfig()
	cfg.Directory = dir
	if f != nil {
		f(cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	set := exportertest.NewNopSettings(metadata.Type)
	e, err := newTraceFile(cfg, set)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.start(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	return e
}

// segmentFiles lists the sealed segments of dir in order (N ascending).
func segmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	type seg struct {
		n    int
		path string
	}
	var segs []seg
	for _, e := range ents {
		name := e.Name()
		rest, ok := strings.CutPrefix(name, "trace.")
		if !ok || strings.HasSuffix(name, ".active") {
			continue
		}
		num, _, _ := strings.Cut(rest, ".")
		n, err := strconv.Atoi(num)
		if err != nil {
			continue
		}
		segs = append(segs, seg{n, filepath.Join(dir, name)})
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].n < segs[j].n })
	out := make([]string, len(segs))
	for i, s := range segs {
		out[i] = s.path
	}
	return out
}

// readTRC reads a whole TRC segment (gzip or not); it fails the test on
// any decode error.
func readTRC(t *testing.T, path string) []*wire.Event {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	evs, err := wire.ReadAll(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return evs
}

// readLegacy reads a whole legacy segment.
func readLegacy(t *testing.T, path string) []wire.LegacyRecord {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	lr, err := wire.NewLegacyReader(r)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var recs []wire.LegacyRecord
	for {
		var rec wire.LegacyRecord
		err := lr.Read(&rec)
		if errors.Is(err, io.EOF) {
			return recs
		}
		if err != nil {
			t.Fatalf("%s: after %d records: %v", path, len(recs), err)
		}
		recs = append(recs, rec)
	}
}

// symbolTable collects the SymbolTableEntry events of a segment: address →
// frames by inline depth ("name file:line").
func symbolTable(evs []*wire.Event) map[uint64][]string {
	syms := map[uint64][]string{}
	for _, ev := range evs {
		if ev.Name() != "SymbolTableEntry" {
			continue
		}
		a, _ := ev.Uint("addr")
		d, _ := ev.Uint("inline_depth")
		name, _ := ev.Str("symbol_name")
		file, _ := ev.Str("source_file")
		line, _ := ev.Uint("source_line")
		for uint64(len(syms[a])) <= d {
			syms[a] = append(syms[a], "")
		}
		syms[a][d] = name + " " + file + ":" + strconv.FormatUint(line, 10)
	}
	return syms
}
