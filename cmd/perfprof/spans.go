package main

import (
	"fmt"
	"io"

	"github.com/perfprof/perfprof/internal/analysis"
	"github.com/perfprof/perfprof/internal/convention"
)

// The report's span sections: the selection (its spans and where their wall
// time went) and the span names of the whole trace. Every number comes from
// analysis (Trace.Select, Trace.SpanBreakdowns, Trace.SpanNames), which the
// HTML view uses too, so that the two never disagree.

// ms formats nanoseconds as milliseconds with 3 decimals.
func ms(ns uint64) string { return fmt.Sprintf("%.3f", float64(ns)/1e6) }

// writeSelection writes the selection section: the selector, the chosen
// spans with their own breakdowns, and the breakdown of all of them.
func writeSelection(w io.Writer, t *analysis.Trace, sel *analysis.Selection, o *reportOpts) {
	p := func(format string, a ...any) { printf(w, format, a...) }
	section(w, fmt.Sprintf("Selection: %s: %d span(s)", sel.Selector, len(sel.Spans)))
	if len(sel.Spans) == 0 {
		// Select chose a trace by its samples' trace_id alone.
		p("  no span event of trace %s in the files: its samples are counted, its wall time is unknown\n", sel.Selector.TraceID)
	} else {
		per := t.SpanBreakdowns()
		shown := sel.Spans[:min(len(sel.Spans), max(o.groups, 0))]
		unknown := sel.Breakdown.OffUnknown > 0
		nw := 4
		for _, i := range shown {
			nw = max(nw, min(len(t.Spans[i].Name), 40))
		}
		p("  %-*s  %-32s  %-16s  %11s  %11s  %11s  %11s  %11s", nw, "NAME", "TRACE ID", "SPAN ID", "START s", "DURATION ms",
			"ON-CPU ms", "BLOCKED ms", "RUNNABLE ms")
		if unknown {
			p("  %11s", "OFF ? ms")
		}
		p("  %11s\n", "NOT OBS ms")
		for _, i := range shown {
			sp, b := &t.Spans[i], &per[i]
			p("  %-*s  %-32s  %-16s  %11.6f  %11s  %11s  %11s  %11s", nw, sp.Name, sp.TraceID, sp.SpanID,
				(float64(sp.Start)-float64(t.Start))/1e9, ms(sp.Duration), ms(b.OnCPU), ms(b.Blocked), ms(b.Runnable))
			if unknown {
				p("  %11s", ms(b.OffUnknown))
			}
			p("  %11s\n", ms(b.NotObserved))
		}
		if n := len(sel.Spans) - len(shown); n > 0 {
			p("  … %d more spans (--groups)\n", n)
		}
		p("\n")
	}
	writeBreakdown(w, sel.Breakdown)
}

// writeBreakdown writes the wall-time breakdown of a selection. Other tools
// parse these lines: keep the labels, the units and the Samples line.
func writeBreakdown(w io.Writer, b analysis.Breakdown) {
	states := b.OffStates
	p := func(format string, a ...any) { printf(w, format, a...) }
	const label = "  %-21s %10s ms %5.1f%%"
	p("Breakdown: wall %s ms over %d span(s)\n", ms(b.Wall), b.Spans)
	if b.Period > 0 {
		p(label+"  (%d samples × %s ms)\n", "on-CPU", ms(b.OnCPU), pctOf(b.OnCPU, b.Wall), b.OnSamples, ms(b.Period))
	} else {
		p("  %-21s sample period unknown (no %s in the files): %d samples\n", "on-CPU", convention.MetaSamplePeriod, b.OnSamples)
	}
	off := func(name string, ns uint64, n int64) {
		p(label+"  (%d samples", name, ms(ns), pctOf(ns, b.Wall), n)
		if ns == 0 && n > 0 {
			p(", no value_ns")
		}
		p(")\n")
	}
	off("off-CPU blocked", b.Blocked, states[analysis.StateBlocked])
	off("off-CPU runnable", b.Runnable, states[analysis.StateRunnable])
	if b.OffUnknown > 0 || states[analysis.StateUnknown] > 0 {
		off("off-CPU unknown state", b.OffUnknown, states[analysis.StateUnknown])
	}
	p(label, "not observed", ms(b.NotObserved), pctOf(b.NotObserved, b.Wall))
	if b.Period == 0 && b.OnSamples > 0 {
		p("  (includes the on-CPU time: the period is unknown)")
	}
	p("\n")
	p("Samples: %d (on-CPU %d, off-CPU %d)\n", b.OnSamples+b.OffSamples, b.OnSamples, b.OffSamples)
}

// writeSpanNames writes the Spans section: per span name of the whole
// trace, its count, duration percentiles and where its wall time went.
func writeSpanNames(w io.Writer, t *analysis.Trace, selected bool, o *reportOpts) {
	p := func(format string, a ...any) { printf(w, format, a...) }
	names := t.SpanNames()
	title := fmt.Sprintf("Spans: %d names, %d spans", len(names), len(t.Spans))
	if selected {
		title += " (whole trace)"
	}
	section(w, title)
	if len(names) == 0 {
		p("  no span event in the trace\n")
		return
	}
	shown := names[:min(len(names), max(o.groups, 0))]
	unknown := false
	nw := 4
	for _, n := range names {
		unknown = unknown || n.OffUnknown > 0
	}
	for _, n := range shown {
		nw = max(nw, min(len(n.Name), 40))
	}
	p("  %-*s  %8s  %10s  %10s  %10s  %7s  %7s  %8s", nw, "NAME", "COUNT", "P50 ms", "P95 ms", "P99 ms", "ON-CPU", "BLOCKED", "RUNNABLE")
	if unknown {
		p("  %7s", "OFF ?")
	}
	p("  %8s\n", "NOT OBS")
	pct := func(v, wall uint64) string { return fmt.Sprintf("%.1f%%", pctOf(v, wall)) }
	for _, n := range shown {
		on := pct(n.OnCPU, n.Wall)
		if n.Period == 0 {
			on = "?"
		}
		p("  %-*s  %8d  %10s  %10s  %10s  %7s  %7s  %8s", nw, n.Name, n.Count, ms(n.P50), ms(n.P95), ms(n.P99),
			on, pct(n.Blocked, n.Wall), pct(n.Runnable, n.Wall))
		if unknown {
			p("  %7s", pct(n.OffUnknown, n.Wall))
		}
		p("  %8s\n", pct(n.NotObserved, n.Wall))
	}
	if n := len(names) - len(shown); n > 0 {
		p("  … %d more names (--groups)\n", n)
	}
	if names[0].Period == 0 {
		p("  (on-CPU time unknown: no %s in the files; NOT OBS includes it)\n", convention.MetaSamplePeriod)
	}
}
