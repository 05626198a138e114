package tracefileexporter

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadmeTelemetry: the README's telemetry table says what mdatagen
// generated into documentation.md from metadata.yaml, metric for metric,
// so that it cannot fall behind a new metric or attribute value again.
func TestReadmeTelemetry(t *testing.T) {
	doc, err := os.ReadFile("documentation.md")
	require.NoError(t, err)
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)

	// ### name, a blank line, the description, a blank line, the table
	// header, its rule, and the row whose first cell is the unit.
	metric := regexp.MustCompile(`(?m)^### (\S+)\n\n(.+)\n\n\|.*\n\|.*\n\| (\S+) \|`)
	var want []string
	for _, m := range metric.FindAllStringSubmatch(string(doc), -1) {
		want = append(want, "| `"+m[1]+"` | `"+m[3]+"` | "+m[2]+" |")
	}
	require.NotEmpty(t, want, "no metrics found in documentation.md")

	var got []string
	for line := range strings.SplitSeq(string(readme), "\n") {
		if strings.HasPrefix(line, "| `otelcol_") {
			got = append(got, line)
		}
	}
	assert.Equal(t, want, got)
}
