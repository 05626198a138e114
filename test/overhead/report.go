package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/perfprof/perfprof/test/measure"
)

// printHeader prints how the measurement is run: the exact command line,
// the effective flags, and the commands of the child and the profilers.
func (h *harness) printHeader() {
	fmt.Printf("command: %s\n", measure.CommandLine("./test/overhead"))
	names := make([]string, len(h.modes))
	for i, m := range h.modes {
		names[i] = m.name
	}
	fmt.Printf("flags:   -rounds %d -child %s -work %d", h.rounds, h.child, h.work)
	if h.hop >= 0 {
		fmt.Printf(" -hop %d", h.hop)
	}
	fmt.Printf(" -modes %s", strings.Join(names, ","))
	if h.collector != "" {
		fmt.Printf(" -collector %s", h.collector)
	}
	fmt.Println()
	fmt.Printf("machine: %s, %d CPUs, %s, load average %s\n", measure.Kernel(), runtime.NumCPU(), runtime.Version(), measure.LoadAvg())
	fmt.Printf("child:   spin %s   (internal/testchild/spin, built with go build", strings.Join(h.childArgs(), " "))
	if h.child == childPingpong {
		fmt.Print("; two threads on one CPU handing a token through pipes")
	}
	fmt.Println(")")
	printed := map[modeKind]bool{}
	for _, m := range h.modes {
		if printed[m.kind] {
			continue
		}
		printed[m.kind] = true
		switch m.kind {
		case kindPerfprof:
			fmt.Printf("%s: %s %s   with CONFIG:\n", "perfprof", h.collector, strings.Join(measure.CollectorArgs("CONFIG"), " "))
			sched, ring, scope, schedOpts, notes := h.configPlaceholders()
			cfg := fmt.Sprintf(collectorConfig, "PID", "HZ", reportInterval, "PORT", sched, ring, scope, schedOpts)
			fmt.Print("\t" + strings.ReplaceAll(strings.TrimSuffix(cfg, "\n"), "\n", "\n\t") + "\n")
			for _, n := range notes {
				fmt.Printf("\t(%s)\n", n)
			}
		case kindPerfRecord:
			args := perfRecordArgs("PID", "HZ", "TMP/perf.data", "TMP/perf-ctl", "TMP/perf-ack", m.unwind == "dwarf")
			fmt.Printf("perf:    %s %s   (%s)\n", h.perfPath, strings.Join(args, " "), perfVersion(h.perfPath))
		}
	}
	fmt.Println()
}

// configPlaceholders returns what the header's collector configuration
// shows for sched.enabled and ring_pages across the perfprof modes, and
// notes explaining the placeholders.
func (h *harness) configPlaceholders() (sched any, ring, scope, schedOpts string, notes []string) {
	on, off, rings, system, process, stacks := false, false, false, false, false, false
	for _, m := range h.modes {
		if m.kind != kindPerfprof {
			continue
		}
		on = on || !m.noSched
		off = off || m.noSched
		rings = rings || m.ringPages > 0
		system = system || m.system
		process = process || !m.system
		stacks = stacks || m.gap != "" || m.every > 0
	}
	for _, m := range h.modes {
		if m.kind == kindPerfprof && m.unwind != "" {
			notes = append(notes, "the *-fp-* modes add unwind: frame_pointer, the *-dwarf-* modes unwind: dwarf; the others unwind as by default (auto)")
			break
		}
	}
	if stacks {
		schedOpts = ", STACK_OPTIONS"
		notes = append(notes, "STACK_OPTIONS: stack_min_gap: DURATION in the *-gapDURATION-* modes, stack_every: N in the *-everyN-* modes, nothing in the others")
	}
	scope = "process"
	switch {
	case system && process:
		scope = "SCOPE"
		notes = append(notes, "SCOPE: system in the perfprof-system-* modes, process in the others")
	case system:
		scope = "system"
	}
	sched = on
	if on && off {
		sched = "SCHED"
		notes = append(notes, "SCHED: false in the perfprof-nosched-* modes, true in the others")
	}
	for _, m := range h.modes {
		if m.runStats {
			ring = "\n    ebpf_run_stats: true"
			break
		}
	}
	if rings {
		ring += "\n    ring_pages: PAGES"
		notes = append(notes, "ring_pages: PAGES only in the perfprof-*ringPAGES-* modes; the others have the receiver's default")
	}
	return sched, ring, scope, schedOpts, notes
}

// printTable prints one line per mode.
func (h *harness) printTable(results map[string][]result) {
	var base time.Duration
	if rs := results["none"]; len(rs) > 0 {
		base = median(rs, func(r result) time.Duration { return r.childCPU })
	}
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\truns\tchild CPU s\tslowdown\tslowdown\tmin s\tmax s\tsamples\tprofiler CPU/1k samples\tprofiler peak RSS\t")
	fmt.Fprintln(tw, "\t\t(median)\t\t(paired)\t\t\t(median)\tms (median)\tMiB (median)\t")
	var lost []string
	for _, m := range h.modes {
		rs := results[m.name]
		cpu := median(rs, func(r result) time.Duration { return r.childCPU })
		lo := slices.MinFunc(rs, func(a, b result) int { return int(a.childCPU - b.childCPU) }).childCPU
		hi := slices.MaxFunc(rs, func(a, b result) int { return int(a.childCPU - b.childCPU) }).childCPU
		slow, paired := "n/a", "n/a"
		if base > 0 {
			slow = fmt.Sprintf("%+.2f%%", (cpu.Seconds()/base.Seconds()-1)*100)
			// Runs of one round are next to each other in time: the
			// median of per-round ratios is less sensitive to drift.
			none := results["none"]
			ratios := make([]float64, len(rs))
			for r := range rs {
				ratios[r] = rs[r].childCPU.Seconds()/none[r].childCPU.Seconds() - 1
			}
			paired = fmt.Sprintf("%+.2f%%", medianOf(ratios)*100)
		}
		samples, perK, rss := "-", "-", "-"
		if m.kind != kindNone {
			samples = strconv.FormatUint(medianU(rs, func(r result) uint64 { return r.samples }), 10)
			perK = fmt.Sprintf("%.2f", medianF(rs, func(r result) float64 { return ms(r.profCPU) / (float64(r.samples) / 1000) }))
			rss = fmt.Sprintf("%.1f", float64(medianU(rs, func(r result) uint64 { return r.rssKB }))/1024)
			var n uint64
			for _, r := range rs {
				n += r.lost
			}
			if n > 0 {
				lost = append(lost, fmt.Sprintf("%s: %d records lost over %d runs", m.name, n, len(rs)))
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%s\t%s\t%.3f\t%.3f\t%s\t%s\t%s\t\n",
			m.name, len(rs), cpu.Seconds(), slow, paired, lo.Seconds(), hi.Seconds(), samples, perK, rss)
	}
	tw.Flush()

	// The collector's fixed costs (discovery, tickers) over a run are about
	// the same at any frequency, so the difference between two frequencies
	// (with the same options) is the cost of the samples alone.
	groups := map[[2]int][]mode{} // by noSched, ringPages
	var order [][2]int
	for _, m := range h.modes {
		if m.kind == kindPerfprof {
			k := [2]int{0, m.ringPages}
			if m.noSched {
				k[0] = 1
			}
			if groups[k] == nil {
				order = append(order, k)
			}
			groups[k] = append(groups[k], m)
		}
	}
	for _, k := range order {
		pp := groups[k]
		if len(pp) < 2 {
			continue
		}
		slices.SortFunc(pp, func(a, b mode) int { return a.hz - b.hz })
		lo, hi := results[pp[0].name], results[pp[len(pp)-1].name]
		cpuLo := median(lo, func(r result) time.Duration { return r.profCPU })
		cpuHi := median(hi, func(r result) time.Duration { return r.profCPU })
		nLo := medianU(lo, func(r result) uint64 { return r.samples })
		nHi := medianU(hi, func(r result) uint64 { return r.samples })
		if nHi > nLo {
			fmt.Printf("\nmarginal collector CPU per 1000 samples (%s vs %s, medians): %.2f ms (%.1f ms vs %.1f ms for %d vs %d samples)\n",
				pp[len(pp)-1].name, pp[0].name, ms(cpuHi-cpuLo)/(float64(nHi-nLo)/1000), ms(cpuHi), ms(cpuLo), nHi, nLo)
		}
	}

	h.printSwitchTable(results)
	h.printSchedCost(results)

	if len(lost) > 0 {
		fmt.Printf("\nLOST RECORDS (sample counts are low): %s\n", strings.Join(lost, "; "))
	}
}

// printSwitchTable prints the context-switch view of the runs: the child's
// switch rate and the profiler's CPU time per second of the child's run and
// per 1000 of its switches.
func (h *harness) printSwitchTable(results map[string][]result) {
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tchild wall s\tswitches/s\tprofiler CPU ms\tprofiler CPU ms\tprofiler CPU ms\tlost\toff-CPU\teBPF lost\teBPF ns\teBPF runs\teBPF CPU\t")
	fmt.Fprintln(tw, "\t(median)\t(median)\tper run (median)\tper child s (median)\tper 1k switches (median)\t(sum)\tsamples (median)\t(sum)\tper run (median)\t(median)\t% of child CPU (median)\t")
	for _, m := range h.modes {
		rs := results[m.name]
		wall := median(rs, func(r result) time.Duration { return r.childWall })
		rate := medianF(rs, result.switchRate)
		cpu, perS, perK, lost, off, offLost := "-", "-", "-", "-", "-", "-"
		if m.kind != kindNone {
			cpu = fmt.Sprintf("%.1f", ms(median(rs, func(r result) time.Duration { return r.profCPU })))
			perS = fmt.Sprintf("%.2f", medianF(rs, func(r result) float64 { return ms(r.profCPU) / r.childWall.Seconds() }))
			perK = fmt.Sprintf("%.3f", medianF(rs, func(r result) float64 { return ms(r.profCPU) / (float64(max(r.switches, 1)) / 1000) }))
			var n uint64
			for _, r := range rs {
				n += r.lost
			}
			lost = strconv.FormatUint(n, 10)
		}
		if m.kind == kindPerfprof {
			off = fmt.Sprintf("%.0f", medianF(rs, func(r result) float64 { return float64(r.offCPU) }))
			var n uint64
			for _, r := range rs {
				n += r.offLost
			}
			offLost = strconv.FormatUint(n, 10)
		}
		// The programs run in the child's threads, on its CPU time.
		bpfNs, bpfRuns, bpfShare := "-", "-", "-"
		if runs := medianF(rs, func(r result) float64 { return float64(r.bpfRuns) }); runs > 0 {
			bpfNs = fmt.Sprintf("%.0f", medianF(rs, func(r result) float64 { return float64(r.bpfNs) / float64(max(r.bpfRuns, 1)) }))
			bpfRuns = fmt.Sprintf("%.0f", runs)
			bpfShare = fmt.Sprintf("%.4f", medianF(rs, func(r result) float64 { return 100 * float64(r.bpfNs) / float64(max(r.childCPU, 1)) }))
		}
		fmt.Fprintf(tw, "%s\t%.3f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", m.name, wall.Seconds(), rate, cpu, perS, perK, lost, off, offLost, bpfNs, bpfRuns, bpfShare)
	}
	tw.Flush()
}

// printSchedCost compares every perfprof mode with sched capture with its
// twin without, when both ran.
func (h *harness) printSchedCost(results map[string][]result) {
	first := true
	for _, m := range h.modes {
		if m.kind != kindPerfprof || m.noSched {
			continue
		}
		on, off := results[m.name], results[m.twin()]
		if len(off) == 0 || len(off) != len(on) {
			continue
		}
		if first {
			fmt.Println()
			first = false
		}
		childOn := median(on, func(r result) time.Duration { return r.childCPU })
		childOff := median(off, func(r result) time.Duration { return r.childCPU })
		ratios := make([]float64, len(on))
		for r := range on {
			ratios[r] = on[r].childCPU.Seconds()/off[r].childCPU.Seconds() - 1
		}
		cpuOn := median(on, func(r result) time.Duration { return r.profCPU })
		cpuOff := median(off, func(r result) time.Duration { return r.profCPU })
		sw := medianU(on, func(r result) uint64 { return r.switches })
		fmt.Printf("sched capture, %s vs %s (medians): child CPU %+.2f%% (paired %+.2f%%); collector CPU %.1f ms vs %.1f ms per run, %+.1f ms = %.3f ms per 1000 child context switches (%d per run)\n",
			m.name, m.twin(), (childOn.Seconds()/childOff.Seconds()-1)*100, medianOf(ratios)*100,
			ms(cpuOn), ms(cpuOff), ms(cpuOn-cpuOff), ms(cpuOn-cpuOff)/(float64(max(sw, 1))/1000), sw)
	}
}

func median(rs []result, f func(result) time.Duration) time.Duration {
	return time.Duration(medianF(rs, func(r result) float64 { return float64(f(r)) }))
}

func medianU(rs []result, f func(result) uint64) uint64 {
	return uint64(medianF(rs, func(r result) float64 { return float64(f(r)) }) + 0.5)
}

// medianF is the median of f over rs.
func medianF(rs []result, f func(result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	return medianOf(v)
}

// medianOf returns the median of v (the mean of the middle two for an even
// count), sorting v.
func medianOf(v []float64) float64 {
	slices.Sort(v)
	n := len(v)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

func perfVersion(perf string) string {
	out, err := exec.Command(perf, "--version").Output()
	if err != nil {
		return "perf version unknown"
	}
	return strings.TrimSpace(string(out))
}
