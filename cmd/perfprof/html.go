package main

import (
	"bufio"
	"flag"
	"path/filepath"
	"strings"

	"github.com/perfprof/perfprof/internal/htmlview"
)

func init() {
	register(&command{
		name:    "html",
		summary: "write a self-contained HTML page: flamegraphs (on-CPU, off-CPU) and a timeline of workers and threads with polls, spans and parks",
		usage:   "-o OUT.html [--title TITLE] FILE|DIR…",
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			var in inputFlags
			in.declare(fs)
			out := fs.String("o", "", "output file (\"-\" = stdout), required")
			title := fs.String("title", "", "page title (default: the input names)")
			return func(e *env, args []string) error {
				if *out == "" {
					return usageError{"-o is required"}
				}
				t, err := in.load(e, args)
				if err != nil {
					return err
				}
				d := htmlview.FromTrace(t)
				d.Title = *title
				if d.Title == "" {
					var names []string
					for _, a := range args {
						names = append(names, filepath.Base(a))
					}
					d.Title = "perfprof: " + strings.Join(names, ", ")
				}
				w, closeOut, err := createOutput(e, *out)
				if err != nil {
					return err
				}
				bw := bufio.NewWriterSize(w, 1<<20)
				if err := htmlview.Write(bw, d); err != nil {
					return err
				}
				if err := bw.Flush(); err != nil {
					return err
				}
				return closeOut()
			}
		},
	})
}
