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
			"overall, per worker, per span and root span, per route (http.route or another context attribute, --by), " +
			"top stacks, long polls, blocking stacks, scheduling delay",
		help: selectHelp + `

With a selector the report starts with the chosen spans (longest first, at
most --groups of them) and their wall-time breakdown: on-CPU (samples × the
sample period), off-CPU blocked and runnable (value_ns), and the rest, not
observed. Function tables, groups and top stacks then count the selection's
samples only. Long polls, blocking stacks and scheduling delay are left out:
they are about workers and threads, not spans, and for a selection the
breakdown's blocked and runnable lines and its off-CPU stacks say the same.
The Spans section always covers the whole trace.

` + attrHelp,
		usage: "[--span NAME] [--trace-id ID] [--span-id ID] [--slowest N] [--by ATTR]… [--top N] [--long DURATION] [--groups N] " +
			"[--polls N] [--stacks N] [--depth N] FILE|DIR…",
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			var o reportOpts
			o.in.declare(fs)
			o.sel.declare(fs)
			fs.IntVar(&o.top, "top", 20, "functions per table")
			fs.DurationVar(&o.long, "long", time.Millisecond, "polls longer than this are long polls")
			fs.Var(&o.by, "by", "group samples by the context attribute `ATTR` (http.route, user.name, ...): samples, CPU time and hot functions per value; repeatable (default: http.route and datadog.trace_endpoint when the samples carry them)")
			fs.IntVar(&o.groups, "groups", 10, "groups (workers, spans, root spans, span names, selected spans, attribute values) shown per section")
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
	by                                attrList
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
	if err := checkAttrs(t, o.by); err != nil {
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
	if sel != nil {
		writeSelection(w, t, sel, o)
		section(w, "Trace: everything in the files")
	}
	all := countSamples(t)
	writeInputs(w, t)
	writeTimeRange(w, t)
	writeMetadata(w, t)
	writeSampleCounts(w, all)
	writeAttrKeys(w, t)
	writeDropped(w, t)
	writeEventCounts(w, t)
	writeSpanNames(w, t, sel != nil, o)

	sc := newReportScope(sel, all)
	onAgg := writeOnCPUFunctions(w, t, sel, sc, o)
	offAgg := writeOffCPUFunctions(w, t, sel, sc, o)
	writeAttrSections(w, t, sel, sc, o)
	writeTopStacks(w, t, sc, onAgg, offAgg, o)
	if sel != nil {
		// Polls, blocking and scheduling delay are per worker and thread;
		// the breakdown and the off-CPU stacks above answer for spans.
		return
	}
	writeLongPolls(w, t, o)
	writeBlocking(w, t, o)
	writeSchedDelay(w, t)
}

// sampleCounts are the trace's samples counted by source and, off-CPU, by
// thread state.
type sampleCounts struct {
	on, off, offNs int64
	valued         bool // some off-CPU sample carries value_ns
	states         [3]int64
}

func countSamples(t *analysis.Trace) sampleCounts {
	var c sampleCounts
	for i := range t.Samples {
		s := &t.Samples[i]
		if s.Source == analysis.SourceOffCPU {
			c.off++
			c.offNs += int64(s.Value)
			c.valued = c.valued || s.Value > 0
			c.states[s.State]++
		} else {
			c.on++
		}
	}
	return c
}

// writeInputs writes the files read: how many of each format, their size,
// events, and which ones ended in a truncated tail.
func writeInputs(w io.Writer, t *analysis.Trace) {
	var size, events int64
	formats := map[string]int{}
	for _, f := range t.Files {
		size += f.Size
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
	printf(w, "Input: %d file(s) (%s), %s on disk, %d events\n", len(t.Files), strings.Join(fl, ", "), mb(size), events)
	for _, f := range t.Files {
		if f.Truncated {
			printf(w, "  %s: truncated tail (events before it are counted)\n", f.Path)
		}
	}
}

// writeTimeRange writes the trace's time range, monotonic and, when the
// trace has a ClockSyncEvent, wall clock.
func writeTimeRange(w io.Writer, t *analysis.Trace) {
	if t.End == 0 {
		return
	}
	printf(w, "Time: monotonic %.6f s .. %.6f s (%s)\n", float64(t.Start)/1e9, float64(t.End)/1e9, dur(t.End-t.Start))
	if a, ok := t.Wall(t.Start); ok {
		b, _ := t.Wall(t.End)
		printf(w, "      wall clock %s .. %s (ClockSync)\n", a.Format(time.RFC3339Nano), b.Format(time.RFC3339Nano))
	} else {
		printf(w, "      wall clock unknown (no ClockSyncEvent)\n")
	}
}

func writeMetadata(w io.Writer, t *analysis.Trace) {
	if len(t.Metadata) == 0 {
		return
	}
	var kv []string
	for k, v := range t.Metadata {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	printf(w, "Metadata: %s\n", strings.Join(kv, " "))
}

func writeSampleCounts(w io.Writer, c sampleCounts) {
	printf(w, "Samples: %d (on-CPU %d, off-CPU %d)\n", c.on+c.off, c.on, c.off)
	if c.off == 0 {
		return
	}
	printf(w, "  off-CPU: blocked %d, runnable %d, state unknown %d",
		c.states[analysis.StateBlocked], c.states[analysis.StateRunnable], c.states[analysis.StateUnknown])
	if c.valued {
		printf(w, ", %s off-CPU in total (value_ns)", dur(uint64(c.offNs)))
	}
	printf(w, "\n")
}

// writeDropped writes the trace's own counters of dropped and lost data.
func writeDropped(w io.Writer, t *analysis.Trace) {
	if len(t.Dropped) == 0 {
		printf(w, "Dropped/lost: none reported in the trace\n")
		return
	}
	var ks []string
	for k := range t.Dropped {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	printf(w, "Dropped/lost:")
	for _, k := range ks {
		printf(w, " %s=%d", k, t.Dropped[k])
	}
	printf(w, "\n")
}

// writeEventCounts writes the events by kind, most frequent first, what
// the loader made of them and its warnings.
func writeEventCounts(w io.Writer, t *analysis.Trace) {
	printf(w, "Events by kind:\n")
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
		printf(w, "  %10d  %s\n", t.Counts[k], k)
	}
	printf(w, "Polls: %d, parks: %d, spans: %d\n", len(t.Polls), len(t.Parks), len(t.Spans))
	if len(t.Warnings) > 0 {
		printf(w, "Warnings:\n")
		for _, wn := range t.Warnings {
			printf(w, "  %s\n", wn)
		}
	}
}

// reportScope is what the function tables and top stacks count: all
// samples, or those of the selected spans.
type reportScope struct {
	name, offName string // as the section titles say it
	on, off       int64
	valued        bool // off-CPU samples carry value_ns
}

func newReportScope(sel *analysis.Selection, all sampleCounts) reportScope {
	if sel == nil {
		return reportScope{"all samples", "all off-CPU samples", all.on, all.off, all.valued}
	}
	b := &sel.Breakdown
	return reportScope{"selected spans", "off-CPU samples of the selected spans",
		b.OnSamples, b.OffSamples, b.Blocked+b.Runnable+b.OffUnknown > 0}
}

// writeOnCPUFunctions writes the on-CPU function table of the scope and
// its groups by worker, span and root span, and returns the scope's
// on-CPU aggregate, nil when it has no on-CPU samples.
func writeOnCPUFunctions(w io.Writer, t *analysis.Trace, sel *analysis.Selection, sc reportScope, o *reportOpts) *analysis.Agg {
	if sc.on == 0 {
		return nil
	}
	onF := sel.Filter(analysis.OnCPU)
	agg := t.Aggregate(onF, analysis.Count)
	section(w, "On-CPU functions ("+sc.name+")")
	funcTable(w, t, agg, o.top, "samples")
	groups(w, t, "On-CPU per worker", onF, analysis.Count, t.ByWorker(), o, "samples", "")
	groups(w, t, "On-CPU per span name (span_id -> the name its span event gives)", onF, analysis.Count, t.BySpan(), o, "samples",
		"no on-CPU sample is linked to a span (no span_id fields)")
	groups(w, t, "On-CPU per root span name (span_root_name)", onF, analysis.Count, t.ByRoot(), o, "samples",
		"no on-CPU sample has span_root_name")
	return agg
}

// writeOffCPUFunctions writes the off-CPU function table of the scope,
// weighted by value_ns when present, and returns the scope's off-CPU
// aggregate, nil when it has no off-CPU samples.
func writeOffCPUFunctions(w io.Writer, t *analysis.Trace, sel *analysis.Selection, sc reportScope, o *reportOpts) *analysis.Agg {
	if sc.off == 0 {
		return nil
	}
	unit := "samples"
	if sc.valued {
		unit = "ns"
	}
	agg := t.Aggregate(sel.Filter(analysis.OffCPU), analysis.OffCPUWeight)
	section(w, "Off-CPU functions ("+sc.offName+", weighted by value_ns when present)")
	funcTable(w, t, agg, o.top, unit)
	return agg
}

// writeTopStacks writes the heaviest stacks of the aggregates that
// writeOnCPUFunctions and writeOffCPUFunctions returned.
func writeTopStacks(w io.Writer, t *analysis.Trace, sc reportScope, onAgg, offAgg *analysis.Agg, o *reportOpts) {
	if onAgg != nil {
		section(w, fmt.Sprintf("Top on-CPU stacks (%s): %d samples", sc.name, onAgg.Samples))
		stacks(w, t, onAgg, o.stacks, o.depth, "", "samples")
	}
	if offAgg != nil {
		section(w, fmt.Sprintf("Top off-CPU stacks (%s, weighted by value_ns when present): %d samples", sc.offName, offAgg.Samples))
		stacks(w, t, offAgg, o.stacks, o.depth, "", "")
	}
}

// writeLongPolls writes the polls longer than o.long, longest first, with
// the stacks sampled inside each.
func writeLongPolls(w io.Writer, t *analysis.Trace, o *reportOpts) {
	lps := t.LongPolls(uint64(o.long))
	section(w, fmt.Sprintf("Long polls (> %s): %d of %d polls", o.long, len(lps), len(t.Polls)))
	for i, lp := range lps {
		if i >= o.polls {
			printf(w, "  … %d more\n", len(lps)-i)
			break
		}
		pl := t.Polls[lp.Poll]
		printf(w, "%2d. worker %d, %s, at +%s, task %d", i+1, pl.Worker, dur(lp.Duration), dur(pl.Start-t.Start), pl.TaskID)
		if sp, ok := t.SpanByID(pl.SpanID()); ok {
			printf(w, ", span %s", strconv.Quote(sp.Name))
		}
		if pl.SpawnLoc != "" {
			printf(w, ", spawned at %s", pl.SpawnLoc)
		}
		printf(w, "\n    samples inside: %d on-CPU, %d off-CPU\n", lp.OnCPU.Samples, lp.OffCPU.Samples)
		stacks(w, t, lp.OnCPU, o.stacks, o.depth, "on-CPU", "samples")
		stacks(w, t, lp.OffCPU, o.stacks, o.depth, "off-CPU", "")
	}
}

// writeBlocking writes the stacks of the off-CPU samples, blocked or of
// unknown state, taken inside spans or polls.
func writeBlocking(w io.Writer, t *analysis.Trace, o *reportOpts) {
	blk, weighted := t.Blocking()
	unit := "samples"
	if weighted {
		unit = "ns"
	}
	section(w, fmt.Sprintf("Blocking stacks (off-CPU, blocked or state unknown, inside spans or polls): %d samples, %s", blk.Samples, weightStr(blk.Total, unit)))
	stacks(w, t, blk, o.stacks, o.depth, "", unit)
}

func writeSchedDelay(w io.Writer, t *analysis.Trace) {
	sd := t.SchedDelays()
	section(w, "Scheduling delay")
	if sd.N == 0 {
		printf(w, "  no data (no runnable off-CPU samples with value_ns, no WorkerUnparkEvent)\n")
		return
	}
	printf(w, "  from %s: n=%d p50=%s p99=%s max=%s\n", sd.From, sd.N, dur(sd.P50), dur(sd.P99), dur(sd.Max))
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
