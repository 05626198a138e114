// Package htmlviewtest drives pages of internal/htmlview in headless
// Chromium through test/browser/check.mjs (playwright-core from npm,
// Debian's chromium), for the browser tests of the view and of the CLI.
// A test skips when node or chromium is missing, unless
// PERFPROF_REQUIRE_BROWSER=1 (CI), where it fails. `make test` installs both.
package htmlviewtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/analysis/analysistest"
)

// RequireEnv is the environment variable that makes a browser test fail,
// instead of skip, when its tools are missing. It is not
// PERFPROF_REQUIRE_PERF: a machine may allow perf events and have no
// browser, or the other way round.
const RequireEnv = "PERFPROF_REQUIRE_BROWSER"

// Stats is what the page says it holds.
type Stats struct {
	Samples     int   `json:"samples"`
	OnCPU       int   `json:"onCPU"`
	OffCPU      int   `json:"offCPU"`
	OffCPUNs    int64 `json:"offCPUNs"`
	Bars        int   `json:"bars"`
	Stacks      int   `json:"stacks"`
	Frames      int   `json:"frames"`
	MarkEntries int   `json:"markEntries"`
}

// Frame is a frame of a hovered mark's stack, as the page shows it.
type Frame struct {
	Name string
	File string
	Line int
}

// Artifacts returns $TMPDIR/NAME, made if need be: where a browser test
// leaves its page and screenshots for people to look at (overwritten by
// the next run).
func Artifacts(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(os.TempDir(), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Tools finds node, chromium and test/browser with its node_modules
// (running npm ci there when they are missing), or skips.
func Tools(t *testing.T) (node, chromium, dir string) {
	t.Helper()
	unavailable := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("browser test required (%s=1) but %s", RequireEnv, msg)
		}
		t.Skipf("skipping the browser test: %s (make test installs it)", msg)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		unavailable("node is not installed")
	}
	chromium = os.Getenv("CHROMIUM")
	if chromium == "" {
		for _, c := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
			if p, err := exec.LookPath(c); err == nil {
				chromium = p
				break
			}
		}
	}
	if chromium == "" {
		unavailable("chromium is not installed (Debian: apt-get install chromium)")
	}
	dir, err = filepath.Abs(filepath.Join(analysistest.RepoRoot(t), "test", "browser"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core", "package.json")); err != nil {
		npm, err := exec.LookPath("npm")
		if err != nil {
			unavailable("test/browser/node_modules is missing and npm is not installed")
		}
		cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			unavailable("npm ci in test/browser failed: %v\n%s", err, out)
		}
	}
	return node, chromium, dir
}

// Result is what check.mjs prints.
type Result struct {
	Requests []string `json:"requests"`
	Blocked  []string `json:"blocked"`
	Errors   []string `json:"errors"`
	LoadWall float64  `json:"loadWallMs"`
	Load     struct {
		Ready          bool    `json:"ready"`
		Error          *string `json:"error"`
		ScriptStartMs  float64 `json:"scriptStartMs"`
		ParsedMs       float64 `json:"parsedMs"`
		DrawMs         float64 `json:"drawMs"`
		FlameDrawMs    float64 `json:"flameDrawMs"`
		TimelineDrawMs float64 `json:"timelineDrawMs"`
		TimelineDrawn  float64 `json:"timelineDrawnMs"`
		FlameBoxes     int     `json:"flameBoxes"`
		ZoomedFrame    string  `json:"zoomedFrame"`
		Mode           string  `json:"mode"`
		Total          int64   `json:"total"`
		Stats          Stats   `json:"stats"`
		Title          string  `json:"title"`
	} `json:"load"`
	Steps struct {
		FlameHover struct {
			Tooltip Tooltip `json:"tooltip"`
			Hovered struct {
				Name  string `json:"name"`
				File  string `json:"file"`
				Value int64  `json:"value"`
			} `json:"hovered"`
		} `json:"flameHover"`
		Click struct {
			Frame       string              `json:"frame"`
			RectBefore  struct{ W float64 } `json:"rectBefore"`
			ZoomedFrame string              `json:"zoomedFrame"`
			ZoomPath    []string            `json:"zoomPath"`
			ZoomedWidth float64             `json:"zoomedWidth"`
			CanvasWidth float64             `json:"canvasWidth"`
			ZoomText    string              `json:"zoomText"`
		} `json:"click"`
		Reset struct {
			ZoomedFrame string `json:"zoomedFrame"`
		} `json:"reset"`
		Search struct {
			Matches int64   `json:"matches"`
			Percent float64 `json:"percent"`
			Frames  int     `json:"frames"`
			Total   int64   `json:"total"`
			Text    string  `json:"text"`
		} `json:"search"`
		OffMode struct {
			Mode  string `json:"mode"`
			Total int64  `json:"total"`
		} `json:"offMode"`
		OnMode struct {
			Mode string `json:"mode"`
		} `json:"onMode"`
		Wheel struct {
			Full, Zoomed, Reset, Detail [2]float64
		} `json:"wheel"`
		MarkHover struct {
			Expected    *Mark   `json:"expected"`
			HoveredMark *Mark   `json:"hoveredMark"`
			Tooltip     Tooltip `json:"tooltip"`
		} `json:"markHover"`
	} `json:"steps"`
	Screenshot string  `json:"screenshot"`
	Scope      *Scopes `json:"scope"` // with a "scope" plan
}

// Breakdown is a breakdown as the page computes or shows it (ns).
type Breakdown struct {
	Spans       int   `json:"spans"`
	Wall        int64 `json:"wall"`
	OnSamples   int64 `json:"onSamples"`
	OffSamples  int64 `json:"offSamples"`
	OnCPU       int64 `json:"onCPU"`
	Blocked     int64 `json:"blocked"`
	Runnable    int64 `json:"runnable"`
	OffUnknown  int64 `json:"offUnknown"`
	NotObserved int64 `json:"notObserved"`
}

// Scope is window.perfprofView.scope: what the flamegraph is scoped to.
type Scope struct {
	Kind       string    `json:"kind"` // span, name, range, diff, omitted
	Name       string    `json:"name"`
	TraceID    string    `json:"traceId"`
	Span       int       `json:"span"`
	Root       bool      `json:"root"`
	Row        int       `json:"row"`
	StartNs    float64   `json:"startNs"`
	EndNs      float64   `json:"endNs"`
	Samples    int64     `json:"samples"`
	OnSamples  int64     `json:"onSamples"`
	OffSamples int64     `json:"offSamples"`
	Breakdown  Breakdown `json:"breakdown"`
	SelectMs   float64   `json:"selectMs"`
	Header     string    `json:"header"` // the header's text
}

// DiffFrame is a frame of the differential view (shares of samples, 0..1).
type DiffFrame struct {
	Name         string  `json:"name"`
	SlowShare    float64 `json:"slowShare"`
	TypicalShare float64 `json:"typicalShare"`
	Delta        float64 `json:"delta"`
}

// Scopes is what the scope steps of check.mjs saw.
type Scopes struct {
	DetailMs    float64 `json:"detailMs"`
	Span        *Scope  `json:"span"`
	AfterEscape struct {
		Scoped       bool  `json:"scoped"`
		Total        int64 `json:"total"`
		HeaderHidden bool  `json:"headerHidden"`
	} `json:"afterEscape"`
	AfterRootClick struct {
		Scoped bool  `json:"scoped"`
		Total  int64 `json:"total"`
	} `json:"afterRootClick"`
	Poll  *Scope `json:"poll"`
	Brush *Scope `json:"brush"`
	Panel []struct {
		Name  string            `json:"name"`
		Cells map[string]string `json:"cells"`
	} `json:"panel"`
	Name    *Scope `json:"name"`
	Slowest []struct {
		Text string `json:"text"`
		Span int    `json:"span"`
	} `json:"slowest"`
	SlowSpan *Scope `json:"slowSpan"`
	Diff     *struct {
		Scope   Scope       `json:"scope"`
		Top     []DiffFrame `json:"top"`
		Mode    string      `json:"mode"`
		Tooltip Tooltip     `json:"tooltip"`
	} `json:"diff"`
	Perf struct {
		Clicks []float64 `json:"clicks"` // ms from a click on a span bar to the flamegraph drawn
		Brush  float64   `json:"brush"`
		Name   float64   `json:"name"`
		Diff   float64   `json:"diff"`
	} `json:"perf"`
	Shots []string `json:"shots"`
}

type Tooltip struct {
	Visible bool   `json:"visible"`
	Text    string `json:"text"`
}

type Mark struct {
	Row        int     `json:"row"`
	RowName    string  `json:"rowName"`
	OffCPU     bool    `json:"offCPU"`
	StartNs    int64   `json:"startNs"`
	EndNs      int64   `json:"endNs"`
	Count      int64   `json:"count"`
	Weight     int64   `json:"weight"`
	StackCount int64   `json:"stackCount"`
	Stack      []Frame `json:"stack"` // leaf first
}

// Run runs check.mjs on the page html with a plan ({"clickFrame", "search",
// "markRow"}), writing the screenshot shot, and decodes what it observed.
func Run(t *testing.T, node, chromium, dir, html, shot string, plan any) (*Result, error) {
	t.Helper()
	planJSON, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(dir, "check.mjs"), html, shot, string(planJSON))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CHROMIUM="+chromium)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var r Result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("check.mjs: %v (exit: %v)\nstdout:\n%s\nstderr:\n%s", err, runErr, stdout.String(), stderr.String())
	}
	if runErr != nil {
		return &r, fmt.Errorf("check.mjs: %v: %s\nstderr:\n%s", runErr, strings.Join(r.Errors, "\n"), stderr.String())
	}
	return &r, nil
}
