// Command cost measures the collector's own cost in steady state: its CPU
// and memory while it profiles a running process with the receiver's
// default configuration, while it profiles nothing, and while it takes a
// steady load of spans, side by side with the stock otlp receiver under the
// same load.
//
//	go run ./test/cost [-rounds 3] [-warmup 15s] [-window 30s]
//	    [-targets c-fp,c-nofp,c-short,go,node,jvm] [-freqs 99,999] [-idle] [-spans]
//	    [-span-rate 5000] [-collector PATH]
//
// # Rows
//
// Each row is a case; each run of a case starts its processes afresh,
// starts the collector (-collector, by default the one `make build` makes),
// waits -warmup after the collector is ready, then measures over -window.
//
//	TARGET-HZ      the collector profiles one target process at HZ (each
//	               of -freqs), with the receiver's default configuration:
//	               only targets (its pid) and frequency set; the profiles
//	               go to the tracefile exporter. Targets (-targets):
//	                 c-fp    a C program, two threads working through three
//	                         levels of its own functions into libz and libc
//	                         (internal/testchild/nofp/nofp.c), built with
//	                         -fno-omit-frame-pointer;
//	                 c-nofp  the same built as gcc builds by default (-O2, no
//	                         frame pointers), as testchild.NoFP builds it;
//	                 c-short c-nofp's program as a stream of processes,
//	                         each killed after 1 s, the next started at
//	                         once; the receiver selects them by executable
//	                         name: what short-lived processes cost
//	                         (discovery, attach, each process's maps);
//	                 go      a Go service (internal/testchild/otelhttpsvc):
//	                         net/http with the otelhttp handler and the OTel
//	                         Go SDK (its spans go to this tool's sink, not
//	                         to the collector), GOMAXPROCS=2, driven by two
//	                         clients of its own;
//	                 node    a Node.js service in miniature: three threads
//	                         burning in JS functions that V8 keeps
//	                         recompiling, with --perf-basic-prof
//	                         (internal/profiler/testdata/jitburn.js);
//	                 jvm     a JVM: two threads burning in JIT-compiled
//	                         methods (test/e2e/testdata/JitBurn.java), with
//	                         the first JDK found (17, 21, 25), no flags.
//	               Every target keeps about two CPUs busy: on this 2-CPU
//	               machine the collector shares the CPUs with it.
//	idle           the same collector configuration with no process to
//	               profile (targets: an executable name no process has):
//	               the fixed costs, discovery scanning /proc every second,
//	               the eBPF programs loaded, the reports.
//	spans-perfprof spangen (internal/testchild/spangen: the OTel Go SDK,
//	               batch span processor, OTLP/gRPC) sends -span-rate spans
//	               a second to perfprof's receiver, with span ingest on
//	               (protocols.grpc) and no process to sample, in a traces
//	               pipeline whose otlp_grpc exporter sends them to a real
//	               OTLP/gRPC server of this tool that counts and drops
//	               them;
//	spans-otlp     the same load through the stock otlp receiver of the
//	               same collector build, to the same kind of sink, through
//	               the same exporter. A line below their table gives
//	               the ratios perfprof / stock of the medians.
//
// Without -targets, -idle or -spans every row is run; with any of them,
// only the rows they select (-targets picks the target rows, -freqs their
// frequencies; -targets none for none).
//
// Runs are interleaved: every round runs every case once, the order rotated
// by one each round, so that drift in the machine's load reaches all cases
// alike.
//
// # What is measured
//
// Over the window, of the collector process:
//
//   - CPU: the run time of its threads from /proc/PID/task/TID/schedstat,
//     in nanoseconds, as % of one core over the window's wall time
//     (utime+stime of /proc/PID/stat counts 10 ms ticks: steps of 0.05% of
//     a core over a 20 s window, as large as the differences to measure at
//     99 Hz; the collector's threads live as long as it does);
//   - memory, from /proc/PID/status at the end of the window: VmRSS, its
//     split into RssAnon (heap, stacks) and RssFile (the binary and
//     libraries mapped), VmHWM, the peak RSS over the whole run, start-up
//     included, and VmPin, memory pinned outside RSS: the perf rings
//     (the eBPF programs' maps are kernel memory, in no figure here);
//   - the target's CPU time over the window, in cores (its utime+stime
//     over the wall time): the samples to expect are about that × HZ;
//   - from the collector's own metrics (its Prometheus endpoint, internal
//     telemetry at level basic): the samples it took
//     (receiver_perfprof_samples, on-CPU), its off-CPU samples, records lost
//     and samples dropped; the spans its receiver accepted and its exporter
//     sent; and the spans the sink received. CPU per 1000 samples or spans
//     divides the window's CPU by them.
//
// The tables give, per row, the median over the runs that succeeded and,
// for CPU and CPU per 1000, the min–max spread. A run fails, and is shown as failed with the
// reason, when the collector does not start, when it or the load exits,
// when no samples were taken of a target, or when no span reached the sink;
// a target this machine cannot run (no JDK, no node) is a skipped row, with
// the reason.
//
// The window should span whole report intervals (10 s by default), since a
// report's work is a large part of the collector's CPU: the defaults
// (15 s of warm-up, 30 s windows) do. Measure on a quiet machine: on two
// CPUs the collector shares them with its target.
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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/perfprof/perfprof/test/measure"
)

// spanThreads are spangen's worker threads: its OS threads sleep between
// spans, so fewer threads leave more of the CPUs to the collector.
const spanThreads = 2

type caseKind int

const (
	kindTarget caseKind = iota
	kindIdle
	kindSpansPerfprof
	kindSpansOTLP
)

// costCase is a row of the tables.
type costCase struct {
	name   string
	kind   caseKind
	target *target // kindTarget
	hz     int     // kindTarget
}

type tool struct {
	root, tmp string
	collector string
	spangen   string
	rounds    int
	warmup    time.Duration
	window    time.Duration
	spanRate  int
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cost:", err)
		os.Exit(1)
	}
}

func run() error {
	rounds := flag.Int("rounds", 3, "rounds; each runs every row once")
	warmup := flag.Duration("warmup", 15*time.Second, "wait this long after the collector is ready before measuring")
	window := flag.Duration("window", 30*time.Second, "measure over this long")
	targets := flag.String("targets", strings.Join(targetNames, ","), "target rows: comma-separated of "+strings.Join(targetNames, ", ")+"; none for none")
	freqs := flag.String("freqs", "99,999", "sampling frequencies of the target rows, Hz")
	idle := flag.Bool("idle", true, "the idle row: the collector with no process to profile")
	spans := flag.Bool("spans", true, "the span rows: perfprof's receiver and the stock otlp receiver under the same span load")
	spanRate := flag.Int("span-rate", 5000, "spans per second of the span rows")
	collector := flag.String("collector", "", "collector binary (default <module root>/_build/otelcol-perfprof)")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if *rounds < 1 || *warmup < 0 || *window < time.Second || *spanRate < 1 {
		return errors.New("-rounds and -span-rate must be at least 1, -window at least 1s, -warmup not negative")
	}
	// Selectors given pick the rows; none given, every row.
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	selecting := set["targets"] || set["idle"] || set["spans"]
	wantIdle, wantSpans := *idle && (!selecting || set["idle"]), *spans && (!selecting || set["spans"])
	var names []string
	if !selecting || set["targets"] {
		for _, n := range strings.Split(*targets, ",") {
			n = strings.TrimSpace(n)
			if n == "" || n == "none" {
				continue
			}
			if !slices.Contains(targetNames, n) {
				return fmt.Errorf("-targets: unknown target %q (want %s)", n, strings.Join(targetNames, ", "))
			}
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	var hzs []int
	for _, f := range strings.Split(*freqs, ",") {
		hz, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || hz < 1 || hz > 10000 {
			return fmt.Errorf("-freqs: %q is not a frequency in 1..10000 Hz", f)
		}
		if !slices.Contains(hzs, hz) {
			hzs = append(hzs, hz)
		}
	}
	if len(names) == 0 && !wantIdle && !wantSpans {
		return errors.New("no rows selected")
	}

	t := &tool{rounds: *rounds, warmup: *warmup, window: *window, spanRate: *spanRate}
	var err error
	if t.root, err = measure.ModuleRoot(); err != nil {
		return err
	}
	if t.collector, err = measure.Collector(t.root, *collector); err != nil {
		return err
	}
	if len(names) > 0 || wantIdle {
		maxHz := slices.Max(hzs)
		if len(names) == 0 {
			maxHz = 99
		}
		if err := measure.CheckPerfEvents(uint64(maxHz)); err != nil {
			return err
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if t.tmp, err = os.MkdirTemp("", "perfprof-cost-"); err != nil {
		return err
	}
	defer os.RemoveAll(t.tmp)

	tgs, err := t.prepareTargets(ctx, names)
	if err != nil {
		return err
	}
	if wantSpans {
		t.spangen = filepath.Join(t.tmp, "spangen")
		build := exec.CommandContext(ctx, "go", "build", "-o", t.spangen, "./internal/testchild/spangen")
		build.Dir = t.root
		if err := t.runBuild(build); err != nil {
			return err
		}
	}

	// The rows, in table order; the skipped ones are not run.
	var cases, skipped []*costCase
	if wantIdle {
		cases = append(cases, &costCase{name: "idle", kind: kindIdle})
	}
	for _, tg := range tgs {
		for _, hz := range hzs {
			c := &costCase{name: fmt.Sprintf("%s-%d", tg.name, hz), kind: kindTarget, target: tg, hz: hz}
			if tg.skip != "" {
				skipped = append(skipped, c)
				continue
			}
			cases = append(cases, c)
		}
	}
	if wantSpans {
		cases = append(cases, &costCase{name: "spans-perfprof", kind: kindSpansPerfprof}, &costCase{name: "spans-otlp", kind: kindSpansOTLP})
	}

	t.printHeader(cases, skipped, tgs)
	start := time.Now()
	results := map[*costCase][]result{}
rounds:
	for r := 0; r < t.rounds && len(cases) > 0; r++ {
		for i := range cases {
			c := cases[(i+r)%len(cases)]
			res := t.runCase(ctx, c)
			if ctx.Err() != nil {
				break rounds // the run cut short is not counted
			}
			results[c] = append(results[c], res)
			logRun(r+1, t.rounds, c, res)
		}
	}
	t.printTables(cases, skipped, results)
	fmt.Printf("\nload average at the end: %s\nrun time: %s (%d rounds × %d rows)\n",
		measure.LoadAvg(), time.Since(start).Round(time.Second), t.rounds, len(cases))
	if ctx.Err() != nil {
		return errors.New("interrupted: the tables hold the runs that finished")
	}
	return nil
}

// logRun prints one run as it finishes, on standard error.
func logRun(round, rounds int, c *costCase, r result) {
	msg := fmt.Sprintf("round %d/%d %-15s ", round, rounds, c.name)
	if r.err != nil {
		fmt.Fprintf(os.Stderr, "%sFAILED: %v\n", msg, r.err)
		return
	}
	msg += fmt.Sprintf("CPU %.2f%% of a core, RSS %.1f MiB (peak %.1f)", r.cpuPct(), mib(r.mem.RSS), mib(r.mem.HWM))
	switch c.kind {
	case kindTarget:
		msg += fmt.Sprintf(", target %.2f cores, %.0f samples/s, %.2f ms per 1k samples", r.targetCores(), perSec(r.samples, r.wall), perK(r.cpu, r.samples))
		if r.lost > 0 || r.dropped > 0 {
			msg += fmt.Sprintf(", LOST %d records, DROPPED %d samples", r.lost, r.dropped)
		}
	case kindSpansPerfprof, kindSpansOTLP:
		msg += fmt.Sprintf(", %.0f spans/s in, %.0f sent, %.0f at the sink, %.2f ms per 1k spans",
			perSec(r.spansIn, r.wall), perSec(r.spansSent, r.wall), perSec(r.spansSink, r.wall), perK(r.cpu, r.spansIn))
	}
	fmt.Fprintln(os.Stderr, msg)
}

func mib(kb uint64) float64 { return float64(kb) / 1024 }
