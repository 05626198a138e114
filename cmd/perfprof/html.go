package main

import (
	"bufio"
	"flag"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/perfprof/perfprof/internal/analysis"
	"github.com/perfprof/perfprof/internal/htmlview"
)

func init() {
	register(&command{
		name:    "html",
		summary: "write a self-contained HTML page: flamegraphs (on-CPU, off-CPU) and a timeline of workers and threads with polls, spans and parks",
		usage:   "-o OUT.html [--title TITLE] FILE|DIR…",
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			var in inputFlags
			in.declare(fs)
			out := fs.String("o", "", "output file (\"-\" = stdout), required")
			title := fs.String("title", "", "page title (default: the input names)")
			return func(e *env, args []string) error {
				if *out == "" {
					return usageError{"-o is required"}
				}
				t, err := in.load(e, args)
				if err != nil {
					return err
				}
				d := htmlData(t)
				d.Title = *title
				if d.Title == "" {
					var names []string
					for _, a := range args {
						names = append(names, filepath.Base(a))
					}
					d.Title = "perfprof: " + strings.Join(names, ", ")
				}
				w, closeOut, err := createOutput(e, *out)
				if err != nil {
					return err
				}
				bw := bufio.NewWriterSize(w, 1<<20)
				if err := htmlview.Write(bw, d); err != nil {
					return err
				}
				if err := bw.Flush(); err != nil {
					return err
				}
				return closeOut()
			}
		},
	})
}

// htmlData converts a trace for the HTML view: one timeline row per worker
// and one per other thread; polls and parks on their worker's row, spans on
// the row of their thread's samples, unless a poll stands for them. Every
// span goes in with its breakdown and the per-name statistics, as
// internal/analysis computes them, so that the page's span views show what
// `perfprof report --span/--trace-id` prints.
func htmlData(t *analysis.Trace) *htmlview.Data {
	d := &htmlview.Data{Start: int64(t.Start)}
	if p, ok := t.SamplePeriod(); ok {
		d.Period = int64(p)
	}
	breakdown := func(b analysis.Breakdown) htmlview.Breakdown {
		return htmlview.Breakdown{Spans: b.Spans, Wall: int64(b.Wall), OnSamples: b.OnSamples, OffSamples: b.OffSamples,
			Blocked: int64(b.Blocked), Runnable: int64(b.Runnable), OffUnknown: int64(b.OffUnknown)}
	}
	per := t.SpanBreakdowns()
	d.Spans = make([]htmlview.Span, len(t.Spans))
	for i := range t.Spans {
		sp := &t.Spans[i]
		d.Spans[i] = htmlview.Span{Name: sp.Name, TraceID: sp.TraceID, Start: int64(sp.Start), End: int64(sp.End()),
			Breakdown: breakdown(per[i])}
		if p := t.SpanParent(int32(i)); p >= 0 {
			d.Spans[i].Parent = htmlview.SpanAt(int(p))
		}
	}
	for _, n := range t.SpanNames() {
		d.SpanNames = append(d.SpanNames, htmlview.SpanName{Name: n.Name, Count: n.Count, P50: int64(n.P50), P95: int64(n.P95),
			P99: int64(n.P99), Max: int64(n.Max), Breakdown: breakdown(n.Breakdown)})
	}
	d.Frames = make([]htmlview.Frame, len(t.Frames))
	for i, f := range t.Frames {
		d.Frames[i] = htmlview.Frame{Name: f.Func, File: f.File, Line: f.Line}
	}
	d.Stacks = make([][]int32, len(t.Stacks))
	for i, st := range t.Stacks {
		var fs []int32
		for j := len(st) - 1; j >= 0; j-- {
			fs = append(fs, t.Locations[st[j]].Frames...)
		}
		d.Stacks[i] = fs
	}

	workerRow := map[uint64]int32{}
	threadRow := map[int32]int32{} // thread index -> row
	tidRow := map[uint32]int32{}
	row := func(name string) int32 {
		d.Rows = append(d.Rows, htmlview.Row{Name: name})
		return int32(len(d.Rows) - 1)
	}
	worker := func(w uint64) int32 {
		r, ok := workerRow[w]
		if !ok {
			r = row(fmt.Sprintf("worker %d", w))
			workerRow[w] = r
		}
		return r
	}
	// Workers first, in id order, then threads as they appear.
	maxW := -1
	for i := range t.Samples {
		if w := t.Samples[i].Worker; w < analysis.BlockingWorker {
			maxW = max(maxW, int(w))
		}
	}
	for _, p := range t.Polls {
		maxW = max(maxW, int(min(p.Worker, 253)))
	}
	for w := 0; w <= maxW; w++ {
		worker(uint64(w))
	}
	d.Samples = make([]htmlview.Sample, 0, len(t.Samples))
	for i := range t.Samples {
		s := &t.Samples[i]
		var r int32
		if s.Worker < analysis.BlockingWorker {
			r = worker(uint64(s.Worker))
			if _, ok := tidRow[t.Threads[s.Thread].Tid]; !ok {
				tidRow[t.Threads[s.Thread].Tid] = r
			}
		} else {
			var ok bool
			if r, ok = threadRow[s.Thread]; !ok {
				th := t.Threads[s.Thread]
				name := fmt.Sprintf("tid %d", th.Tid)
				if th.Name != "" {
					name += " (" + th.Name + ")"
				}
				r = row(name)
				threadRow[s.Thread] = r
				tidRow[th.Tid] = r
			}
		}
		hs := htmlview.Sample{Time: int64(s.Time), Row: r, Stack: s.Stack, Weight: 1}
		if s.Source == analysis.SourceOffCPU {
			hs.OffCPU = true
			hs.Weight = int64(s.Value)
			hs.State = htmlview.State(s.State)
		}
		if sp := t.SpanOf(s); sp >= 0 {
			hs.Span = htmlview.SpanAt(int(sp))
		}
		d.Samples = append(d.Samples, hs)
	}
	polled := map[string]bool{}
	for _, p := range t.Polls {
		polled[p.SpanID()] = true
		name := p.SpawnLoc
		if sp, ok := t.SpanByID(p.SpanID()); ok {
			name = sp.Name
		}
		d.Bars = append(d.Bars, htmlview.Bar{Row: worker(p.Worker), Start: int64(p.Start), End: int64(p.End),
			Name: fmt.Sprintf("poll task %d %s", p.TaskID, name), Kind: "poll"})
	}
	for _, p := range t.Parks {
		d.Bars = append(d.Bars, htmlview.Bar{Row: worker(p.Worker), Start: int64(p.Start), End: int64(p.End), Name: "park", Kind: "park"})
	}
	for i, sp := range t.Spans {
		if polled[sp.SpanID] {
			continue // drawn above as its poll
		}
		r, ok := tidRow[sp.Tid]
		if !ok {
			continue
		}
		d.Bars = append(d.Bars, htmlview.Bar{Row: r, Start: int64(sp.Start), End: int64(sp.End()), Name: sp.Name, Kind: "span",
			Span: htmlview.SpanAt(i)})
	}
	return d
}
