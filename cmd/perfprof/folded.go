package main

import (
	"bufio"
	"flag"
	"fmt"
	"sort"
	"strconv"

	"github.com/perfprof/perfprof/internal/analysis"
)

func init() {
	register(&command{
		name: "folded",
		summary: "print folded stacks \"root;…;leaf COUNT\" (identical stacks merged, inlined frames expanded) " +
			"for flamegraph.pl, inferno or speedscope",
		help: selectHelp + "\n\nWith a selector only the selection's samples are folded.\n\n" +
			"--by span, worker or thread puts a frame naming the sample's span (its name), worker or\n" +
			"thread at the root of each stack; --by ATTR, any other name, the value of the sample's\n" +
			"context attribute ATTR (\"http.route GET /alpha\"), \"(no ATTR)\" for samples without it: a\n" +
			"flame graph per route, with no span in the files. An ATTR no sample carries is an error.\n\n" +
			"Each stack is one line and each frame one field, whatever the names hold: a ';' in a\n" +
			"name becomes ',', and control characters (newlines too), DEL and invalid UTF-8 are\n" +
			"escaped Go-style, as \\n, \\x1b, \\u009b or \\xff.",
		usage: "[--source cpu|offcpu] [--by span|worker|thread|ATTR] [--span NAME] [--trace-id ID] [--span-id ID] [--slowest N] [-o FILE] FILE|DIR…",
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			var in inputFlags
			var sf selectFlags
			in.declare(fs)
			sf.declare(fs)
			source := fs.String("source", "cpu", "cpu: on-CPU samples, counted; offcpu: off-CPU samples, weighted by value_ns (ns) when present, else counted")
			by := fs.String("by", "", "prefix each stack with a frame naming its span (span name), worker or thread, or the value of a context attribute (http.route, ...)")
			out := fs.String("o", "-", "output file")
			return func(e *env, args []string) error {
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
				lines, err := folded(t, sel, *source, *by)
				if err != nil {
					return err
				}
				if sel != nil && len(lines) == 0 {
					fmt.Fprintf(e.stderr, "perfprof folded: warning: the %d selected span(s) have no %s samples\n", len(sel.Spans), *source)
				}
				w, closeOut, err := createOutput(e, *out)
				if err != nil {
					return err
				}
				bw := bufio.NewWriter(w)
				for _, l := range lines {
					bw.WriteString(l.stack)
					bw.WriteByte(' ')
					bw.WriteString(strconv.FormatUint(l.weight, 10))
					bw.WriteByte('\n')
				}
				if err := bw.Flush(); err != nil {
					return err
				}
				return closeOut()
			}
		},
	})
}

type foldedLine struct {
	stack  string
	weight uint64
}

// sourceFilter returns the samples and weight of a --source value.
func sourceFilter(source string) (func(*analysis.TraceSample) bool, analysis.WeightFunc, error) {
	switch source {
	case "cpu", "oncpu":
		return analysis.OnCPU, analysis.Count, nil
	case "offcpu":
		return analysis.OffCPU, analysis.OffCPUWeight, nil
	}
	return nil, nil, usageError{fmt.Sprintf("--source %q: want cpu or offcpu", source)}
}

// folded returns the folded stacks of the samples of sel (nil: all),
// sorted.
func folded(t *analysis.Trace, sel *analysis.Selection, source, by string) ([]foldedLine, error) {
	filter, weight, err := sourceFilter(source)
	if err != nil {
		return nil, err
	}
	filter = sel.Filter(filter)
	merged := map[string]uint64{}
	add := func(m map[string]uint64) {
		for k, v := range m {
			merged[k] += v
		}
	}
	switch by {
	case "":
		add(t.Folded(t.Aggregate(filter, weight), ""))
	case "span", "worker", "thread":
		var g analysis.Grouping
		none := "(no span)"
		switch by {
		case "span":
			g = t.BySpan()
		case "worker":
			g = t.ByWorker()
		case "thread":
			g = t.ByThread()
		}
		gs, rest := t.AggregateBy(filter, weight, g)
		for _, gr := range gs {
			add(t.Folded(gr.Agg, by+" "+gr.Name))
		}
		if rest.Samples > 0 {
			add(t.Folded(rest, none))
		}
	default:
		if err := checkAttrs(t, []string{by}); err != nil {
			return nil, fmt.Errorf("--by %s: %w", by, err)
		}
		gs, rest := t.AggregateBy(filter, weight, t.ByAttr(by))
		for _, gr := range gs {
			add(t.Folded(gr.Agg, by+" "+attrValue(gr.Name)))
		}
		if rest.Samples > 0 {
			add(t.Folded(rest, "(no "+by+")"))
		}
	}
	out := make([]foldedLine, 0, len(merged))
	for k, v := range merged {
		out = append(out, foldedLine{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].stack < out[j].stack })
	return out, nil
}
