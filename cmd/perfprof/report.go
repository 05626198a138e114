package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/perfprof/perfprof/internal/analysis"
)

func init() {
	register(&command{
		name: "report",
		summary: "print a text report: samples, span names (count, percentiles, where their time went), hot functions " +
			"overall, per worker, per span and root span, top stacks, long polls, blocking stacks, scheduling delay",
		help: selectHelp + `

With a selector the report starts with the chosen spans (longest first, at
most --groups of them) and their wall-time breakdown: on-CPU (samples × the
sample period), off-CPU blocked and runnable (value_ns), and the rest, not
observed. Function tables, groups and top stacks then count the selection's
samples only. Long polls, blocking stacks and scheduling delay are left out:
they are about workers and threads, not spans, and for a selection the
breakdown's blocked and runnable lines and its off-CPU stacks say the same.
The Spans section always covers the whole trace.`,
		usage: "[--span NAME] [--trace-id ID] [--span-id ID] [--slowest N] [--top N] [--long DURATION] [--groups N] " +
			"[--polls N] [--stacks N] [--depth N] FILE|DIR…",
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			var o reportOpts
			o.in.declare(fs)
			o.sel.declare(fs)
			fs.IntVar(&o.top, "top", 20, "functions per table")
			fs.DurationVar(&o.long, "long", time.Millisecond, "polls longer than this are long polls")
			fs.IntVar(&o.groups, "groups", 10, "groups (workers, spans, root spans, span names, selected spans) shown per section")
			fs.IntVar(&o.polls, "polls", 10, "long polls shown")
			fs.IntVar(&o.stacks, "stacks", 5, "stacks shown per long poll, in the top stacks and in the blocking section")
			fs.IntVar(&o.depth, "depth", 12, "frames shown per stack")
			return func(e *env, args []string) error { return report(e, args, &o) }
		},
	})
}

type reportOpts struct {
	in                                inputFlags
	sel                               selectFlags
	top, groups, polls, stacks, depth int
	long                              time.Duration
}

func report(e *env, args []string, o *reportOpts) error {
	if err := o.sel.check(); err != nil {
		return err
	}
	t, err := o.in.load(e, args)
	if err != nil {
		return err
	}
	sel, err := o.sel.selection(t)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(e.stdout)
	writeReport(bw, t, sel, o)
	return bw.Flush()
}

func dur(ns uint64) string { return time.Duration(ns).String() }

// writeReport writes the report of the whole trace, or of the samples of
// sel when it is not nil.
func writeReport(w io.Writer, t *analysis.Trace, sel *analysis.Selection, o *reportOpts) {
	p := func(format string, a ...any) { printf(w, format, a...) }

	if sel != nil {
		writeSelection(w, t, sel, o)
		section(w, "Trace: everything in the files")
	}

	// Inputs.
	var size, bytes, events int64
	formats := map[string]int{}
	for _, f := range t.Files {
		size += f.Size
		bytes += f.Bytes
		events += f.Events
		k := f.Format
		if f.Gzip {
			k += "+gzip"
		}
		formats[k]++
	}
	var fl []string
	for k, n := range formats {
		fl = append(fl, fmt.Sprintf("%d %s", n, k))
	}
	sort.Strings(fl)
	p("Input: %d file(s) (%s), %s on disk, %d events\n", len(t.Files), strings.Join(fl, ", "), mb(size), events)
	for _, f := range t.Files {
		if f.Truncated {
			p("  %s: truncated tail (events before it are counted)\n", f.Path)
		}
	}

	// Time range.
	if t.End > 0 {
		p("Time: monotonic %.6f s .. %.6f s (%s)\n", float64(t.Start)/1e9, float64(t.End)/1e9, dur(t.End-t.Start))
		if a, ok := t.Wall(t.Start); ok {
			b, _ := t.Wall(t.End)
			p("      wall clock %s .. %s (ClockSync)\n", a.Format(time.RFC3339Nano), b.Format(time.RFC3339Nano))
		} else {
			p("      wall clock unknown (no ClockSyncEvent)\n")
		}
	}
	if len(t.Metadata) > 0 {
		var kv []string
		for k, v := range t.Metadata {
			kv = append(kv, k+"="+v)
		}
		sort.Strings(kv)
		p("Metadata: %s\n", strings.Join(kv, " "))
	}

	// Samples.
	var on, off, offNs int64
	var valued bool
	states := [3]int64{}
	for i := range t.Samples {
		s := &t.Samples[i]
		if s.Source == analysis.SourceOffCPU {
			off++
			offNs += int64(s.Value)
			valued = valued || s.Value > 0
			states[s.State]++
		} else {
			on++
		}
	}
	p("Samples: %d (on-CPU %d, off-CPU %d)\n", on+off, on, off)
	if off > 0 {
		p("  off-CPU: blocked %d, runnable %d, state unknown %d", states[analysis.StateBlocked], states[analysis.StateRunnable], states[analysis.StateUnknown])
		if valued {
			p(", %s off-CPU in total (value_ns)", dur(uint64(offNs)))
		}
		p("\n")
	}
	if len(t.Dropped) == 0 {
		p("Dropped/lost: none reported in the trace\n")
	} else {
		var ks []string
		for k := range t.Dropped {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		p("Dropped/lost:")
		for _, k := range ks {
			p(" %s=%d", k, t.Dropped[k])
		}
		p("\n")
	}
	p("Events by kind:\n")
	var kinds []string
	for k := range t.Counts {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool {
		if t.Counts[kinds[i]] != t.Counts[kinds[j]] {
			return t.Counts[kinds[i]] > t.Counts[kinds[j]]
		}
		return kinds[i] < kinds[j]
	})
	for _, k := range kinds {
		p("  %10d  %s\n", t.Counts[k], k)
	}
	p("Polls: %d, parks: %d, spans (SpanEvent): %d\n", len(t.Polls), len(t.Parks), len(t.Spans))
	if len(t.Warnings) > 0 {
		p("Warnings:\n")
		for _, wn := range t.Warnings {
			p("  %s\n", wn)
		}
	}

	writeSpanNames(w, t, sel != nil, o)

	// Function tables and stacks, of the selection's samples when there is one.
	scope, offScope := "all samples", "all off-CPU samples"
	if sel != nil {
		scope, offScope = "selected spans", "off-CPU samples of the selected spans"
		b := &sel.Breakdown
		on, off, valued = b.OnSamples, b.OffSamples, b.Blocked+b.Runnable+b.OffUnknown > 0
	}
	onF, offF := sel.Filter(analysis.OnCPU), sel.Filter(analysis.OffCPU)
	var onAgg, offAgg *analysis.Agg
	if on > 0 {
		onAgg = t.Aggregate(onF, analysis.Count)
		section(w, "On-CPU functions ("+scope+")")
		funcTable(w, t, onAgg, o.top, "samples")
		groups(w, t, "On-CPU per worker", onF, analysis.Count, t.ByWorker(), o, "samples", "")
		groups(w, t, "On-CPU per span name (span_id -> SpanEvent name)", onF, analysis.Count, t.BySpan(), o, "samples",
			"no on-CPU sample is linked to a span (no span_id fields)")
		groups(w, t, "On-CPU per root span name (span_root_name)", onF, analysis.Count, t.ByRoot(), o, "samples",
			"no on-CPU sample has span_root_name")
	}
	if off > 0 {
		unit := "samples"
		if valued {
			unit = "ns"
		}
		offAgg = t.Aggregate(offF, analysis.OffCPUWeight)
		section(w, "Off-CPU functions ("+offScope+", weighted by value_ns when present)")
		funcTable(w, t, offAgg, o.top, unit)
	}
	if onAgg != nil {
		section(w, fmt.Sprintf("Top on-CPU stacks (%s): %d samples", scope, onAgg.Samples))
		stacks(w, t, onAgg, o.stacks, o.depth, "", "samples")
	}
	if offAgg != nil {
		section(w, fmt.Sprintf("Top off-CPU stacks (%s, weighted by value_ns when present): %d samples", offScope, offAgg.Samples))
		stacks(w, t, offAgg, o.stacks, o.depth, "", "")
	}
	if sel != nil {
		// Polls, blocking and scheduling delay are per worker and thread;
		// the breakdown and the off-CPU stacks above answer for spans.
		return
	}

	// Long polls.
	lps := t.LongPolls(uint64(o.long))
	section(w, fmt.Sprintf("Long polls (> %s): %d of %d polls", o.long, len(lps), len(t.Polls)))
	for i, lp := range lps {
		if i >= o.polls {
			p("  … %d more\n", len(lps)-i)
			break
		}
		pl := t.Polls[lp.Poll]
		p("%2d. worker %d, %s, at +%s, task %d", i+1, pl.Worker, dur(lp.Duration), dur(pl.Start-t.Start), pl.TaskID)
		if sp, ok := t.SpanByID(pl.SpanID()); ok {
			p(", span %s", strconv.Quote(sp.Name))
		}
		if pl.SpawnLoc != "" {
			p(", spawned at %s", pl.SpawnLoc)
		}
		p("\n    samples inside: %d on-CPU, %d off-CPU\n", lp.OnCPU.Samples, lp.OffCPU.Samples)
		stacks(w, t, lp.OnCPU, o.stacks, o.depth, "on-CPU", "samples")
		stacks(w, t, lp.OffCPU, o.stacks, o.depth, "off-CPU", "")
	}

	// Blocking.
	blk, weighted := t.Blocking()
	unit := "samples"
	if weighted {
		unit = "ns"
	}
	section(w, fmt.Sprintf("Blocking stacks (off-CPU, blocked or state unknown, inside spans or polls): %d samples, %s", blk.Samples, weightStr(blk.Total, unit)))
	stacks(w, t, blk, o.stacks, o.depth, "", unit)

	// Scheduling delay.
	sd := t.SchedDelays()
	section(w, "Scheduling delay")
	switch {
	case sd.N == 0:
		p("  no data (no runnable off-CPU samples with value_ns, no WorkerUnparkEvent)\n")
	default:
		p("  from %s: n=%d p50=%s p99=%s max=%s\n", sd.From, sd.N, dur(sd.P50), dur(sd.P99), dur(sd.Max))
	}
}

func section(w io.Writer, title string) {
	printf(w, "\n== %s ==\n", title)
}

func weightStr(v uint64, unit string) string {
	if unit == "ns" {
		return dur(v)
	}
	return fmt.Sprintf("%d %s", v, unit)
}

func funcTable(w io.Writer, t *analysis.Trace, a *analysis.Agg, top int, unit string) {
	fs := t.Funcs(a)
	printf(w, "%d %s, %d functions", a.Samples, "samples", len(fs))
	if unit == "ns" {
		printf(w, ", %s", dur(a.Total))
	}
	printf(w, "\n   SELF%%       SELF   CUMUL%%      CUMUL  FUNCTION\n")
	for i, f := range fs {
		if i >= top {
			break
		}
		printf(w, "  %6.2f%% %10s  %6.2f%% %10s  %s\n", pctOf(f.Self, a.Total), num(f.Self, unit), pctOf(f.Cum, a.Total), num(f.Cum, unit), f.Name)
	}
}

func num(v uint64, unit string) string {
	if unit == "ns" {
		return dur(v)
	}
	return fmt.Sprint(v)
}

func pctOf(n, d uint64) float64 {
	if d == 0 {
		return 0
	}
	return 100 * float64(n) / float64(d)
}

func groups(w io.Writer, t *analysis.Trace, title string, filter func(*analysis.TraceSample) bool, weight analysis.WeightFunc,
	g analysis.Grouping, o *reportOpts, unit, empty string) {
	gs, none := t.AggregateBy(filter, weight, g)
	section(w, fmt.Sprintf("%s: %d groups", title, len(gs)))
	if len(gs) == 0 {
		printf(w, "  %s\n", empty)
		return
	}
	if none.Samples > 0 {
		printf(w, "  (%d samples in no group)\n", none.Samples)
	}
	for i, gr := range gs {
		if i >= o.groups {
			printf(w, "  … %d more groups\n", len(gs)-i)
			break
		}
		printf(w, "-- %s: ", gr.Name)
		funcTable(w, t, gr.Agg, o.top, unit)
	}
}

func stacks(w io.Writer, t *analysis.Trace, a *analysis.Agg, n, depth int, label, unit string) {
	if a.Samples == 0 {
		return
	}
	if unit == "" {
		unit = "samples"
		if a.Total != uint64(a.Samples) { // weighted by value_ns
			unit = "ns"
		}
	}
	for _, sw := range analysis.TopStacks(a, n) {
		printf(w, "    %5.1f%% %s", pctOf(sw.Weight, a.Total), weightStr(sw.Weight, unit))
		if label != "" {
			printf(w, " %s", label)
		}
		fmt.Fprintln(w)
		frames := t.StackFrames(sw.Stack)
		for i, f := range frames {
			if i >= depth {
				printf(w, "          … %d more frames\n", len(frames)-i)
				break
			}
			printf(w, "          %s", f.Func)
			if f.File != "" && f.File != "kernel" {
				printf(w, " (%s:%d)", f.File, f.Line)
			} else if f.File == "kernel" {
				printf(w, " [kernel]")
			}
			fmt.Fprintln(w)
		}
	}
}
