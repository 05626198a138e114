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
		t.Fatalf("the C sources have changed since spanctx_x86_bpfel.o was generated (sum %s, generated from %s): run make generate", sum, sourceSum)
	}
}

// The Go mirrors of the C structs must have their sizes.
func TestStructSizes(t *testing.T) {
	if n := unsafe.Sizeof(spanctxSampleLabels{}); n != recordSize {
		t.Errorf("struct sample_labels is %d bytes, Record.decode reads %d", n, recordSize)
	}
	if n := unsafe.Sizeof(spanctxSampleCtx{}); n != ctxRecordSize {
		t.Errorf("struct sample_ctx is %d bytes, Record.decode reads %d", n, ctxRecordSize)
	}
	if n := unsafe.Sizeof(spanctxSchedRecord{}); n != schedRecordSize {
		t.Errorf("struct sched_record is %d bytes, SchedRecord.decode reads %d", n, schedRecordSize)
	}
	// 8 + tls_layout (24) + go_layout (36) + 4 of padding + the rate window (16).
	if n := unsafe.Sizeof(spanctxTarget{}); n != 88 {
		t.Errorf("struct target is %d bytes, want 88", n)
	}
}
