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
			"and off_cpu/nanoseconds when they carry value_ns) with labels thread, tid, worker, span, root_span, trace_id, pid",
		help:  selectHelp + "\n\nWith a selector the profile holds only the selection's samples; its comments name the selector.",
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
// profile. Samples with the same stack, thread, worker and span are merged.
func buildProfile(t *analysis.Trace, sel *analysis.Selection) (*profile.Profile, error) {
	var hasOff, hasNs bool
	for i := range t.Samples {
		s := &t.Samples[i]
		if s.Source == analysis.SourceOffCPU && sel.Has(s) {
			hasOff = true
			hasNs = hasNs || s.Value > 0
		}
	}
	p := &profile.Profile{
		SampleType:        []*profile.ValueType{{Type: convention.OnCPUSampleType, Unit: convention.OnCPUSampleUnit}},
		DefaultSampleType: convention.OnCPUSampleType,
		PeriodType:        &profile.ValueType{Type: convention.OnCPUPeriodType, Unit: convention.OnCPUPeriodUnit},
	}
	if hasOff {
		p.SampleType = append(p.SampleType, &profile.ValueType{Type: offCPUSamplesType, Unit: convention.OnCPUSampleUnit})
	}
	if hasNs {
		p.SampleType = append(p.SampleType, &profile.ValueType{Type: convention.OffCPUType, Unit: convention.OffCPUUnit})
	}
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

	// One mapping for everything, marked symbolized, so that pprof does not
	// try to symbolize the addresses itself.
	name := "trace"
	if svc := t.Metadata[convention.MetaService]; svc != "" {
		name = svc
	}
	m := &profile.Mapping{ID: 1, Start: 0, Limit: ^uint64(0), File: name,
		HasFunctions: true, HasFilenames: true, HasLineNumbers: true, HasInlineFrames: true}
	p.Mapping = []*profile.Mapping{m}
	funcs := map[analysis.Frame]*profile.Function{}
	function := func(f analysis.Frame) *profile.Function {
		k := analysis.Frame{Func: f.Func, File: f.File}
		if fn, ok := funcs[k]; ok {
			return fn
		}
		fn := &profile.Function{ID: uint64(len(p.Function) + 1), Name: f.Func, SystemName: f.Func, Filename: f.File}
		p.Function = append(p.Function, fn)
		funcs[k] = fn
		return fn
	}
	locs := make([]*profile.Location, len(t.Locations))
	location := func(i int32) *profile.Location {
		if l := locs[i]; l != nil {
			return l
		}
		al := &t.Locations[i]
		l := &profile.Location{ID: uint64(len(p.Location) + 1), Address: al.Addr, Mapping: m}
		// pprof lists inlined frames innermost first.
		for j := len(al.Frames) - 1; j >= 0; j-- {
			f := t.Frames[al.Frames[j]]
			l.Line = append(l.Line, profile.Line{Function: function(f), Line: int64(f.Line)})
		}
		p.Location = append(p.Location, l)
		locs[i] = l
		return l
	}

	type key struct {
		stack, thread, link int32
		worker              uint32
	}
	samples := map[key]*profile.Sample{}
	for i := range t.Samples {
		s := &t.Samples[i]
		if !sel.Has(s) {
			continue
		}
		k := key{s.Stack, s.Thread, s.Link, s.Worker}
		ps, ok := samples[k]
		if !ok {
			ps = &profile.Sample{Value: make([]int64, len(p.SampleType)), Label: map[string][]string{}, NumLabel: map[string][]int64{}}
			for _, li := range t.Stacks[s.Stack] {
				ps.Location = append(ps.Location, location(li))
			}
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
			if s.Link >= 0 {
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
			samples[k] = ps
			p.Sample = append(p.Sample, ps)
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
	if err := p.CheckValid(); err != nil {
		return nil, fmt.Errorf("invalid profile: %w", err)
	}
	return p, nil
}
