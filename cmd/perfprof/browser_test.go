package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/perfprof/perfprof/internal/analysis"
	"github.com/perfprof/perfprof/internal/analysis/analysistest"
	"github.com/perfprof/perfprof/internal/htmlview"
	"github.com/perfprof/perfprof/internal/htmlview/htmlviewtest"
)

// TestHTMLInBrowser writes a trace of 150 000 samples, turns it into a page
// with `perfprof html` and drives the page in headless Chromium: it must
// draw its flamegraph within 2 s, zoom on a click, find the hot function
// with its true share, show a stack on hovering a timeline mark, and make
// no network request. The page and screenshot are left in
// $TMPDIR/perfprof-cli-html for people to look at.
func TestHTMLInBrowser(t *testing.T) {
	node, chromium, dir := htmlviewtest.Tools(t)
	s := analysistest.DefaultSynth()
	s.OnCPU, s.Other, s.Workers = 150_000, 2_000, 4
	s.Blocked, s.Runnable = 2_000, 1_000
	out := filepath.Join(os.TempDir(), "perfprof-cli-html")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	trace := filepath.Join(out, "trace.bin")
	truth, err := s.WriteFile(trace, false)
	if err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(out, "report.html")
	mustRun(t, "html", trace, "-o", page)
	shot := filepath.Join(out, "screenshot.png")
	r, err := htmlviewtest.Run(t, node, chromium, dir, page, shot,
		map[string]any{"clickFrame": analysistest.ComputeFunc, "search": analysistest.HotFunc, "markRow": 0,
			"scope": map[string]any{"poll": true}})
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(page)
	t.Logf("%d on-CPU samples, page %.2f MB: flamegraph drawn %.0f ms after navigation start (draw %.1f ms), timeline at %.0f ms; screenshot %s",
		truth.OnCPU, float64(fi.Size())/1e6, r.Load.DrawMs, r.Load.FlameDrawMs, r.Load.TimelineDrawn, shot)
	if len(r.Requests)+len(r.Blocked) > 0 {
		t.Errorf("the page made requests: %v %v", r.Requests, r.Blocked)
	}
	if !r.Load.Ready || r.Load.Stats.OnCPU != truth.OnCPU || r.Load.Stats.Samples != truth.OnCPU+truth.OffCPU {
		t.Errorf("page loaded %+v, want %d on-CPU and %d off-CPU samples", r.Load.Stats, truth.OnCPU, truth.OffCPU)
	}
	if r.Load.DrawMs <= 0 || r.Load.DrawMs > 2000 {
		t.Errorf("flamegraph drawn %.0f ms after navigation start, want under 2 s", r.Load.DrawMs)
	}
	if c := r.Steps.Click; c.ZoomedFrame != analysistest.ComputeFunc || c.ZoomedWidth < 0.9*c.CanvasWidth {
		t.Errorf("click on %s: zoomed to %q, width %.0f of %.0f", analysistest.ComputeFunc, c.ZoomedFrame, c.ZoomedWidth, c.CanvasWidth)
	}
	if r.Steps.Reset.ZoomedFrame != "all" {
		t.Errorf("reset zoom: %q", r.Steps.Reset.ZoomedFrame)
	}
	want := 100 * float64(truth.Hot) / float64(truth.OnCPU)
	if sr := r.Steps.Search; sr.Matches != int64(truth.Hot) || math.Abs(sr.Percent-want) > 0.1 {
		t.Errorf("search %q: %d matches (%.2f%%), want %d (%.2f%%)", analysistest.HotFunc, sr.Matches, sr.Percent, truth.Hot, want)
	}
	if m := r.Steps.MarkHover; m.HoveredMark == nil || len(m.HoveredMark.Stack) == 0 || !m.Tooltip.Visible {
		t.Errorf("hovering a timeline mark showed no stack: %+v", m)
	}
	if r.Screenshot == "" {
		t.Error("no screenshot")
	}

	// A poll bar clicked: the samples of its worker's lane inside it.
	tr, err := analysis.Load([]string{trace}, analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := htmlview.FromTrace(tr)
	p := r.Scope.Poll
	if p == nil || !(p.EndNs > p.StartNs) {
		t.Fatalf("clicking a poll bar scoped nothing: %+v", p)
	}
	var on, off int64
	for _, s := range d.Samples {
		if tm := float64(s.Time - d.Start); int(s.Row) == p.Row && tm >= p.StartNs && tm < p.EndNs {
			if s.OffCPU {
				off++
			} else {
				on++
			}
		}
	}
	if on == 0 || p.OnSamples != on || p.OffSamples != off || p.Breakdown.Wall != int64(p.EndNs-p.StartNs) {
		t.Errorf("poll bar %+v: page has %d on-CPU and %d off-CPU samples, the lane has %d and %d in it", p, p.OnSamples, p.OffSamples, on, off)
	}
	t.Logf("poll bar: %s", strings.ReplaceAll(p.Header, "\n", " | "))
}
