package htmlview

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/perfprof/perfprof/internal/htmlview/htmlviewtest"
)

// The browser test drives a real page in headless Chromium through
// test/browser/check.mjs (playwright-core from npm, Debian's chromium). It
// skips when node or chromium is missing, unless PERFPROF_REQUIRE_BROWSER=1
// (CI), where it fails. `make test` installs both.

// artifacts is where the browser test leaves its page and screenshots.
func artifacts(t *testing.T) string { return htmlviewtest.Artifacts(t, "perfprof-htmlview") }

func TestBrowser(t *testing.T) {
	node, chromium, dir := htmlviewtest.Tools(t)
	const n = 100_000
	d := genData(n, 42)
	out := artifacts(t)
	html := filepath.Join(out, "report-100k.html")
	shot := filepath.Join(out, "screenshot.png")
	var page bytes.Buffer
	if err := Write(&page, d); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(html, page.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("page for %d samples: %d bytes (%.2f MB): %s", n, page.Len(), float64(page.Len())/1e6, html)

	const markRow = 3
	r, err := htmlviewtest.Run(t, node, chromium, dir, html, shot, map[string]any{"clickFrame": genHandler, "search": genSearch, "markRow": markRow})
	if err != nil {
		t.Fatal(err)
	}

	// Offline: not a single request besides the file itself.
	if len(r.Requests) > 0 || len(r.Blocked) > 0 {
		t.Errorf("the page made requests: %q, blocked %q", r.Requests, r.Blocked)
	}
	if !r.Load.Ready || r.Load.Error != nil {
		t.Fatalf("page not ready: %v", r.Load.Error)
	}
	t.Logf("flamegraph drawn %.0f ms after navigation start (script started at %.0f ms, data parsed at %.0f ms, the draw itself %.1f ms, %d boxes); timeline drawn at %.0f ms (%.1f ms); load to ready %.0f ms wall",
		r.Load.DrawMs, r.Load.ScriptStartMs, r.Load.ParsedMs, r.Load.FlameDrawMs, r.Load.FlameBoxes, r.Load.TimelineDrawn, r.Load.TimelineDrawMs, r.LoadWall)
	if r.Load.DrawMs <= 0 || r.Load.DrawMs > 2000 {
		t.Errorf("flamegraph drawn %.0f ms after navigation start, want under 2000", r.Load.DrawMs)
	}
	var on, offNs int64
	for _, s := range d.Samples {
		if s.OffCPU {
			offNs += offWeight(s)
		} else {
			on++
		}
	}
	if r.Load.Stats.Samples != n || r.Load.Total != on || r.Load.Mode != "on" || r.Load.ZoomedFrame != "all" || r.Load.Title != d.Title {
		t.Errorf("initial state: %+v", r.Load)
	}

	// Hover and click on the handler frame: it zooms.
	fh := r.Steps.FlameHover
	if !fh.Tooltip.Visible || !strings.HasPrefix(fh.Tooltip.Text, genHandler+"\nsrc/http.rs:") || !strings.Contains(fh.Tooltip.Text, "samples (") {
		t.Errorf("flamegraph tooltip: %+v", fh.Tooltip)
	}
	c := r.Steps.Click
	if c.ZoomedFrame != genHandler || len(c.ZoomPath) < 2 || c.ZoomPath[0] != "all" || c.ZoomPath[len(c.ZoomPath)-1] != genHandler {
		t.Errorf("after a click on %s: zoomed to %q, path %q", genHandler, c.ZoomedFrame, c.ZoomPath)
	}
	if c.RectBefore.W > 0.9*c.CanvasWidth || math.Abs(c.ZoomedWidth-c.CanvasWidth) > 1 {
		t.Errorf("%s was %.0f px wide, %.0f px after the zoom; the canvas is %.0f px", genHandler, c.RectBefore.W, c.ZoomedWidth, c.CanvasWidth)
	}
	if !strings.HasPrefix(c.ZoomText, "zoomed into "+genHandler) {
		t.Errorf("zoom path shows %q", c.ZoomText)
	}
	if r.Steps.Reset.ZoomedFrame != "all" {
		t.Errorf("after reset: zoomed to %q", r.Steps.Reset.ZoomedFrame)
	}

	// Search: the share of samples with a serde_json function on the stack.
	matched, total := trueShare(d, genSearch)
	s := r.Steps.Search
	pct := 100 * float64(matched) / float64(total)
	if s.Matches != int64(matched) || s.Total != int64(total) || math.Abs(s.Percent-pct) > 1e-9 || s.Frames == 0 {
		t.Errorf("search %q: %d of %d samples (%.4f%%) in %d frames; want %d of %d (%.4f%%)", genSearch, s.Matches, s.Total, s.Percent, s.Frames, matched, total, pct)
	}
	if want := fmt.Sprintf("matched %.1f%% (%s of %s samples,", pct, htmlviewtest.Thousands(int64(matched)), htmlviewtest.Thousands(int64(total))); !strings.HasPrefix(s.Text, want) {
		t.Errorf("search result %q, want it to start with %q", s.Text, want)
	}
	t.Logf("search %q: %s (true share %d of %d)", genSearch, s.Text, matched, total)

	if r.Steps.OffMode.Mode != "off" || r.Steps.OffMode.Total != offNs || r.Steps.OnMode.Mode != "on" {
		t.Errorf("off-CPU view: %+v (want total %d ns), back: %+v", r.Steps.OffMode, offNs, r.Steps.OnMode)
	}

	w := r.Steps.Wheel
	if span := func(r [2]float64) float64 { return r[1] - r[0] }; !(span(w.Zoomed) < span(w.Full)) || w.Reset != w.Full || !(span(w.Detail) < span(w.Full)/5) {
		t.Errorf("timeline wheel zoom: full %v, zoomed %v, reset %v, detail %v", w.Full, w.Zoomed, w.Reset, w.Detail)
	}

	// Hovering a timeline mark shows its stack: the bucket's samples are
	// really there, and the stack is the most frequent one among them.
	mh := r.Steps.MarkHover
	m := mh.HoveredMark
	if m == nil || mh.Expected == nil {
		t.Fatalf("no mark hovered: %+v", mh)
	}
	if m.Row != markRow || m.StartNs != mh.Expected.StartNs || m.OffCPU || len(m.Stack) == 0 {
		t.Errorf("hovered mark %+v, want the one at %+v", m, mh.Expected)
	}
	var count int64
	freq := map[int32]int64{}
	for _, smp := range d.Samples {
		if int(smp.Row) == m.Row && smp.OffCPU == m.OffCPU && smp.Time-d.Start >= m.StartNs && smp.Time-d.Start < m.EndNs {
			count++
			freq[smp.Stack]++
		}
	}
	var best, shown int64
	for st, f := range freq {
		best = max(best, f)
		leafFirst := slices.Clone(d.Stacks[st])
		slices.Reverse(leafFirst)
		if slices.EqualFunc(leafFirst, m.Stack, func(fr int32, f htmlviewtest.Frame) bool { return d.Frames[fr] == Frame(f) }) {
			shown += f
		}
	}
	if m.Count != count || m.StackCount != best || shown != best {
		t.Errorf("mark %d-%d ns of row %d: %d samples, stack in %d; the data has %d samples there, the stack in %d, the most frequent in %d",
			m.StartNs, m.EndNs, m.Row, m.Count, m.StackCount, count, shown, best)
	}
	tip := mh.Tooltip.Text
	if !mh.Tooltip.Visible || !strings.HasPrefix(tip, "worker 3 · on-CPU\n") || !strings.Contains(tip, "leaf first") {
		t.Errorf("mark tooltip: %+v", mh.Tooltip)
	}
	var lines []string
	for _, f := range m.Stack {
		lines = append(lines, f.Name+"  "+f.File+":"+fmt.Sprint(f.Line))
	}
	if i := strings.Index(tip, "▶ "+lines[0]); i < 0 || !strings.Contains(tip[i:], strings.Join(lines[1:], "\n  ")) {
		t.Errorf("mark tooltip does not list the stack leaf first:\n%s\nwant:\n%s", tip, strings.Join(lines, "\n"))
	}

	// Screenshots: PNGs of the whole page.
	for _, p := range []string{shot, strings.TrimSuffix(shot, ".png") + "-zoomed.png"} {
		b, err := os.ReadFile(p)
		if err != nil || len(b) < 10_000 || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
			t.Errorf("screenshot %s: %d bytes, %v", p, len(b), err)
		}
	}
	keep := filepath.Join(os.TempDir(), "perfprof-html-screenshot.png")
	if b, err := os.ReadFile(shot); err == nil {
		if err := os.WriteFile(keep, b, 0o644); err != nil {
			t.Error(err)
		}
	}
	t.Logf("screenshots: %s (search highlighted, timeline zoomed, a mark's stack shown), %s (flamegraph zoomed), copy at %s",
		shot, strings.TrimSuffix(shot, ".png")+"-zoomed.png", keep)
}

// The guard itself: a page that tries to reach the network fails the check.
func TestBrowserCatchesRequests(t *testing.T) {
	node, chromium, dir := htmlviewtest.Tools(t)
	out := artifacts(t)
	html := filepath.Join(out, "leaky.html")
	leaky := `<!DOCTYPE html><html><body><img src="https://example.invalid/x.png"><img src="other.png">
<script>window.perfprofView = {ready: true};</script></body></html>`
	if err := os.WriteFile(html, []byte(leaky), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := htmlviewtest.Run(t, node, chromium, dir, html, filepath.Join(out, "leaky.png"), map[string]any{})
	if err == nil {
		t.Fatal("check.mjs passed a page that makes requests")
	}
	all := strings.Join(append(r.Requests, r.Blocked...), " ")
	if !strings.Contains(all, "https://example.invalid/x.png") || !strings.Contains(all, "other.png") {
		t.Errorf("requests seen: %q, blocked: %q", r.Requests, r.Blocked)
	}
}
