package main

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/perfprof/perfprof/internal/analysis"
	"github.com/perfprof/perfprof/internal/analysis/analysistest"
	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/htmlview"
	"github.com/perfprof/perfprof/internal/wire"
)

// perfprof runs the command line in-process and returns stdout, stderr and
// the exit code.
func perfprof(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return out.String(), errb.String(), code
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, errs, code := perfprof(t, args...)
	if code != 0 {
		t.Fatalf("perfprof %v: exit %d: %s", args, code, errs)
	}
	return out
}

// demoCounts counts the demo trace's samples with the wire reader directly,
// independently of the analysis package.
func demoCounts(t *testing.T, path string) (events, on, off int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := wire.NewReader(f)
	var ev wire.Event
	for {
		err := r.ReadEvent(&ev)
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		events++
		if l := wire.LayoutOf(ev.Schema); l.Kind == wire.KindCpuSample {
			var e wire.CpuSampleEvent
			if l.CpuSample(&ev, &e, new(wire.CpuSampleExt)); e.Source == convention.SourceOffCPU {
				off++
			} else {
				on++
			}
		}
	}
}

func TestHelp(t *testing.T) {
	for _, c := range []string{"dump", "report", "folded", "pprof", "html"} {
		out, _, code := perfprof(t, c, "--help")
		if code != 0 || !strings.Contains(out, "Usage: perfprof "+c) {
			t.Errorf("%s --help: exit %d, %q", c, code, out)
		}
	}
	if out, _, code := perfprof(t, "--help"); code != 0 || !strings.Contains(out, "folded") {
		t.Errorf("--help: %d %q", code, out)
	}
	if _, _, code := perfprof(t, "nosuch"); code != 2 {
		t.Errorf("unknown command: exit %d", code)
	}
	if _, _, code := perfprof(t, "report"); code != 2 {
		t.Errorf("no files: exit %d", code)
	}
	synth, _ := synthFile(t, "synth.bin", false)
	if _, _, code := perfprof(t, "folded", "--source", "bogus", synth); code != 2 {
		t.Errorf("bad --source: exit %d", code)
	}
}

func TestDemoDump(t *testing.T) {
	demo := analysistest.Shared(t, analysistest.DemoTrace)
	events, on, off := demoCounts(t, demo)
	if events != analysistest.DemoEvents {
		t.Fatalf("wire reader: %d events, spec %d", events, analysistest.DemoEvents)
	}
	out := mustRun(t, "dump", demo)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != analysistest.DemoEvents {
		t.Fatalf("dump: %d lines, want %d", len(lines), analysistest.DemoEvents)
	}
	kinds := map[string]int{}
	for i, l := range lines {
		var ev struct {
			Name   string
			TS     uint64
			Fields map[string]json.RawMessage
		}
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("line %d: %v: %s", i+1, err, l)
		}
		kinds[ev.Name]++
	}
	if kinds["CpuSampleEvent"] != on+off || kinds["PollStartEvent"] != analysistest.DemoPolls ||
		kinds["SymbolTableEntry"] != analysistest.DemoSymbolEntries {
		t.Errorf("kinds %v", kinds)
	}
	out = mustRun(t, "dump", "--kinds", "CpuSampleEvent,PollEndEvent", demo)
	n := strings.Count(out, "\n")
	if n != on+off+analysistest.DemoPolls {
		t.Errorf("--kinds: %d lines, want %d", n, on+off+analysistest.DemoPolls)
	}
	// Kernel frames are symbolized from the demo's symbol table.
	if !strings.Contains(out, `{"addr":"0xffffffff81a28b97","frames":[{"func":"__schedule"`) {
		t.Error("callchain not symbolized")
	}
}

var samplesLine = regexp.MustCompile(`Samples: (\d+) \(on-CPU (\d+), off-CPU (\d+)\)`)

func TestDemoReport(t *testing.T) {
	demo := analysistest.Shared(t, analysistest.DemoTrace)
	_, on, off := demoCounts(t, demo)
	out := mustRun(t, "report", demo)
	m := samplesLine.FindStringSubmatch(out)
	if m == nil || m[1] != strconv.Itoa(on+off) || m[2] != strconv.Itoa(on) || m[3] != strconv.Itoa(off) {
		t.Fatalf("samples line %q, want on %d off %d", m, on, off)
	}
	for _, want := range []string{
		"Input: 1 file(s) (1 trc+gzip)",
		strconv.Itoa(analysistest.DemoEvents) + " events",
		"      36801  PollStartEvent",
		"wall clock 2026-05-15T",
		"== On-CPU per worker: 2 groups ==",
		"-- worker 0: ", "-- worker 1: ",
		"== Long polls (> 1ms): ",
		"from WorkerUnpark sched_wait_ns: n=6304",
		"__schedule",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// A higher threshold finds fewer long polls.
	count := func(s string) int {
		m := regexp.MustCompile(`Long polls \(> [^)]*\): (\d+) of 36801 polls`).FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("no long-poll header in %q", s)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	if a, b := count(out), count(mustRun(t, "report", "--long", "40ms", demo)); a <= b || b == 0 {
		t.Errorf("long polls >1ms %d, >40ms %d", a, b)
	}
}

func foldedSum(t *testing.T, out string) (uint64, map[string]uint64) {
	t.Helper()
	var sum uint64
	m := map[string]uint64{}
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if l == "" {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		n, err := strconv.ParseUint(l[i+1:], 10, 64)
		if err != nil {
			t.Fatalf("folded line %q", l)
		}
		if _, dup := m[l[:i]]; dup {
			t.Fatalf("stack not merged: %q", l[:i])
		}
		m[l[:i]] = n
		sum += n
	}
	return sum, m
}

func TestDemoFolded(t *testing.T) {
	demo := analysistest.Shared(t, analysistest.DemoTrace)
	_, on, off := demoCounts(t, demo)
	if s, _ := foldedSum(t, mustRun(t, "folded", demo)); s != uint64(on) {
		t.Errorf("folded cpu total %d, want %d", s, on)
	}
	s, m := foldedSum(t, mustRun(t, "folded", "--source", "offcpu", "--by", "worker", demo))
	if s != uint64(off) {
		t.Errorf("folded offcpu total %d, want %d", s, off)
	}
	for k := range m {
		if !strings.HasPrefix(k, "worker ") && !strings.HasPrefix(k, "not a worker") && !strings.HasPrefix(k, "blocking pool") {
			t.Errorf("--by worker: %q", k)
		}
	}
}

// pprofTop runs go tool pprof -top on a profile and returns its output.
func pprofTop(t *testing.T, file string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", append(append([]string{"tool", "pprof", "-top"}, args...), file)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, out)
	}
	return string(out)
}

var totalRe = regexp.MustCompile(`Total samples = (\d+)`)

func pprofTotal(t *testing.T, top string) int {
	t.Helper()
	m := totalRe.FindStringSubmatch(top)
	if m == nil {
		t.Fatalf("no total in pprof output:\n%s", top)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func TestDemoPprof(t *testing.T) {
	demo := analysistest.Shared(t, analysistest.DemoTrace)
	_, on, off := demoCounts(t, demo)
	out := filepath.Join(t.TempDir(), "demo.pb.gz")
	mustRun(t, "pprof", demo, "-o", out)
	if got := pprofTotal(t, pprofTop(t, out)); got != on {
		t.Errorf("pprof samples %d, want %d", got, on)
	}
	if got := pprofTotal(t, pprofTop(t, out, "-sample_index=off_cpu_samples")); got != off {
		t.Errorf("pprof off-CPU samples %d, want %d", got, off)
	}
	p := readProfile(t, out)
	workers := map[string]bool{}
	for _, s := range p.Sample {
		for _, w := range s.Label["worker"] {
			workers[w] = true
		}
		if len(s.Label["thread"]) != 1 {
			t.Fatalf("sample without thread label: %v", s.Label)
		}
	}
	if !workers["0"] || !workers["1"] {
		t.Errorf("worker labels %v", workers)
	}
}

func readProfile(t *testing.T, path string) *profile.Profile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var selfRe = regexp.MustCompile(`(?m)^\s+([\d.]+)%\s+(\d+)\s+([\d.]+)%\s+(\d+)\s+` + regexp.QuoteMeta(analysistest.HotFunc) + `$`)

// checkSynthCLI runs every command on a synthetic file and checks them
// against the truth.
func checkSynthCLI(t *testing.T, path string, truth analysistest.Truth, legacy bool) {
	t.Helper()
	rep := mustRun(t, "report", path)
	m := samplesLine.FindStringSubmatch(rep)
	if m == nil || m[2] != strconv.Itoa(truth.OnCPU) || m[3] != strconv.Itoa(truth.OffCPU) {
		t.Fatalf("samples %q, want on %d off %d", m, truth.OnCPU, truth.OffCPU)
	}
	hot := selfRe.FindStringSubmatch(rep)
	if hot == nil {
		t.Fatalf("no %s row in report:\n%s", analysistest.HotFunc, rep)
	}
	self, _ := strconv.ParseFloat(hot[1], 64)
	want := 100 * float64(truth.Hot) / float64(truth.OnCPU)
	if math.Abs(self-want) > 2 {
		t.Errorf("report SELF%% of %s %.2f, want %.2f ± 2", analysistest.HotFunc, self, want)
	}
	if !strings.Contains(rep, "Long polls (> 1ms): 1 of ") {
		t.Errorf("report: long poll not found")
	}
	if !strings.Contains(rep, "samples inside: "+strconv.Itoa(truth.LongPoll.OnCPU)+" on-CPU") {
		t.Errorf("report: long poll samples, want %d on-CPU", truth.LongPoll.OnCPU)
	}
	if !legacy {
		for _, want := range []string{
			"-- " + analysistest.HotSpan + ": " + strconv.Itoa(truth.Hot) + " samples",
			"-- " + analysistest.RootName + ": ",
			"from thread_state runnable value_ns: n=100 p50=50µs p99=99µs",
			"Blocking stacks (off-CPU, blocked or state unknown, inside spans or polls): " + strconv.Itoa(truth.Blocked) + " samples",
			"app.read (app/read.go:70)",
		} {
			if !strings.Contains(rep, want) {
				t.Errorf("report lacks %q", want)
			}
		}
	}

	fsum, folded := foldedSum(t, mustRun(t, "folded", path))
	if fsum != uint64(truth.OnCPU) {
		t.Errorf("folded total %d, want %d", fsum, truth.OnCPU)
	}
	var hotFolded uint64
	for k, v := range folded {
		if strings.HasSuffix(k, ";"+analysistest.HotFunc) {
			hotFolded += v
		}
	}
	if hotFolded != uint64(truth.Hot) {
		t.Errorf("folded hot stacks %d, want %d", hotFolded, truth.Hot)
	}
	if !legacy {
		offSum, _ := foldedSum(t, mustRun(t, "folded", "--source", "offcpu", path))
		var wantNs uint64 = truth.BlockedNs
		for _, v := range truth.RunnableNs {
			wantNs += v
		}
		if offSum != wantNs {
			t.Errorf("folded offcpu %d ns, want %d", offSum, wantNs)
		}
		_, bySpan := foldedSum(t, mustRun(t, "folded", "--by", "span", path))
		var hs uint64
		for k, v := range bySpan {
			if strings.HasPrefix(k, "span "+analysistest.HotSpan+";") {
				hs += v
			}
		}
		if hs != uint64(truth.Hot) {
			t.Errorf("--by span: hot span %d, want %d", hs, truth.Hot)
		}
	}

	out := filepath.Join(t.TempDir(), "out.pb.gz")
	mustRun(t, "pprof", "-o", out, path)
	top := pprofTop(t, out)
	if got := pprofTotal(t, top); uint64(got) != fsum {
		t.Errorf("pprof total %d, folded total %d", got, fsum)
	}
	pm := regexp.MustCompile(`(?m)^\s+(\d+)\s+([\d.]+)%.*\s` + regexp.QuoteMeta(analysistest.HotFunc) + `( \(inline\))?$`).FindStringSubmatch(top)
	if pm == nil || pm[1] != strconv.Itoa(truth.Hot) {
		t.Errorf("pprof flat of %s: %v, want %d\n%s", analysistest.HotFunc, pm, truth.Hot, top)
	}
	if !legacy {
		p := readProfile(t, out)
		var spans = map[string]int64{}
		for _, s := range p.Sample {
			for _, sp := range s.Label["span"] {
				spans[sp] += s.Value[0]
			}
		}
		if spans[analysistest.HotSpan] != int64(truth.Hot) {
			t.Errorf("pprof span label: %v", spans)
		}
		if len(p.SampleType) != 3 || p.SampleType[2].Type != convention.OffCPUType || p.SampleType[2].Unit != convention.OffCPUUnit {
			t.Errorf("sample types %v", p.SampleType)
		}
	}
}

func synthFile(t *testing.T, name string, legacy bool) (string, analysistest.Truth) {
	t.Helper()
	s := analysistest.DefaultSynth()
	if legacy {
		s.Blocked, s.Runnable = 0, 0
	}
	p := filepath.Join(t.TempDir(), name)
	truth, err := s.WriteFile(p, legacy)
	if err != nil {
		t.Fatal(err)
	}
	return p, truth
}

func TestSynth(t *testing.T) {
	for _, c := range []struct {
		name   string
		legacy bool
	}{{"synth.bin", false}, {"synth.bin.gz", false}, {"legacy.bin", true}, {"legacy.bin.gz", true}} {
		t.Run(c.name, func(t *testing.T) {
			p, truth := synthFile(t, c.name, c.legacy)
			checkSynthCLI(t, p, truth, c.legacy)
		})
	}
}

func TestSynthDirectory(t *testing.T) {
	dir := t.TempDir()
	s := analysistest.DefaultSynth()
	// Two processes' worth of segments: the same synthetic trace twice,
	// the second one shifted in time; both must be counted.
	var total analysistest.Truth
	for i := range 3 {
		s.Start = uint64(1_000_000_000_000 + i*1_000_000_000)
		name := filepath.Join(dir, "trace."+strconv.Itoa(i)+".bin")
		if i == 1 {
			name += ".gz"
		}
		tr, err := s.WriteFile(name, false)
		if err != nil {
			t.Fatal(err)
		}
		total.OnCPU += tr.OnCPU
		total.Hot += tr.Hot
	}
	rep := mustRun(t, "report", dir)
	if !strings.Contains(rep, "Input: 3 file(s)") {
		t.Errorf("report input line:\n%s", rep[:200])
	}
	m := samplesLine.FindStringSubmatch(rep)
	if m == nil || m[2] != strconv.Itoa(total.OnCPU) {
		t.Errorf("samples %v, want on-CPU %d", m, total.OnCPU)
	}
	if s, _ := foldedSum(t, mustRun(t, "folded", dir)); s != uint64(total.OnCPU) {
		t.Errorf("folded %d", s)
	}
}

func TestTruncatedAndCorrupt(t *testing.T) {
	p, _ := synthFile(t, "synth.bin", false)
	b, _ := os.ReadFile(p)
	cut := filepath.Join(t.TempDir(), "trace.0.bin.active")
	os.WriteFile(cut, b[:len(b)/2], 0o644)
	out, errs, code := perfprof(t, "report", cut)
	if code != 0 || !strings.Contains(errs, "truncated") || !strings.Contains(out, "truncated tail") {
		t.Errorf("truncated: exit %d, stderr %q", code, errs)
	}
	if _, errs, code := perfprof(t, "dump", cut); code != 0 || !strings.Contains(errs, "truncated") {
		t.Errorf("dump truncated: exit %d %q", code, errs)
	}
	// An unknown frame tag: the error names the file and the offset.
	bad := filepath.Join(t.TempDir(), "bad.bin")
	c := append([]byte(nil), b...)
	c[5] = 0x7f // the first frame after the header
	os.WriteFile(bad, c, 0o644)
	for _, cmd := range []string{"report", "dump", "folded"} {
		_, errs, code := perfprof(t, cmd, bad)
		if code != 1 || !strings.Contains(errs, bad) || !strings.Contains(errs, "offset 5") {
			t.Errorf("%s corrupt: exit %d, stderr %q", cmd, code, errs)
		}
	}
}

func TestProgressFlag(t *testing.T) {
	p, _ := synthFile(t, "synth.bin", false)
	_, errs, code := perfprof(t, "folded", "--progress", p)
	if code != 0 || !strings.Contains(errs, "100%") {
		t.Errorf("--progress: exit %d, stderr %q", code, errs)
	}
	if _, errs, _ := perfprof(t, "folded", p); errs != "" {
		t.Errorf("progress without --progress on a small non-terminal input: %q", errs)
	}
}

func TestHTML(t *testing.T) {
	p, truth := synthFile(t, "synth.bin", false)
	tr := loadForTest(t, p)
	d := htmlview.FromTrace(tr)
	if len(d.Samples) != truth.OnCPU+truth.OffCPU {
		t.Errorf("html samples %d, want %d", len(d.Samples), truth.OnCPU+truth.OffCPU)
	}
	rows := map[string]bool{}
	for _, r := range d.Rows {
		rows[r.Name] = true
	}
	if !rows["worker 0"] || !rows["worker 1"] || !rows["tid 999 (flush)"] || len(rows) != 3 {
		t.Errorf("rows %v", rows)
	}
	polls := 0
	for _, b := range d.Bars {
		if b.Kind == "poll" {
			polls++
		}
	}
	if polls != truth.Polls {
		t.Errorf("poll bars %d, want %d", polls, truth.Polls)
	}
	// Stacks are root first: every worker stack starts at main.
	for _, s := range d.Samples {
		if st := d.Stacks[s.Stack]; d.Frames[st[0]].Name != analysistest.MainFunc {
			t.Fatalf("stack not root first: %v", st)
		}
	}
	out := filepath.Join(t.TempDir(), "out.html")
	mustRun(t, "html", "-o", out, "--title", "synthetic", p)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("synthetic")) || !bytes.Contains(b, []byte(analysistest.HotFunc)) {
		t.Errorf("html page lacks the title or the hot function (%d bytes)", len(b))
	}
}

// TestDemoHTML draws the page of the trace written by dial9's own code.
func TestDemoHTML(t *testing.T) {
	demo := filepath.Join(t.TempDir(), "demo.html")
	mustRun(t, "html", analysistest.Shared(t, analysistest.DemoTrace), "-o", demo)
	if st, err := os.Stat(demo); err != nil || st.Size() < 10000 {
		t.Errorf("demo page: %v", err)
	}
}

func loadForTest(t *testing.T, paths ...string) *analysis.Trace {
	t.Helper()
	tr, err := analysis.Load(paths, analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}
