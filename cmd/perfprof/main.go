// Command perfprof reads the trace files written by perfprof's tracefile
// exporter, or by dial9 (TRC v1 and legacy TOKIOTRC, raw or gzip, single
// files or directories of rotated segments), and prints what they hold:
//
//	perfprof dump FILE…      every event as JSON lines
//	perfprof report FILE…    sample counts, hot functions (per span, per route), long polls, blocking, scheduling delay
//	perfprof folded FILE…    folded stacks for flamegraph.pl and speedscope
//	perfprof pprof FILE… -o out.pb.gz   a pprof profile for go tool pprof
//	perfprof html FILE… -o out.html     a self-contained page: flamegraphs and a timeline
//
// Run "perfprof COMMAND --help" for the flags of a command.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/perfprof/perfprof/internal/analysis"
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	usage   string // argument synopsis
	help    string // more for the command's --help, after the summary
	// setup declares the command's flags on fs and returns the function
	// that runs the command once fs has parsed them.
	setup func(fs *flag.FlagSet) func(e *env, args []string) error
}

// env is what a command writes to.
type env struct {
	stdout, stderr io.Writer
}

var commands []*command

func register(c *command) { commands = append(commands, c) }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "perfprof: read perfprof and dial9 trace files (TRC v1, TOKIOTRC; raw, gzip, a directory of segments, a bucket downloaded with its keys, or a keep manifest)\n\n")
	fmt.Fprintf(w, "Usage: perfprof COMMAND [flags] FILE|DIR|MANIFEST.json…\n\nCommands:\n")
	cs := append([]*command(nil), commands...)
	sort.Slice(cs, func(i, j int) bool { return cs[i].name < cs[j].name })
	for _, c := range cs {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun \"perfprof COMMAND --help\" for a command's flags.\n")
}

// run runs the command line args and returns the exit code: 0 on success,
// 1 on failure, 2 on a usage error.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return 0
	}
	var cmd *command
	for _, c := range commands {
		if c.name == args[0] {
			cmd = c
		}
	}
	if cmd == nil {
		fmt.Fprintf(stderr, "perfprof: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	fs := flag.NewFlagSet("perfprof "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	printUsage := func() {
		fmt.Fprintf(fs.Output(), "Usage: perfprof %s %s\n\n%s\n\n", cmd.name, cmd.usage, cmd.summary)
		if cmd.help != "" {
			fmt.Fprintf(fs.Output(), "%s\n\n", cmd.help)
		}
		fmt.Fprintf(fs.Output(), "Flags:\n")
		fs.PrintDefaults()
	}
	// The flag package would print the usage itself on every parse error;
	// it is printed once below, to stdout for --help.
	fs.Usage = func() {}
	exec := cmd.setup(fs)
	pos, err := parseInterleaved(fs, args[1:])
	fs.Usage = printUsage
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return 0
		}
		fs.Usage()
		return 2
	}
	if err := exec(&env{stdout, stderr}, pos); err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			printf(stderr, "perfprof %s: %v\n", cmd.name, err)
			fs.Usage()
			return 2
		}
		printf(stderr, "perfprof %s: %v\n", cmd.name, err)
		return 1
	}
	return 0
}

// usageError is a mistake in the command line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// parseInterleaved parses flags that may come before, between or after the
// positional arguments ("pprof FILE -o out.pb.gz"). Everything after "--" is
// positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		// Split off "--" ourselves: flag would swallow it silently.
		rest := args
		var tail []string
		for i, a := range args {
			if a == "--" {
				rest, tail = args[:i], args[i+1:]
				break
			}
		}
		if err := fs.Parse(rest); err != nil {
			return nil, err
		}
		left := fs.Args()
		if len(left) == 0 {
			return append(pos, tail...), nil
		}
		pos = append(pos, left[0])
		args = append(append([]string(nil), left[1:]...), tailWithSep(tail)...)
	}
}

func tailWithSep(tail []string) []string {
	if tail == nil {
		return nil
	}
	return append([]string{"--"}, tail...)
}

// inputFlags are the flags of every command that loads traces.
type inputFlags struct {
	progress bool
	parallel int
}

func (f *inputFlags) declare(fs *flag.FlagSet) {
	fs.BoolVar(&f.progress, "progress", false, "show a progress bar on stderr (by default shown only for inputs over 50 MB when stderr is a terminal)")
	fs.IntVar(&f.parallel, "parallel", 0, "files decoded at once (0 = number of CPUs)")
}

const progressMin = 50 << 20

// selectFlags are the span selectors of the commands that can restrict
// themselves to what some spans did (report, folded, pprof), declared in one
// place so that the three read the same flags the same way.
type selectFlags struct {
	q analysis.SpanSelector
}

// selectHelp is the selectors' part of a command's help.
const selectHelp = `Selecting spans: --span NAME, --trace-id ID, --span-id ID and --slowest N
choose spans. Every one given must match; --slowest keeps the N longest of
the matching spans (alone: the N longest spans of the trace). A span stands
for its own samples and those of the spans below it, on any thread. A
malformed id is a usage error (exit 2); a selector that matches no span is an
error (exit 1), never an empty output.`

func (f *selectFlags) declare(fs *flag.FlagSet) {
	fs.StringVar(&f.q.Name, "span", "", "select the spans with this name")
	fs.StringVar(&f.q.TraceID, "trace-id", "", "select the spans of this trace (32 hex digits)")
	fs.StringVar(&f.q.SpanID, "span-id", "", "select the span with this id (16 hex digits)")
	fs.IntVar(&f.q.Slowest, "slowest", 0, "keep the N longest of the selected spans (alone: of all spans)")
}

// check rejects malformed selectors before any file is read: a typo in an
// id should not cost the minutes a large trace takes to load.
func (f *selectFlags) check() error {
	if f.q.TraceID != "" && !isHex(f.q.TraceID, 32) {
		return usageError{fmt.Sprintf("--trace-id %q: want 32 hex digits", f.q.TraceID)}
	}
	if f.q.SpanID != "" && !isHex(f.q.SpanID, 16) {
		return usageError{fmt.Sprintf("--span-id %q: want 16 hex digits", f.q.SpanID)}
	}
	if f.q.Slowest < 0 {
		return usageError{fmt.Sprintf("--slowest %d: want a positive number", f.q.Slowest)}
	}
	return nil
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return false
		}
	}
	return true
}

// selection returns the spans the flags choose, or nil when no selector was
// given (the whole trace: a nil *analysis.Selection has every sample).
func (f *selectFlags) selection(t *analysis.Trace) (*analysis.Selection, error) {
	if f.q.IsZero() {
		return nil, nil
	}
	sel, err := t.Select(f.q)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, spanHint(t))
	}
	return sel, nil
}

// spanHint says which spans the trace has, for a selector that found none.
func spanHint(t *analysis.Trace) string {
	if len(t.Spans) == 0 {
		return "the trace has no span event (SpanClose__, or SpanEvent in older files); only files of the perfprof tracefile exporter in TRC format carry spans"
	}
	names := t.SpanNames()
	const show = 5
	var l []string
	for i, n := range names {
		if i == show {
			l = append(l, fmt.Sprintf("… %d more", len(names)-show))
			break
		}
		l = append(l, strconv.Quote(n.Name))
	}
	return fmt.Sprintf("the trace has %d spans named %s", len(t.Spans), strings.Join(l, ", "))
}

// load loads the inputs, with a progress bar when asked for or useful.
func (f *inputFlags) load(e *env, args []string) (*analysis.Trace, error) {
	if len(args) == 0 {
		return nil, usageError{"no input files"}
	}
	files, err := analysis.Expand(args)
	if err != nil {
		return nil, err
	}
	opts := analysis.Options{Parallel: f.parallel}
	if bar := newProgress(e.stderr, files, f.progress); bar != nil {
		opts.Progress = bar.update
		defer bar.done()
	}
	t, err := analysis.LoadFiles(files, opts)
	if err != nil {
		return nil, err
	}
	for _, w := range t.Warnings {
		printf(e.stderr, "perfprof: warning: %s\n", w)
	}
	return t, nil
}

// progress draws a progress bar on a terminal.
type progress struct {
	w     io.Writer
	start time.Time
	drawn bool
}

func newProgress(w io.Writer, files []string, force bool) *progress {
	if !force {
		var total int64
		for _, f := range files {
			if st, err := os.Stat(f); err == nil {
				total += st.Size()
			}
		}
		if total < progressMin || !isTerminal(w) {
			return nil
		}
	}
	return &progress{w: w, start: time.Now()}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func (p *progress) update(done, total int64) {
	const width = 30
	frac := 1.0
	if total > 0 {
		frac = min(float64(done)/float64(total), 1)
	}
	n := int(frac * width)
	fmt.Fprintf(p.w, "\r[%s%s] %3.0f%% %s / %s  %.1fs", strings.Repeat("#", n), strings.Repeat(".", width-n),
		100*frac, mb(done), mb(total), time.Since(p.start).Seconds())
	p.drawn = true
}

func (p *progress) done() {
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }

// createOutput opens path for writing, "-" or "" meaning stdout.
func createOutput(e *env, path string) (io.Writer, func() error, error) {
	if path == "" || path == "-" {
		return e.stdout, func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	return f, f.Close, nil
}
