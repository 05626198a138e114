package htmlviewtest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// What `perfprof report` prints, read back the way a user reads it, so that
// tests can hold the page to the CLI.

// Report is the breakdown `perfprof report` prints for a selection: its
// Samples line, and each part of the wall time as "<label> <ms> ms <pct>%"
// ("wall <ms> ms" first), the way the page's header shows it.
type Report struct {
	Samples string   // "34 (on-CPU 32, off-CPU 2)"
	Shown   []string // "wall 9.350 ms", "on-CPU 8.000 ms 85.6%", …
}

// ReportBreakdown reads the breakdown of a selection's report.
func ReportBreakdown(t *testing.T, out string) Report {
	t.Helper()
	var b Report
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "Breakdown: wall "):
			b.Shown = append(b.Shown, "wall "+f[2]+" ms")
		case strings.HasPrefix(line, "Samples: ") && b.Samples == "" && len(b.Shown) > 0:
			b.Samples = strings.TrimPrefix(line, "Samples: ")
		case len(b.Shown) > 0 && b.Samples == "" && len(f) >= 4:
			// "  on-CPU  8.000 ms  85.6%  (…)", "  off-CPU blocked …", "  not observed …"
			k := slices.Index(f, "ms")
			if k < 1 || k+1 >= len(f) {
				t.Fatalf("report: breakdown line %q", line)
			}
			b.Shown = append(b.Shown, strings.Join(f[:k-1], " ")+" "+f[k-1]+" ms "+f[k+1])
		}
	}
	if b.Samples == "" || len(b.Shown) < 5 {
		t.Fatalf("report printed no breakdown:\n%s", out)
	}
	return b
}

// ReportSpanNames reads the Spans section of `perfprof report`: per span
// name its count, p50, p95, p99 (ms, as printed) and shares (on-CPU,
// blocked, runnable, not observed).
func ReportSpanNames(t *testing.T, out string) map[string][]string {
	t.Helper()
	_, sec, ok := strings.Cut(out, "== Spans:")
	if !ok {
		t.Fatalf("report has no Spans section:\n%s", out)
	}
	lines := strings.Split(sec, "\n")
	rows := map[string][]string{}
	for _, line := range lines[2:] {
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "==") || strings.HasPrefix(strings.TrimSpace(line), "…") {
			break
		}
		f := strings.Fields(line)
		if len(f) < 9 {
			t.Fatalf("report: Spans row %q", line)
		}
		n := len(f) - 8 // the name may hold spaces
		rows[strings.Join(f[:n], " ")] = f[n:]
	}
	return rows
}

// Thousands formats n as the page does (toLocaleString('en-US')).
func Thousands(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
