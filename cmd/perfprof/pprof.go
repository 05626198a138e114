package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"

	"github.com/google/pprof/profile"

	"github.com/perfprof/perfprof/internal/analysis"
	"github.com/perfprof/perfprof/internal/convention"
)

func init() {
	register(&command{
		name: "pprof",
		summary: "write a pprof profile (samples/count of on-CPU samples; off_cpu_samples/count when there are off-CPU samples, " +
			"and off_cpu/nanoseconds when they carry value_ns) with labels thread, tid, worker, span, root_span, trace_id, pid " +
			"and the samples' context attributes (http.route, ...)",
		help: selectHelp + "\n\nWith a selector the profile holds only the selection's samples; its comments name the selector.\n\n" +
			"A sample's context attributes (those of the thread context it was read in: http.route,\n" +
			"datadog.trace_endpoint, ...) are string labels under their names, so that\n" +
			"go tool pprof -tagfocus='http.route=GET /alpha' or -tagroot=http.route work without spans;\n" +
			"an attribute named as one of the labels above is left out.",
		usage: "-o OUT.pb.gz [--span NAME] [--trace-id ID] [--span-id ID] [--slowest N] FILE|DIR…",
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			var in inputFlags
			var sf selectFlags
			in.declare(fs)
			sf.declare(fs)
			out := fs.String("o", "", "output file (gzipped profile.proto), required")
			return func(e *env, args []string) error {
				if *out == "" {
					return usageError{"-o is required"}
				}
				if err := sf.check(); err != nil {
					return err
				}
				t, err := in.load(e, args)
				if err != nil {
					return err
				}
				sel, err := sf.selection(t)
				if err != nil {
					return err
				}
				p, err := buildProfile(t, sel)
				if err != nil {
					return err
				}
				if sel != nil && len(p.Sample) == 0 {
					fmt.Fprintf(e.stderr, "perfprof pprof: warning: the %d selected span(s) have no samples\n", len(sel.Spans))
				}
				f, err := os.Create(*out)
				if err != nil {
					return err
				}
				if err := p.Write(f); err != nil {
					f.Close()
					return fmt.Errorf("write %s: %w", *out, err)
				}
				return f.Close()
			}
		},
	})
}

// offCPUSamplesType counts off-CPU samples, for traces without value_ns.
const offCPUSamplesType = convention.OffCPUType + "_samples"

// Sample value indices of the profile.
const (
	vSamples    = 0 // on-CPU samples
	vOffSamples = 1 // off-CPU samples
	vOffNs      = 2 // off-CPU ns (value_ns)
)

// buildProfile converts the samples of sel (nil: all) into a pprof
// profile. Samples with the same stack, thread, worker, span and context
// attributes are merged.
func buildProfile(t *analysis.Trace, sel *analysis.Selection) (*profile.Profile, error) {
	hasOff, hasNs := offCPUValues(t, sel)
	p := &profile.Profile{
		SampleType:        sampleTypes(hasOff, hasNs),
		DefaultSampleType: convention.OnCPUSampleType,
		PeriodType:        &profile.ValueType{Type: convention.OnCPUPeriodType, Unit: convention.OnCPUPeriodUnit},
	}
	describeProfile(p, t, sel)
	b := newProfileBuilder(p, t)
	for i := range t.Samples {
		if s := &t.Samples[i]; sel.Has(s) {
			b.add(s, hasNs)
		}
	}
	if err := p.CheckValid(); err != nil {
		return nil, fmt.Errorf("invalid profile: %w", err)
	}
	return p, nil
}

// offCPUValues says whether sel (nil: all) has off-CPU samples and whether
// any of them carries value_ns.
func offCPUValues(t *analysis.Trace, sel *analysis.Selection) (hasOff, hasNs bool) {
	for i := range t.Samples {
		s := &t.Samples[i]
		if s.Source == analysis.SourceOffCPU && sel.Has(s) {
			hasOff = true
			hasNs = hasNs || s.Value > 0
		}
	}
	return hasOff, hasNs
}

// sampleTypes are the profile's sample types, in the order of the value
// indices vSamples, vOffSamples and vOffNs; hasNs implies hasOff.
func sampleTypes(hasOff, hasNs bool) []*profile.ValueType {
	types := []*profile.ValueType{{Type: convention.OnCPUSampleType, Unit: convention.OnCPUSampleUnit}}
	if hasOff {
		types = append(types, &profile.ValueType{Type: offCPUSamplesType, Unit: convention.OnCPUSampleUnit})
	}
	if hasNs {
		types = append(types, &profile.ValueType{Type: convention.OffCPUType, Unit: convention.OffCPUUnit})
	}
	return types
}

// describeProfile sets the profile's period, time range and comments (the
// input files and the selector) from the trace.
func describeProfile(p *profile.Profile, t *analysis.Trace, sel *analysis.Selection) {
	if v, err := strconv.ParseInt(t.Metadata[convention.MetaSamplePeriod], 10, 64); err == nil {
		p.Period = v
	}
	if w, ok := t.Wall(t.Start); ok {
		p.TimeNanos = w.UnixNano()
	}
	if t.End > t.Start {
		p.DurationNanos = int64(t.End - t.Start)
	}
	for _, f := range t.Files {
		p.Comments = append(p.Comments, "perfprof: "+f.Path)
	}
	if sel != nil {
		p.Comments = append(p.Comments, fmt.Sprintf("perfprof: selection %s: %d span(s)", sel.Selector, len(sel.Spans)))
	}
}

// profileBuilder fills a profile's mapping, function, location and sample
// tables from a trace, each entry made once, on first use.
type profileBuilder struct {
	p       *profile.Profile
	t       *analysis.Trace
	mapping *profile.Mapping
	funcs   map[analysis.Frame]*profile.Function // by name and file
	locs    []*profile.Location                  // by index into t.Locations
	samples map[sampleKey]*profile.Sample
}

// sampleKey is what tells samples apart in the profile: trace samples with
// the same key are merged into one.
type sampleKey struct {
	stack, thread, link int32
	worker              uint32
}

func newProfileBuilder(p *profile.Profile, t *analysis.Trace) *profileBuilder {
	// One mapping for everything, marked symbolized, so that pprof does not
	// try to symbolize the addresses itself.
	name := "trace"
	if svc := t.Metadata[convention.MetaService]; svc != "" {
		name = svc
	}
	m := &profile.Mapping{ID: 1, Start: 0, Limit: ^uint64(0), File: name,
		HasFunctions: true, HasFilenames: true, HasLineNumbers: true, HasInlineFrames: true}
	p.Mapping = []*profile.Mapping{m}
	return &profileBuilder{p: p, t: t, mapping: m, funcs: map[analysis.Frame]*profile.Function{},
		locs: make([]*profile.Location, len(t.Locations)), samples: map[sampleKey]*profile.Sample{}}
}

func (b *profileBuilder) function(f analysis.Frame) *profile.Function {
	k := analysis.Frame{Func: f.Func, File: f.File}
	if fn, ok := b.funcs[k]; ok {
		return fn
	}
	fn := &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: f.Func, SystemName: f.Func, Filename: f.File}
	b.p.Function = append(b.p.Function, fn)
	b.funcs[k] = fn
	return fn
}

func (b *profileBuilder) location(i int32) *profile.Location {
	if l := b.locs[i]; l != nil {
		return l
	}
	al := &b.t.Locations[i]
	l := &profile.Location{ID: uint64(len(b.p.Location) + 1), Address: al.Addr, Mapping: b.mapping}
	// pprof lists inlined frames innermost first.
	for j := len(al.Frames) - 1; j >= 0; j-- {
		f := b.t.Frames[al.Frames[j]]
		l.Line = append(l.Line, profile.Line{Function: b.function(f), Line: int64(f.Line)})
	}
	b.p.Location = append(b.p.Location, l)
	b.locs[i] = l
	return l
}

// add counts s in the profile sample of its key, made on first use.
func (b *profileBuilder) add(s *analysis.TraceSample, hasNs bool) {
	k := sampleKey{s.Stack, s.Thread, s.Link, s.Worker}
	ps, ok := b.samples[k]
	if !ok {
		ps = &profile.Sample{Value: make([]int64, len(b.p.SampleType)), Label: map[string][]string{}, NumLabel: map[string][]int64{}}
		for _, li := range b.t.Stacks[s.Stack] {
			ps.Location = append(ps.Location, b.location(li))
		}
		sampleLabels(ps, b.t, s)
		b.samples[k] = ps
		b.p.Sample = append(b.p.Sample, ps)
	}
	if s.Source == analysis.SourceOffCPU {
		ps.Value[vOffSamples]++
		if hasNs {
			ps.Value[vOffNs] += int64(s.Value)
		}
	} else {
		ps.Value[vSamples]++
	}
}

// ownLabels are the labels sampleLabels gives: a context attribute of one
// of these names does not replace them.
var ownLabels = map[string]bool{"thread": true, "tid": true, "pid": true, "worker": true, "span": true, "root_span": true,
	convention.GoLabelTraceID: true}

// sampleLabels labels ps with the thread, worker, span and context
// attributes of s: the parts of its key that pprof can show.
func sampleLabels(ps *profile.Sample, t *analysis.Trace, s *analysis.TraceSample) {
	th := t.Threads[s.Thread]
	ps.Label["thread"] = []string{th.Label()}
	ps.NumLabel["tid"] = []int64{int64(th.Tid)}
	if th.Pid != 0 {
		ps.NumLabel["pid"] = []int64{int64(th.Pid)}
	}
	switch s.Worker {
	case analysis.NoWorker:
	case analysis.BlockingWorker:
		ps.Label["worker"] = []string{"blocking"}
	default:
		ps.Label["worker"] = []string{strconv.Itoa(int(s.Worker))}
	}
	if s.Link < 0 {
		return
	}
	for _, kv := range t.Attrs(s) {
		if !ownLabels[kv.Key] {
			ps.Label[kv.Key] = []string{kv.Value}
		}
	}
	l := t.Links[s.Link]
	if name, ok := t.SpanName(s); ok {
		ps.Label["span"] = []string{name}
	}
	if l.RootName != "" {
		ps.Label["root_span"] = []string{l.RootName}
	}
	if l.TraceID != "" {
		ps.Label[convention.GoLabelTraceID] = []string{l.TraceID}
	}
}
