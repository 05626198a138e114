//go:build amd64

package bpf

import (
	"testing"
	"unsafe"

	"github.com/perfprof/perfprof/internal/bpf/internal/sourcesum"
)

// TestObjectsMatchSources fails when the C sources changed since the
// committed objects were generated from them.
func TestObjectsMatchSources(t *testing.T) {
	sum, err := sourcesum.Dir(".")
	if err != nil {
		t.Fatal(err)
	}
	if sum != sourceSum {
		t.Fatalf("the C sources have changed since golabels_x86_bpfel.o was generated (sum %s, generated from %s): run make generate", sum, sourceSum)
	}
}

// The Go mirrors of the C structs must have their sizes.
func TestStructSizes(t *testing.T) {
	if n := unsafe.Sizeof(golabelsSampleLabels{}); n != recordSize {
		t.Errorf("struct sample_labels is %d bytes, Record.decode reads %d", n, recordSize)
	}
	if n := unsafe.Sizeof(golabelsGoLayout{}); n != 36 {
		t.Errorf("struct go_layout is %d bytes, want 36", n)
	}
}
