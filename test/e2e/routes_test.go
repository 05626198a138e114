package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/analysis"
	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/testchild"
)

// TestRouteReportWithoutSpans: a route-level report needs no span. The C
// publisher of internal/testchild alternates two spans on one thread every
// millisecond, each with its OTEP 4947 record carrying http.route and
// user.name (its process context publishes the key map), burning in
// work_in_span0/1 and now and then blocking in block_in_span0/1. Nothing
// sends spans to the collector: its receiver has no protocols, and its
// only pipeline writes profiles with the tracefile exporter. perfprof
// report --by http.route on the files must put each span's function
// under its span's route, for at least 99% of its samples; the off-CPU
// time of each block_in_span function must be under its route too
// (folded --by http.route --source offcpu).
func TestRouteReportWithoutSpans(t *testing.T) {
	requirePerf(t)
	truth := filepath.Join(t.TempDir(), "truth")
	pub := testchild.Start(t, testchild.OTelCtxPublisher(t), "work", "memfd", truth)
	route := map[string]string{} // span function → its span's http.route
	for range 2 {
		f := strings.Fields(pub.Line(t, 5*time.Second))
		if len(f) < 6 || f[0] != "span" {
			t.Fatalf("publisher: %q, want a span line", f)
		}
		route["work_in_span"+f[1]] = f[4]
		route["block_in_span"+f[1]] = f[4]
	}

	dir := t.TempDir()
	config := fmt.Sprintf(`receivers:
  perfprof:
    targets: {pids: [%d]}
    frequency: 999
    report_interval: 1s
    sched: {off_cpu_interval: 1ms}
exporters:
  tracefile:
    directory: %s
    compress: false
service:
  pipelines:
    profiles: {receivers: [perfprof], exporters: [tracefile]}
`, pub.Pid, dir)
	cmd, out := runCollector(t, config, nil)
	waitFor(t, out, "Everything is ready", 20*time.Second)
	if strings.Contains(out.String(), "Spans are read at sample time only with eBPF") {
		testchild.Unavailable(t, "the collector could not load its eBPF program, which reads thread contexts:\n%s", out.String())
	}
	// Samples enough to judge, however slowly a busy machine runs the
	// publisher (about 3 s when it is free).
	testchild.WaitFor(t, 60*time.Second, "1500 on-CPU samples in the span functions in the files", func() bool {
		tr, err := analysis.Load([]string{dir}, analysis.Options{})
		if err != nil {
			return false
		}
		n := 0
		for i := range tr.Samples {
			if s := &tr.Samples[i]; s.Source == analysis.SourceCPU {
				for _, f := range tr.FrameNames(s.Stack) {
					if strings.HasPrefix(f, "work_in_span") {
						n++
						break
					}
				}
			}
		}
		return n >= 1500
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("collector did not exit cleanly on SIGTERM: %v", err)
	}

	cli := filepath.Join(root, "_build", "perfprof")
	run := func(args ...string) string {
		t.Helper()
		b, err := exec.Command(cli, args...).Output()
		if err != nil {
			t.Fatalf("perfprof %s: %v", strings.Join(args, " "), err)
		}
		return string(b)
	}

	// Unasked, the report groups by http.route: the samples carry it.
	rep := run("report", dir)
	for _, want := range []string{"spans: 0", "Context attributes: http.route (", "user.name (",
		"== Samples per http.route (context attribute", "== Hot functions per http.route (on-CPU): 2 values"} {
		if !strings.Contains(rep, want) {
			t.Errorf("the report has no %q:\n%s", want, rep)
		}
	}

	// Every span function's samples, by the route the report puts them
	// under.
	rep = run("report", "--by", convention.HTTPRoute, "--top", "1000", dir)
	byRoute := hotFunctionsPer(t, rep, convention.HTTPRoute)
	for _, fn := range []string{"work_in_span0", "work_in_span1"} {
		total, right := 0, byRoute[route[fn]][fn]
		for _, fns := range byRoute {
			total += fns[fn]
		}
		t.Logf("%s: %d on-CPU samples, %d under %s (%.2f%%); by route: %v", fn, total, right, route[fn],
			100*float64(right)/float64(max(total, 1)), perRoute(byRoute, fn))
		if total < 500 {
			t.Errorf("%s: %d on-CPU samples, want ≥ 500", fn, total)
		} else if float64(right) < 0.99*float64(total) {
			t.Errorf("%s: %d of %d on-CPU samples under http.route %s, want ≥ 99%%", fn, right, total, route[fn])
		}
	}

	// The off-CPU time of the span functions, by the route folded roots
	// it at.
	offNs := map[string]map[string]uint64{} // function → root frame → ns
	for _, line := range strings.Split(strings.TrimSpace(run("folded", "--by", convention.HTTPRoute, "--source", "offcpu", dir)), "\n") {
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		ns, _ := strconv.ParseUint(line[i+1:], 10, 64)
		frames := strings.Split(line[:i], ";")
		for _, f := range frames[1:] {
			if strings.HasPrefix(f, "block_in_span") {
				if offNs[f] == nil {
					offNs[f] = map[string]uint64{}
				}
				offNs[f][frames[0]] += ns
				break
			}
		}
	}
	for _, fn := range []string{"block_in_span0", "block_in_span1"} {
		var total uint64
		for _, ns := range offNs[fn] {
			total += ns
		}
		right := offNs[fn][convention.HTTPRoute+" "+route[fn]]
		t.Logf("%s: %v off CPU, %v under %s; by root %v", fn, time.Duration(total), time.Duration(right), route[fn], offNs[fn])
		if total == 0 {
			t.Errorf("%s: no off-CPU time in the files", fn)
		} else if float64(right) < 0.99*float64(total) {
			t.Errorf("%s: %v of %v off CPU under http.route %s, want ≥ 99%%", fn, time.Duration(right), time.Duration(total), route[fn])
		}
	}
}

// hotFunctionsPer parses the "Hot functions per KEY" section of a report:
// per value ("(none)" included), each function's CUMUL samples.
func hotFunctionsPer(t *testing.T, rep, key string) map[string]map[string]int {
	t.Helper()
	out := map[string]map[string]int{}
	in := false
	var cur map[string]int
	for _, line := range strings.Split(rep, "\n") {
		if strings.HasPrefix(line, "== ") {
			in = strings.HasPrefix(line, "== Hot functions per "+key+" ")
			continue
		}
		if !in {
			continue
		}
		if v, ok := strings.CutPrefix(line, "-- "); ok {
			v = v[:strings.LastIndex(v, ": ")]
			cur = map[string]int{}
			out[v] = cur
			continue
		}
		// "  SELF% SELF CUMUL% CUMUL FUNCTION"
		f := strings.Fields(line)
		if cur == nil || len(f) != 5 || !strings.HasSuffix(f[0], "%") || f[0] == "SELF%" {
			continue
		}
		n, err := strconv.Atoi(f[3])
		if err != nil {
			t.Fatalf("report line %q", line)
		}
		cur[f[4]] += n
	}
	if len(out) == 0 {
		t.Fatalf("no Hot functions per %s section in the report:\n%s", key, rep)
	}
	return out
}

// perRoute is fn's samples by route, for the log.
func perRoute(byRoute map[string]map[string]int, fn string) map[string]int {
	m := map[string]int{}
	for r, fns := range byRoute {
		if fns[fn] > 0 {
			m[r] = fns[fn]
		}
	}
	return m
}
