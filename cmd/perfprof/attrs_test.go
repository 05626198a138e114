package main

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/perfprof/perfprof/exporter/tracefileexporter"
	"github.com/perfprof/perfprof/exporter/tracefileexporter/tracefiletest"
	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/pkg/pprofiledict"
)

// routed is what writeRoutes sends: per route, its on-CPU samples (whose
// leaf is its own function) and off-CPU nanoseconds; and the samples
// without a route.
var routed = []struct {
	route, user, fn string
	on              int
	offNs           int64
}{
	{"GET /alpha", "ann", "work_alpha", 30, 0},
	{"GET /beta", "bob", "work_beta", 20, 4_000_000},
}

const unrouted = 5 // on-CPU samples in idle_loop, without context attributes

// writeRoutes writes, with the real tracefile exporter and no span at
// all, the samples of a service whose thread contexts carry http.route and
// user.name, as the perfprof receiver sends them.
func writeRoutes(t *testing.T, dir string) {
	t.Helper()
	cfg := tracefileexporter.NewFactory().CreateDefaultConfig().(*tracefileexporter.Config)
	cfg.Directory = dir
	write := startExporter(t, cfg)
	b := tracefiletest.NewProfBuilder()
	main := b.Location(0x401000, tracefiletest.F("main", "/src/main.c", 1))
	on := b.Profile(4242, "routes", false)
	off := b.Profile(4242, "routes", true)
	base := uint64(time.Now().UnixNano())
	for i, r := range routed {
		stack := b.Stack(b.Location(0x402000+uint64(i)*0x100, tracefiletest.F(r.fn, "/src/main.c", 10+int64(i))), main)
		l := pprofiledict.NoLabels
		l.Tid, l.ThreadName = 100, "server"
		l.Context = []pprofiledict.KV{{Key: convention.HTTPRoute, Value: r.route}, {Key: "user.name", Value: r.user}}
		var ts []uint64
		var vals []int64
		for j := range r.on {
			ts = append(ts, base+uint64(i*100+j)*1_000_000)
			vals = append(vals, 1)
		}
		b.Sample(on, stack, 0, b.Labels(l), ts, vals)
		if r.offNs > 0 {
			l.State = convention.ThreadStateBlocked
			b.Sample(off, stack, 0, b.Labels(l), []uint64{base + uint64(i*100+99)*1_000_000}, []int64{r.offNs})
		}
	}
	idle := b.Stack(b.Location(0x403000, tracefiletest.F("idle_loop", "/src/main.c", 30)), main)
	l := pprofiledict.NoLabels
	l.Tid = 101
	var ts []uint64
	var vals []int64
	for j := range unrouted {
		ts = append(ts, base+uint64(500+j)*1_000_000)
		vals = append(vals, 1)
	}
	b.Sample(on, idle, 0, b.Labels(l), ts, vals)
	write(ptrace.NewTraces(), b.Profiles)
}

// attrRow is a row of a report's "Samples per ATTR" table.
type attrRow struct {
	samples, on, off int
	cpuMs            string
	blockedMs        string
}

var attrRowRe = regexp.MustCompile(`^  (.+?)\s+(\d+)\s+(\d+)\s+(\S+)\s+[\d.]+%\s+(\d+)\s+(\S+)\s+(\S+)$`)

// attrSections parses a report's sections for key: the table's rows and
// each value's hot functions with their self share.
func attrSections(t *testing.T, rep, key string) (map[string]attrRow, map[string]map[string]float64) {
	t.Helper()
	rows := map[string]attrRow{}
	fns := map[string]map[string]float64{}
	section := ""
	value := ""
	for _, line := range strings.Split(rep, "\n") {
		switch {
		case strings.HasPrefix(line, "== Samples per "+key+" "):
			section = "table"
			continue
		case strings.HasPrefix(line, "== Hot functions per "+key+" "):
			section = "funcs"
			continue
		case strings.HasPrefix(line, "== "):
			section = ""
		}
		switch section {
		case "table":
			if m := attrRowRe.FindStringSubmatch(line); m != nil && m[1] != "VALUE" {
				n := func(s string) int { v, _ := strconv.Atoi(s); return v }
				rows[m[1]] = attrRow{n(m[2]), n(m[3]), n(m[5]), m[4], m[6]}
			}
		case "funcs":
			if v, ok := strings.CutPrefix(line, "-- "); ok {
				value = v[:strings.LastIndex(v, ": ")]
				fns[value] = map[string]float64{}
			} else if f := strings.Fields(line); len(f) == 5 && strings.HasSuffix(f[0], "%") && value != "" {
				pct, _ := strconv.ParseFloat(strings.TrimSuffix(f[0], "%"), 64)
				fns[value][f[4]] = pct
			}
		}
	}
	return rows, fns
}

// TestReportByAttribute: on files the exporter wrote from samples with
// context attributes and no span, the report groups samples by http.route
// unasked and by any attribute with --by, folded roots stacks at the
// value, and pprof keeps them as labels that pprof's tag filters use.
func TestReportByAttribute(t *testing.T) {
	dir := t.TempDir()
	writeRoutes(t, dir)

	rep := mustRun(t, "report", dir)
	if !strings.Contains(rep, "Context attributes: http.route (51 samples, 2 values), user.name (51 samples, 2 values)") {
		t.Errorf("no context attribute line in the report:\n%s", rep)
	}
	if !strings.Contains(rep, "spans: 0") {
		t.Errorf("the files hold spans:\n%s", rep)
	}
	rows, fns := attrSections(t, rep, convention.HTTPRoute)
	want := map[string]attrRow{
		"GET /alpha": {30, 30, 0, "30.000", "0.000"},
		"GET /beta":  {21, 20, 1, "20.000", "4.000"},
		"(none)":     {unrouted, unrouted, 0, "5.000", "0.000"},
	}
	if len(rows) != len(want) {
		t.Errorf("rows %+v, want %+v\n%s", rows, want, rep)
	}
	for v, w := range want {
		if rows[v] != w {
			t.Errorf("%s: row %+v, want %+v", v, rows[v], w)
		}
	}
	for _, r := range routed {
		if got := fns[r.route][r.fn]; got != 100 {
			t.Errorf("%s: %s has %.2f%% of its samples, want 100%% (%v)", r.route, r.fn, got, fns[r.route])
		}
	}
	if got := fns["(none)"]["idle_loop"]; got != 100 {
		t.Errorf("(none): idle_loop %.2f%% (%v)", got, fns["(none)"])
	}
	if strings.Contains(rep, "== Samples per user.name") {
		t.Error("the report groups by user.name unasked")
	}

	// --by replaces the route keys.
	rep = mustRun(t, "report", "--by", "user.name", dir)
	rows, fns = attrSections(t, rep, "user.name")
	if rows["ann"].on != 30 || rows["bob"].on != 20 || fns["bob"]["work_beta"] != 100 {
		t.Errorf("--by user.name: rows %+v, functions %v", rows, fns)
	}
	if strings.Contains(rep, "== Samples per http.route") {
		t.Error("--by user.name still groups by http.route")
	}

	// An attribute no sample carries is an error that says which they do.
	_, errs, code := perfprof(t, "report", "--by", "http.method", dir)
	if code != 1 || !strings.Contains(errs, `no sample carries the context attribute "http.method"`) ||
		!strings.Contains(errs, `"http.route"`) {
		t.Errorf("--by http.method: exit %d: %s", code, errs)
	}

	_, stacks := foldedSum(t, mustRun(t, "folded", "--by", convention.HTTPRoute, dir))
	wantFolded := map[string]uint64{
		"http.route GET /alpha;main;work_alpha": 30, "http.route GET /beta;main;work_beta": 20,
		"(no http.route);main;idle_loop": unrouted,
	}
	if len(stacks) != len(wantFolded) {
		t.Errorf("folded --by http.route: %v", stacks)
	}
	for k, v := range wantFolded {
		if stacks[k] != v {
			t.Errorf("folded %q: %d, want %d (%v)", k, stacks[k], v, stacks)
		}
	}

	out := filepath.Join(t.TempDir(), "routes.pb.gz")
	mustRun(t, "pprof", "-o", out, dir)
	for _, s := range readProfile(t, out).Sample {
		if fn := s.Location[0].Line[0].Function.Name; fn != "idle_loop" &&
			(len(s.Label[convention.HTTPRoute]) != 1 || len(s.Label["user.name"]) != 1) {
			t.Errorf("%s sample labels %v", fn, s.Label)
		}
	}
	// pprof's total is the profile's; what the filter kept, it shows.
	top := pprofTop(t, out, "-tagfocus=http.route=GET /beta")
	if !strings.Contains(top, "Showing nodes accounting for 20, ") || !strings.Contains(top, "work_beta") || strings.Contains(top, "work_alpha") {
		t.Errorf("pprof -tagfocus http.route=GET /beta:\n%s", top)

	}
}
