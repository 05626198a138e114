// Command overhead measures how much sampling slows down a CPU-bound
// process, and what the sampler itself costs.
//
//	go run ./test/overhead [-rounds 5] [-child spin|pingpong|nofp] [-work N] [-modes none,perfprof-99,perfprof-999,perf-record-999]
//
// The workload is internal/testchild/spin, which does a fixed amount of work
// at a stack depth of about ten frames, after waiting on stdin until the
// profiler has attached. -child selects the work:
//
//	spin       (the default) a single-threaded Go program doing integer
//	           hashing: -work rounds, 1000000 by default, about 2 s of CPU;
//	pingpong   context switches: two threads, pinned to one CPU, hand a
//	           token back and forth -work round trips (default 50000, about
//	           2 s) through a pair of pipes with blocking read(2)/write(2),
//	           hashing a little between hand-offs (-hop passes, default
//	           360; -hop 0 is the bare hand-off): about 50 000 context
//	           switches per second on a 2-CPU VM, half of them voluntary (in
//	           pipe_read), half the woken thread preempting the writer. It
//	           is the load on which sched capture (a sample with a stack at
//	           every switch) costs the most;
//	nofp       C built as gcc builds it by default (-O2, no frame
//	           pointers; internal/testchild/nofp/nofp.c): one thread (the
//	           other CPU is the profiler's, as with spin) compressing,
//	           sorting and checksumming through three levels of its own
//	           functions into Debian's libz and libc, -work rounds (default
//	           15000, about 2 s of CPU). It is the load that needs
//	           unwinding from stack copies.
//
// Each run starts a fresh child under one mode:
//
//	none             the child alone (the baseline);
//	perfprof-HZ      the real collector (-collector, built by `make build`)
//	                 samples the child's pid at HZ, process scope, with
//	                 sched capture on as by default (sched: {enabled: true}:
//	                 off-CPU profiling from context switches), and drops the
//	                 profiles into the debug exporter;
//	perfprof-nosched-HZ
//	                 the same with sched: {enabled: false}, on-CPU samples
//	                 only; perfprof-HZ against it is the cost of sched
//	                 capture;
//	perfprof-norecover-HZ
//	                 the same with recover_leaf_caller: false (no user stack
//	                 copy per sample)
//	perfprof-nobpf-HZ, perfprof-nosched-nobpf-HZ,
//	perfprof-system-HZ (scope: system: per-CPU events), perfprof-system-nosched-HZ
//	                 the same with ebpf: off (no program reads goroutine
//	                 labels at each sample)
//	perfprof-fp-HZ, perfprof-dwarf-HZ (after nobpf)
//	                 the same with unwind: frame_pointer (the kernel's
//	                 frame-pointer chains, 512 bytes of stack copied for
//	                 recover_leaf_caller) or unwind: dwarf; without them
//	                 the default, auto (16 KiB of stack per sample);
//	perfprof-ringN-HZ, perfprof-nosched-ringN-HZ
//	                 the same with ring_pages: N (a power of two; without
//	                 it the receiver's default, 64 pages, 256 KiB per CPU),
//	                 for when records are lost;
//	perfprof-gapDURATION-HZ, perfprof-everyN-HZ (after ringN, in this order)
//	                 the same with sched.stack_min_gap: DURATION (gap0s:
//	                 a stack at every switch-out) or sched.stack_every: N;
//	(-ebpf-run-stats adds ebpf_run_stats: true to every perfprof mode: the
//	eBPF columns then say what the programs cost per run, and the
//	slowdowns include the statistics' own cost.)
//	perf-record-HZ   `perf record -e cpu-clock -F HZ -g -p PID` writes the
//	                 samples to a temporary file, for comparison (it also
//	                 takes kernel callchains; the collector, by default,
//	                 user ones only);
//	perf-record-dwarf-HZ
//	                 the same with --call-graph dwarf for -g: 8 KiB of user
//	                 stack per sample, unwound when perf report reads it;
//	perf-record-system-HZ
//	                 the same with -a for -p PID: every CPU, as
//	                 system-wide profilers sample (its samples column
//	                 counts every process's samples).
//
// Runs are interleaved: every round runs every mode once (the order rotated
// by one each round), so drift in the machine's speed or load reaches all
// modes alike. One untimed warm-up run of the child comes first. Profilers
// are started per run and their start-up is not measured.
//
// # Reading the output
//
// Standard output has the command line, the commands of the child and the
// profilers, and at the end one table line per mode; standard error has one
// line per run, as the runs finish.
//
// "child CPU" is the child's user+system CPU time from its rusage, not wall
// time: it grows only by what sampling costs inside the child (the timer
// interrupt, the kernel's stack walk, cache and TLB disturbance), not by
// waiting for a CPU the profiler took. "slowdown" is the median child CPU of
// a mode over the median of none, minus one; "slowdown (paired)" is the
// median over rounds of the mode's run over the none run of the same round,
// minus one, which drift between rounds disturbs less. Compare both with the
// min/max spread of none: a slowdown well inside that spread is noise.
//
// The profiler columns are about the profiling process itself, which runs
// beside the child (on another CPU when one is free):
//
//   - "samples" is the number of samples the profiler took of the child: the
//     collector's own receiver_perfprof_samples counter, read from its
//     Prometheus endpoint at the end of a run, or the SAMPLE count of
//     `perf report --stats` for perf record. It should be about child CPU
//     seconds × HZ.
//   - "profiler CPU/1k samples" is the profiler's CPU time from the moment it was
//     attached (the child still waiting) until all samples were handled,
//     divided by samples/1000. For the collector, "handled" means the child
//     was released and its last profiles were exported; the CPU time is the
//     sum of /proc/PID/task/*/schedstat, read then and after attaching
//     (nanosecond resolution; /proc/PID/stat counts 10 ms ticks, too coarse
//     for runs costing tens of milliseconds). It includes the collector's
//     fixed costs for those seconds (process discovery every second, the
//     report ticker), which weigh more at 99 Hz than at 999 Hz; the
//     "marginal" line below the table removes them by comparing two
//     perfprof frequencies with the same options. For perf record it is
//     perf's rusage minus the schedstat value after it enabled its events,
//     so it includes perf finishing its file (without build-id collection,
//     --no-buildid).
//   - "peak RSS" is the collector's VmHWM from /proc/PID/status before it is
//     stopped, or perf's rusage maxrss.
//
// A second table is about context switches, the load of sched capture.
// "child wall s" is the child's run time, from its go line to its exit;
// "switches/s" is its context switches (voluntary and involuntary, all
// threads, from its rusage) over that. "profiler CPU ms" is the profiler
// CPU time above, per run and "per child s" of wall time (this is the
// collector's share of a CPU while profiling that load; the ratio is a
// little high, as the CPU time also covers the second or two the harness
// waits after the child's exit, idle but for tickers) and "per 1k
// switches" of the child. "lost" is the records the kernel dropped (its
// PERF_RECORD_LOST counts, receiver_perfprof_lost_records), summed over
// the runs of the mode; "off-CPU samples" the off-CPU samples made of the
// eBPF scheduler program's records (receiver_perfprof_off_cpu_samples; 0
// on perf's events), and "eBPF lost" the records the programs could not
// write or that were dropped (receiver_perfprof_off_cpu_dropped plus
// _ebpf_records_dropped), summed. Each other column is the median of the
// per-run values.
//
// For each perfprof-HZ mode run with its perfprof-nosched-HZ twin (same
// frequency and ring size), a "sched capture" line compares the two: the
// child's CPU time (medians, and the median of the per-round ratios) and
// the collector's CPU time, in all and per 1000 child context switches.
//
// Lost records (perf rings overflowing) are also reported below the tables
// when there are any; they mean the samples column undercounts (and, with
// sched capture, that off-CPU time is missing).
//
// The collector's internal metrics are enabled at level basic (one counter
// increment per sample) so that its sample count can be read; logs stay at
// info, where nothing is logged per sample.
//
// The harness needs perf_event_open (root, CAP_PERFMON, or a low
// kernel.perf_event_paranoid) and, for the perfprof modes, the collector
// binary; it exits non-zero saying which is missing.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/perfprof/perfprof/test/measure"
)

const defaultModes = "none,perfprof-99,perfprof-999,perf-record-999"

// modeKind says what samples the child during a run.
type modeKind int

const (
	kindNone modeKind = iota
	kindPerfprof
	kindPerfRecord
)

type mode struct {
	name string
	kind modeKind
	hz   int

	// perfprof modes only.
	system    bool   // scope: system (per-CPU events), not process
	noSched   bool   // sched: {enabled: false}
	noRecover bool   // recover_leaf_caller: false
	noBPF     bool   // ebpf: off
	unwind    string // unwind: "fp" (frame_pointer) or "dwarf", "" for the default (auto); perf-record: "dwarf" for --call-graph dwarf
	ringPages int    // ring_pages, 0 for the receiver's default
	gap       string // sched.stack_min_gap, "" for the receiver's default
	every     int    // sched.stack_every, 0 for the receiver's default
	runStats  bool   // ebpf_run_stats: true (-ebpf-run-stats)
}

// twin is the name of the perfprof mode that differs from m only in sched
// capture.
func (m mode) twin() string {
	return perfprofName(m.system, !m.noSched, m.noRecover, m.noBPF, m.unwind, m.ringPages, m.gap, m.every, m.hz)
}

func perfprofName(system, noSched, noRecover, noBPF bool, unwind string, ringPages int, gap string, every, hz int) string {
	name := "perfprof-"
	if system {
		name += "system-"
	}
	if noSched {
		name += "nosched-"
	}
	if noRecover {
		name += "norecover-"
	}
	if noBPF {
		name += "nobpf-"
	}
	if unwind != "" {
		name += unwind + "-"
	}
	if ringPages > 0 {
		name += fmt.Sprintf("ring%d-", ringPages)
	}
	if gap != "" {
		name += "gap" + gap + "-"
	}
	if every > 0 {
		name += fmt.Sprintf("every%d-", every)
	}
	return name + strconv.Itoa(hz)
}

func parseMode(s string) (mode, error) {
	s = strings.TrimSpace(s)
	if s == "none" {
		return mode{name: s, kind: kindNone}, nil
	}
	for prefix, kind := range map[string]modeKind{"perfprof-": kindPerfprof, "perf-record-": kindPerfRecord} {
		rest, ok := strings.CutPrefix(s, prefix)
		if !ok {
			continue
		}
		m := mode{name: s, kind: kind}
		if kind == kindPerfRecord {
			if r, ok := strings.CutPrefix(rest, "system-"); ok {
				m.system, rest = true, r
			}
			if r, ok := strings.CutPrefix(rest, "dwarf-"); ok {
				m.unwind, rest = "dwarf", r
			}
		}
		if kind == kindPerfprof {
			// Options before the frequency, in this order.
			if r, ok := strings.CutPrefix(rest, "system-"); ok {
				m.system, rest = true, r
			}
			if r, ok := strings.CutPrefix(rest, "nosched-"); ok {
				m.noSched, rest = true, r
			}
			if r, ok := strings.CutPrefix(rest, "norecover-"); ok {
				m.noRecover, rest = true, r
			}
			if r, ok := strings.CutPrefix(rest, "nobpf-"); ok {
				m.noBPF, rest = true, r
			}
			for _, u := range []string{"fp", "dwarf"} {
				if r, ok := strings.CutPrefix(rest, u+"-"); ok {
					m.unwind, rest = u, r
				}
			}
			if r, ok := strings.CutPrefix(rest, "ring"); ok {
				n, r, _ := strings.Cut(r, "-")
				pages, err := strconv.Atoi(n)
				if err != nil || pages < 1 || pages&(pages-1) != 0 {
					return mode{}, fmt.Errorf("mode %q: ring pages %q is not a power of two", s, n)
				}
				m.ringPages, rest = pages, r
			}
			if r, ok := strings.CutPrefix(rest, "gap"); ok {
				g, r, _ := strings.Cut(r, "-")
				if _, err := time.ParseDuration(g); err != nil {
					return mode{}, fmt.Errorf("mode %q: gap %q is not a duration", s, g)
				}
				m.gap, rest = g, r
			}
			if r, ok := strings.CutPrefix(rest, "every"); ok {
				n, r, _ := strings.Cut(r, "-")
				every, err := strconv.Atoi(n)
				if err != nil || every < 1 {
					return mode{}, fmt.Errorf("mode %q: every %q is not a count", s, n)
				}
				m.every, rest = every, r
			}
		}
		hz, err := strconv.Atoi(rest)
		if err != nil || hz < 1 || hz > 10000 {
			return mode{}, fmt.Errorf("mode %q: frequency %q is not a number of Hz in 1..10000 (perfprof options go before it: perfprof[-nosched][-ringN]-HZ)", s, rest)
		}
		m.hz = hz
		if kind == kindPerfprof && perfprofName(m.system, m.noSched, m.noRecover, m.noBPF, m.unwind, m.ringPages, m.gap, m.every, hz) != s {
			return mode{}, fmt.Errorf("mode %q: want perfprof[-system][-nosched][-norecover][-nobpf][-fp|-dwarf][-ringN][-gapDURATION][-everyN]-HZ", s)
		}
		return m, nil
	}
	return mode{}, fmt.Errorf("mode %q: want none, perfprof-HZ, perfprof-nosched-HZ, perfprof-[nosched-]ringN-HZ or perf-record-HZ", s)
}

// Workloads of the child (-child).
const (
	childSpin     = "spin"
	childPingpong = "pingpong"
	childNoFP     = "nofp"
)

// defaultWork is the default -work of each child: about 2 s here.
var defaultWork = map[string]int{childSpin: 1000000, childPingpong: 50000, childNoFP: 15000}

// result is one run of the child under one mode.
type result struct {
	childCPU  time.Duration // user+system
	childWall time.Duration // from the go line to the exit
	switches  uint64        // the child's context switches, voluntary and involuntary

	// Profiler modes only.
	samples uint64
	lost    uint64
	profCPU time.Duration // after attaching, until all samples were handled
	rssKB   uint64
	// The eBPF programs' runs and kernel time (their metrics; 0 when off
	// or without run-time statistics).
	bpfRuns, bpfNs uint64
	// Off-CPU samples made of the scheduler program's records, and the
	// records the programs lost (off_cpu_dropped, ebpf_records_dropped).
	offCPU, offLost uint64
}

type harness struct {
	child     string // childSpin or childPingpong
	work      int
	hop       int // pingpong's -hop, -1 for its default
	collector string
	perfPath  string
	spin      string // the built child
	tmp       string
	rounds    int
	modes     []mode
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "overhead:", err)
		os.Exit(1)
	}
}

func run() error {
	rounds := flag.Int("rounds", 5, "rounds; each runs every mode once")
	child := flag.String("child", childSpin, "workload: spin (CPU-bound), pingpong (about 50 000 context switches/s) or nofp (C without frame pointers, through libz and libc, two threads)")
	work := flag.Int("work", 0, "work of the child: hash rounds of spin (default 1000000 ≈ 2 s of CPU here), round trips of pingpong (default 50000 ≈ 2 s), rounds of nofp (default 15000 ≈ 2 s)")
	hop := flag.Int("hop", -1, "pingpong only: the child's -hop, hash passes between hand-offs (default the child's, 360; 0 for the highest switch rate)")
	collector := flag.String("collector", "", "collector binary (default <module root>/_build/otelcol-perfprof)")
	runStats := flag.Bool("ebpf-run-stats", false, "perfprof modes: ebpf_run_stats: true, for the eBPF columns (the kernel's BPF run-time statistics cost two clock reads per program run, which the slowdowns then include)")
	modes := flag.String("modes", defaultModes, "comma-separated modes to run: none, perfprof-HZ, perfprof-nosched-HZ, perfprof-[nosched-]ringN-HZ, perf-record-HZ")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if _, ok := defaultWork[*child]; !ok {
		return fmt.Errorf("-child %q: want spin, pingpong or nofp", *child)
	}
	if *work == 0 {
		*work = defaultWork[*child]
	}
	if *rounds < 1 || *work < 1 {
		return errors.New("-rounds and -work must be at least 1")
	}
	if *hop >= 0 && *child != childPingpong {
		return errors.New("-hop is for -child pingpong")
	}
	h := &harness{child: *child, work: *work, hop: *hop, rounds: *rounds}
	seen := map[string]bool{}
	for _, s := range strings.Split(*modes, ",") {
		m, err := parseMode(s)
		if err != nil {
			return err
		}
		m.runStats = *runStats && m.kind == kindPerfprof
		if !seen[m.name] {
			seen[m.name] = true
			h.modes = append(h.modes, m)
		}
	}

	root, err := measure.ModuleRoot()
	if err != nil {
		return err
	}
	maxHz := 0
	for _, m := range h.modes {
		maxHz = max(maxHz, m.hz)
		switch m.kind {
		case kindPerfprof:
			if h.collector == "" {
				h.collector = *collector
				if h.collector == "" {
					h.collector = filepath.Join(root, "_build", "otelcol-perfprof")
				}
				if h.collector, err = filepath.Abs(h.collector); err != nil {
					return err
				}
				if st, err := os.Stat(h.collector); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
					return fmt.Errorf("collector %s is missing or not executable: run make build first (or pass -collector)", h.collector)
				}
			}
		case kindPerfRecord:
			if h.perfPath == "" {
				if h.perfPath, err = exec.LookPath("perf"); err != nil {
					return fmt.Errorf("mode %s needs the perf tool: %w", m.name, err)
				}
			}
		}
	}
	if maxHz > 0 {
		if err := measure.CheckPerfEvents(uint64(maxHz)); err != nil {
			return err
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if h.tmp, err = os.MkdirTemp("", "perfprof-overhead-"); err != nil {
		return err
	}
	defer os.RemoveAll(h.tmp)
	h.spin = filepath.Join(h.tmp, h.child)
	build := exec.CommandContext(ctx, "go", "build", "-o", h.spin, "./internal/testchild/spin")
	if h.child == childNoFP {
		// As gcc builds C by default: -O2, no frame pointers.
		build = exec.CommandContext(ctx, "gcc", "-x", "c", "-O2", "-fomit-frame-pointer", "-pthread",
			"-o", h.spin, "internal/testchild/nofp/nofp.c", "-lz")
	}
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build the %s child: %v\n%s", h.child, err, out)
	}

	h.printHeader()
	start := time.Now()
	if _, err := h.runOnce(ctx, mode{name: "warm-up", kind: kindNone}); err != nil {
		return fmt.Errorf("warm-up run: %w", err)
	}
	results := map[string][]result{}
	for r := 0; r < h.rounds; r++ {
		for i := range h.modes {
			m := h.modes[(i+r)%len(h.modes)]
			res, err := h.runOnce(ctx, m)
			if err != nil {
				return fmt.Errorf("round %d, mode %s: %w", r+1, m.name, err)
			}
			results[m.name] = append(results[m.name], res)
			logRun(r+1, h.rounds, m, res)
		}
	}
	h.printTable(results)
	fmt.Printf("\nload average at the end: %s\nharness run time: %s (%d rounds × %d modes + warm-up)\n",
		measure.LoadAvg(), time.Since(start).Round(time.Second), h.rounds, len(h.modes))
	return nil
}

// runOnce runs one child under mode m.
func (h *harness) runOnce(ctx context.Context, m mode) (result, error) {
	c, err := startChild(ctx, h.spin, h.childArgs())
	if err != nil {
		return result{}, err
	}
	defer c.kill()

	var p profiler
	switch m.kind {
	case kindPerfprof:
		p, err = h.startCollector(ctx, c.pid, m)
	case kindPerfRecord:
		p, err = h.startPerfRecord(ctx, c.pid, m.hz, m.system, m.unwind == "dwarf")
	}
	if err != nil {
		return result{}, err
	}
	if p != nil {
		defer p.kill()
	}

	var res result
	if err = c.run(&res); err != nil {
		return result{}, err
	}
	if p != nil {
		if err := p.finish(ctx, &res); err != nil {
			return result{}, err
		}
		if res.samples == 0 {
			return result{}, fmt.Errorf("%s took no samples of the child", m.name)
		}
	}
	return res, nil
}

// profiler is a running perfprof collector or perf record, attached to the
// child.
type profiler interface {
	// finish waits, after the child exited, until the profiler has handled
	// all samples, fills in the profiler fields of res, and stops it.
	finish(ctx context.Context, res *result) error
	// kill stops the profiler if it is still running.
	kill()
}

func logRun(round, rounds int, m mode, r result) {
	msg := fmt.Sprintf("round %d/%d %-16s child %.3fs", round, rounds, m.name, r.childCPU.Seconds())
	if m.kind != kindNone {
		msg += fmt.Sprintf(", samples %d, profiler CPU %.1fms, peak RSS %.1f MiB", r.samples, ms(r.profCPU), float64(r.rssKB)/1024)
		if r.lost > 0 {
			msg += fmt.Sprintf(", LOST %d", r.lost)
		}
	}
	msg += fmt.Sprintf(", child wall %.3fs, %.0f switches/s", r.childWall.Seconds(), r.switchRate())
	fmt.Fprintln(os.Stderr, msg)
}

// switchRate is the child's context switches per second of its run.
func (r result) switchRate() float64 {
	if r.childWall <= 0 {
		return 0
	}
	return float64(r.switches) / r.childWall.Seconds()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
