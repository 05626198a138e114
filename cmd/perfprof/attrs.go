package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/perfprof/perfprof/internal/analysis"
	"github.com/perfprof/perfprof/internal/convention"
)

// Context attributes in the CLI: the attributes of the thread context a
// sample was read in (http.route, datadog.trace_endpoint, ...), which the
// files carry whether or not the application sent spans. report groups
// samples by them (--by, or the route keys unasked), folded puts the value
// at the root of each stack, pprof makes them labels.

// routeKeys are the context attributes report groups by without --by, when
// the samples carry them: what a performance engineer looks at first is
// which request does the work.
var routeKeys = []string{convention.HTTPRoute, convention.DatadogTraceEndpoint}

// attrHelp is the context attributes' part of report's help.
const attrHelp = `Context attributes: samples read in an OpenTelemetry thread context
(OTEP 4947: a native publisher, dd-trace on Node.js) carry its attributes,
http.route or datadog.trace_endpoint ("GET /alpha"), user.name, ... They need
no span: an application that sends none still has them. The report lists the
keys the samples carry. --by ATTR (repeatable) adds, per value of ATTR, a
table of samples, on-CPU time (samples × the sample period), off-CPU time by
thread state, and the hot on-CPU functions of each value; samples without ATTR
are "(none)". Without --by the report does so for http.route and
datadog.trace_endpoint when the samples carry them. An ATTR no sample carries
is an error (exit 1). With a selector, the selection's samples are grouped.`

// attrList is a repeatable string flag; a name given twice counts once.
type attrList []string

func (l *attrList) String() string { return strings.Join(*l, ",") }

func (l *attrList) Set(v string) error {
	if v == "" {
		return usageError{"--by: want a context attribute name"}
	}
	if !slices.Contains(*l, v) {
		*l = append(*l, v)
	}
	return nil
}

// checkAttrs fails for a key that no sample of t carries, saying which
// ones they carry.
func checkAttrs(t *analysis.Trace, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	have := t.AttrKeys(nil)
	for _, k := range keys {
		found := false
		for _, h := range have {
			found = found || h.Key == k
		}
		if !found {
			return fmt.Errorf("no sample carries the context attribute %q (%s)", k, attrHint(have))
		}
	}
	return nil
}

// attrHint says which context attributes a trace's samples carry.
func attrHint(have []analysis.AttrKey) string {
	if len(have) == 0 {
		return "the samples carry none: the perfprof receiver reads them from the thread context records " +
			"of OTEP 4947 publishers, and only the tracefile exporter's TRC files carry them"
	}
	const show = 8
	var l []string
	for i, h := range have {
		if i == show {
			l = append(l, fmt.Sprintf("… %d more", len(have)-show))
			break
		}
		l = append(l, strconv.Quote(h.Key))
	}
	return "the samples carry " + strings.Join(l, ", ")
}

// writeAttrKeys writes the header line of the context attributes the
// trace's samples carry.
func writeAttrKeys(w io.Writer, t *analysis.Trace) {
	keys := t.AttrKeys(nil)
	if len(keys) == 0 {
		return
	}
	printf(w, "Context attributes:")
	for i, k := range keys {
		if i == 10 {
			printf(w, " … %d more", len(keys)-i)
			break
		}
		if i > 0 {
			printf(w, ",")
		}
		printf(w, " %s (%d samples, %d values)", k.Key, k.Samples, k.Values)
	}
	printf(w, "\n")
}

// attrKeysFor returns the keys the report groups by: those of --by, else
// the route keys that the samples of the scope carry, in routeKeys' order.
func attrKeysFor(t *analysis.Trace, sel *analysis.Selection, by []string) (keys []string, auto bool) {
	if len(by) > 0 {
		return by, false
	}
	have := map[string]bool{}
	for _, h := range t.AttrKeys(sel.Filter(nil)) {
		have[h.Key] = true
	}
	for _, r := range routeKeys {
		if have[r] {
			keys = append(keys, r)
		}
	}
	return keys, true
}

// attrValue is how a value is shown: an empty one quoted, so that it is
// not taken for a missing one.
func attrValue(v string) string {
	if v == "" {
		return `""`
	}
	return v
}

// writeAttrSections writes, for each key, the breakdown of the scope's
// samples per value of the key and each value's hot on-CPU functions.
func writeAttrSections(w io.Writer, t *analysis.Trace, sel *analysis.Selection, sc reportScope, o *reportOpts) {
	keys, auto := attrKeysFor(t, sel, o.by)
	for _, key := range keys {
		writeAttrBreakdown(w, t, sel, sc, key, auto, o)
		writeAttrFunctions(w, t, sel, key, o)
	}
}

// writeAttrBreakdown writes the table of samples and time per value of
// key, the largest on-CPU first, and of the samples without it last.
func writeAttrBreakdown(w io.Writer, t *analysis.Trace, sel *analysis.Selection, sc reportScope, key string, auto bool, o *reportOpts) {
	p := func(format string, a ...any) { printf(w, format, a...) }
	gs, none := t.BreakdownBy(sel.Filter(nil), t.ByAttr(key))
	title := fmt.Sprintf("Samples per %s (context attribute, %s): %d values", key, sc.name, len(gs))
	if auto {
		title += "; --by ATTR for another attribute"
	}
	section(w, title)
	type row struct {
		name string
		b    analysis.Breakdown
	}
	var rows []row
	for _, g := range gs[:min(len(gs), max(o.groups, 0))] {
		rows = append(rows, row{attrValue(g.Name), g.Breakdown})
	}
	more, noneRow := len(gs)-len(rows), -1
	if none.OnSamples+none.OffSamples > 0 {
		noneRow = len(rows)
		rows = append(rows, row{"(none)", none})
	}
	unknown := none.OffUnknown > 0
	onTotal := none.OnSamples
	for _, g := range gs {
		unknown = unknown || g.OffUnknown > 0
		onTotal += g.OnSamples
	}
	nw := 5
	for _, r := range rows {
		nw = max(nw, min(len(r.name), 40))
	}
	p("  %-*s  %8s  %8s  %11s  %6s  %8s  %11s  %11s", nw, "VALUE", "SAMPLES", "ON-CPU", "CPU TIME ms", "CPU%", "OFF-CPU",
		"BLOCKED ms", "RUNNABLE ms")
	if unknown {
		p("  %11s", "OFF ? ms")
	}
	p("\n")
	for i, r := range rows {
		if i == noneRow && more > 0 {
			p("  … %d more values (--groups)\n", more)
			more = 0
		}
		b := &r.b
		cpu := ms(b.OnCPU)
		if b.Period == 0 {
			cpu = "?"
		}
		p("  %-*s  %8d  %8d  %11s  %5.1f%%  %8d  %11s  %11s", nw, r.name, b.OnSamples+b.OffSamples, b.OnSamples, cpu,
			pctOf(uint64(b.OnSamples), uint64(onTotal)), b.OffSamples, ms(b.Blocked), ms(b.Runnable))
		if unknown {
			p("  %11s", ms(b.OffUnknown))
		}
		p("\n")
	}
	if more > 0 {
		p("  … %d more values (--groups)\n", more)
	}
	if len(rows) > 0 && rows[0].b.Period == 0 {
		p("  (CPU time unknown: no %s in the files)\n", convention.MetaSamplePeriod)
	}
}

// writeAttrFunctions writes the hot on-CPU functions of each value of key,
// and of the samples without it.
func writeAttrFunctions(w io.Writer, t *analysis.Trace, sel *analysis.Selection, key string, o *reportOpts) {
	gs, none := t.AggregateBy(sel.Filter(analysis.OnCPU), analysis.Count, t.ByAttr(key))
	section(w, fmt.Sprintf("Hot functions per %s (on-CPU): %d values", key, len(gs)))
	if len(gs) == 0 && none.Samples == 0 {
		printf(w, "  no on-CPU sample\n")
		return
	}
	for i, g := range gs {
		if i >= o.groups {
			printf(w, "  … %d more values (--groups)\n", len(gs)-i)
			break
		}
		printf(w, "-- %s: ", attrValue(g.Name))
		funcTable(w, t, g.Agg, o.top, "samples")
	}
	if none.Samples > 0 {
		printf(w, "-- (none): ")
		funcTable(w, t, none, o.top, "samples")
	}
}
