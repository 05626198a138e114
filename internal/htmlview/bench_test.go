package htmlview

import (
	"fmt"
	"io"
	"testing"
)

// countWriter counts what Write produces without keeping it.
type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) {
	*c += countWriter(len(p))
	return len(p), nil
}

var _ io.Writer = (*countWriter)(nil)

func BenchmarkWrite(b *testing.B) {
	for _, c := range []struct{ samples, stacks int }{{100_000, 300}, {1_000_000, 300}, {1_000_000, 30_000}} {
		d := genDataStacks(c.samples, 1, c.stacks)
		b.Run(fmt.Sprintf("samples=%d/stacks=%d", c.samples, c.stacks), func(b *testing.B) {
			b.ReportAllocs()
			var size countWriter
			for b.Loop() {
				size = 0
				if err := Write(&size, d); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(size), "html-bytes")
		})
	}
}
