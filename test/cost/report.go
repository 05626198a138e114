package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/perfprof/perfprof/test/measure"
)

// printHeader prints how the measurement is run: the command line, the
// effective flags, the machine, the collector and its configurations, and
// the targets.
func (t *tool) printHeader(cases, skipped []*costCase, tgs []*target) {
	fmt.Printf("command:   %s\n", measure.CommandLine("./test/cost"))
	names := make([]string, len(cases))
	for i, c := range cases {
		names[i] = c.name
	}
	fmt.Printf("flags:     -rounds %d -warmup %s -window %s -span-rate %d -collector %s\n", t.rounds, t.warmup, t.window, t.spanRate, t.collector)
	fmt.Printf("rows:      %s\n", strings.Join(names, " "))
	fmt.Printf("machine:   %s, %d CPUs, %s, load average %s\n", measure.Kernel(), runtime.NumCPU(), runtime.Version(), measure.LoadAvg())
	version, _ := exec.Command(t.collector, "--version").Output()
	built := ""
	if st, err := os.Stat(t.collector); err == nil {
		built = fmt.Sprintf(", %d bytes, modified %s", st.Size(), st.ModTime().Format(time.DateTime))
	}
	fmt.Printf("collector: %s %s   (%s%s)\n", t.collector, strings.Join(measure.CollectorArgs("CONFIG"), " "), strings.TrimSpace(string(version)), built)
	kinds := map[caseKind]bool{}
	for _, c := range cases {
		if kinds[c.kind] {
			continue
		}
		kinds[c.kind] = true
		var label string
		switch c.kind {
		case kindTarget:
			label = "TARGET-HZ rows"
		case kindIdle:
			label = "idle row"
		case kindSpansPerfprof:
			label = "spans-perfprof row"
		case kindSpansOTLP:
			label = "spans-otlp row"
		}
		cfg := (&costCase{kind: c.kind, hz: 999}).config(0, "127.0.0.1:SPANS", "TMP/traces", "127.0.0.1:SINK", 0)
		cfg = strings.ReplaceAll(cfg, "{pids: [0]}", "{pids: [PID]}   (c-short: {executables: [c-short]})")
		cfg = strings.ReplaceAll(cfg, "frequency: 999", "frequency: HZ")
		cfg = strings.ReplaceAll(cfg, "port: 0,", "port: PORT,")
		fmt.Printf("%s, with CONFIG:\n\t%s\n", label, strings.ReplaceAll(strings.TrimSuffix(cfg, "\n"), "\n", "\n\t"))
	}
	if kinds[kindSpansPerfprof] || kinds[kindSpansOTLP] {
		fmt.Printf("span load: spangen -rate %d -threads %d -burn 0s -endpoint 127.0.0.1:SPANS   (internal/testchild/spangen: OTel Go SDK, batch span processor, OTLP/gRPC)\n", t.spanRate, spanThreads)
	}
	for _, tg := range tgs {
		if tg.skip != "" {
			fmt.Printf("target %s: SKIPPED: %s\n", tg.name, tg.skip)
			continue
		}
		fmt.Printf("target %s: %s\n\t%s\n", tg.name, tg.about, tg.cmd)
	}
	fmt.Println()
}

// printTables prints the profiling rows and the span rows as markdown
// tables, then the reasons of the failed runs.
func (t *tool) printTables(cases, skipped []*costCase, results map[*costCase][]result) {
	var prof, spans []*costCase
	for _, c := range cases {
		if c.kind == kindSpansPerfprof || c.kind == kindSpansOTLP {
			spans = append(spans, c)
		} else {
			prof = append(prof, c)
		}
	}
	if len(prof) > 0 || len(skipped) > 0 {
		fmt.Printf("\nThe collector profiling one process, receiver defaults (%s; %s warm-up, %s window):\n\n", t.medians(), t.warmup, t.window)
		fmt.Println("| row | runs | CPU, % of a core (min–max) | target CPU, cores | on-CPU samples/s | CPU ms per 1k samples (min–max) | off-CPU samples/s | RSS MiB | RssAnon | RssFile | pinned (VmPin: perf rings) | peak RSS (VmHWM) MiB |")
		fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
		for _, c := range prof {
			ok, runs := okResults(results[c])
			if len(ok) == 0 {
				fmt.Printf("| %s | %s | %s | | | | | | | | | |\n", c.name, runs, failedCell(results[c]))
				continue
			}
			cores, samples, perKs, off := "–", "–", "–", "–"
			if c.kind == kindTarget {
				cores = f2(med(ok, result.targetCores))
				samples = f0(med(ok, func(r result) float64 { return perSec(r.samples, r.wall) }))
				perKs = spreadCell(ok, func(r result) float64 { return perK(r.cpu, r.samples) })
				off = f0(med(ok, func(r result) float64 { return perSec(r.offCPU, r.wall) }))
			}
			fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.name, runs, cpuCell(ok), cores, samples, perKs, off,
				memCell(ok, func(m measure.Memory) uint64 { return m.RSS }),
				memCell(ok, func(m measure.Memory) uint64 { return m.RSSAnon }),
				memCell(ok, func(m measure.Memory) uint64 { return m.RSSFile }),
				memCell(ok, func(m measure.Memory) uint64 { return m.Pinned }),
				memCell(ok, func(m measure.Memory) uint64 { return m.HWM }))
		}
		for _, c := range skipped {
			fmt.Printf("| %s | 0 | SKIPPED: %s | | | | | | | | | |\n", c.name, cell(c.target.skip))
		}
		var lossy []string
		for _, c := range prof {
			var lost, dropped uint64
			for _, r := range results[c] {
				lost += r.lost
				dropped += r.dropped
			}
			if lost > 0 || dropped > 0 {
				lossy = append(lossy, fmt.Sprintf("%s: %d records lost, %d samples dropped", c.name, lost, dropped))
			}
		}
		if len(lossy) > 0 {
			fmt.Printf("\nLosses over the windows (the samples columns undercount): %s\n", strings.Join(lossy, "; "))
		}
	}
	if len(spans) > 0 {
		fmt.Printf("\nThe collector taking %d spans/s over OTLP/gRPC and exporting them over OTLP/gRPC to a sink (%s; %s warm-up, %s window):\n\n", t.spanRate, t.medians(), t.warmup, t.window)
		fmt.Println("| row | runs | spans/s accepted | spans/s at the sink | CPU, % of a core (min–max) | CPU ms per 1k spans (min–max) | RSS MiB | RssAnon | RssFile | peak RSS (VmHWM) MiB |")
		fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
		for _, c := range spans {
			ok, runs := okResults(results[c])
			if len(ok) == 0 {
				fmt.Printf("| %s | %s | %s | | | | | | | |\n", c.name, runs, failedCell(results[c]))
				continue
			}
			fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.name, runs,
				f0(med(ok, func(r result) float64 { return perSec(r.spansIn, r.wall) })),
				f0(med(ok, func(r result) float64 { return perSec(r.spansSink, r.wall) })),
				cpuCell(ok),
				spreadCell(ok, func(r result) float64 { return perK(r.cpu, r.spansIn) }),
				memCell(ok, func(m measure.Memory) uint64 { return m.RSS }),
				memCell(ok, func(m measure.Memory) uint64 { return m.RSSAnon }),
				memCell(ok, func(m measure.Memory) uint64 { return m.RSSFile }),
				memCell(ok, func(m measure.Memory) uint64 { return m.HWM }))
		}
		t.printRatio(spans, results)
	}
	var failures []string
	for _, c := range cases {
		for i, r := range results[c] {
			if r.err != nil {
				failures = append(failures, fmt.Sprintf("%s, its run %d: %v", c.name, i+1, r.err))
			}
		}
	}
	if len(failures) > 0 {
		fmt.Printf("\nFailed runs (not in the medians):\n")
		for _, f := range failures {
			fmt.Printf("- %s\n", strings.ReplaceAll(f, "\n", "\n  "))
		}
	}
}

// printRatio prints perfprof's span row over the stock receiver's.
func (t *tool) printRatio(spans []*costCase, results map[*costCase][]result) {
	var pp, stock []result
	for _, c := range spans {
		ok, _ := okResults(results[c])
		if c.kind == kindSpansPerfprof {
			pp = ok
		} else {
			stock = ok
		}
	}
	if len(pp) == 0 || len(stock) == 0 {
		return
	}
	ratio := func(f func(r result) float64) string {
		a, b := med(pp, f), med(stock, f)
		if b == 0 {
			return "–"
		}
		return fmt.Sprintf("×%.2f", a/b)
	}
	fmt.Printf("\nperfprof / stock otlp receiver (ratios of the medians): CPU %s, CPU per 1k spans %s, RSS %s, peak RSS %s\n",
		ratio(result.cpuPct),
		ratio(func(r result) float64 { return perK(r.cpu, r.spansIn) }),
		ratio(func(r result) float64 { return float64(r.mem.RSS) }),
		ratio(func(r result) float64 { return float64(r.mem.HWM) }))
}

// medians says what the cells are.
func (t *tool) medians() string {
	if t.rounds == 1 {
		return "one round"
	}
	return fmt.Sprintf("medians of %d rounds", t.rounds)
}

// okResults returns the runs that succeeded and the runs cell: "3", or
// "2 of 3" when some failed.
func okResults(rs []result) ([]result, string) {
	var ok []result
	for _, r := range rs {
		if r.err == nil {
			ok = append(ok, r)
		}
	}
	if len(ok) == len(rs) {
		return ok, fmt.Sprint(len(rs))
	}
	return ok, fmt.Sprintf("%d of %d", len(ok), len(rs))
}

// failedCell is the text of a row none of whose runs succeeded.
func failedCell(rs []result) string {
	for _, r := range rs {
		if r.err != nil {
			return "FAILED: " + cell(r.err.Error())
		}
	}
	return "not run (interrupted)"
}

// cell is the first line of s, fit for a markdown table cell.
func cell(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return strings.ReplaceAll(s, "|", `\|`)
}

func cpuCell(rs []result) string {
	return "**" + strings.Replace(spreadCell(rs, result.cpuPct), " ", "** ", 1)
}

// spreadCell is the median of f over rs and its min–max.
func spreadCell(rs []result, f func(result) float64) string {
	v := values(rs, f)
	return fmt.Sprintf("%.2f (%.2f–%.2f)", medianOf(v), slices.Min(v), slices.Max(v))
}

func memCell(rs []result, f func(measure.Memory) uint64) string {
	return fmt.Sprintf("%.1f", med(rs, func(r result) float64 { return mib(f(r.mem)) }))
}

func f0(v float64) string { return fmt.Sprintf("%.0f", v) }
func f2(v float64) string { return fmt.Sprintf("%.2f", v) }

func values(rs []result, f func(result) float64) []float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	return v
}

func med(rs []result, f func(result) float64) float64 { return medianOf(values(rs, f)) }

func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}
