package main

import (
	"fmt"
	"io"

	"github.com/perfprof/perfprof/internal/analysis"
)

// printf is fmt.Fprintf for the text the CLI prints: reports, warnings,
// errors. Its string, error and fmt.Stringer arguments carry names from the
// trace files (functions, files, spans, metadata, warnings that quote them)
// and are made printable (analysis.Printable), so that no name can drive
// the terminal or forge a line; the format is the program's own and passes
// as it is. An argument for %q needs no printf: Go's quoting escapes it.
func printf(w io.Writer, format string, a ...any) {
	fmt.Fprintf(w, format, printable(a)...)
}

// printable returns a with its textual arguments made printable; a itself
// when none needed it, so that a Stringer such as time.Duration still
// meets %d as itself.
func printable(a []any) []any {
	out := a
	for i, v := range a {
		var s string
		switch v := v.(type) {
		case string:
			s = v
		case error:
			s = v.Error()
		case fmt.Stringer:
			s = v.String()
		default:
			continue
		}
		if p := analysis.Printable(s); p != s {
			if &out[0] == &a[0] {
				out = append([]any(nil), a...)
			}
			out[i] = p
		}
	}
	return out
}
