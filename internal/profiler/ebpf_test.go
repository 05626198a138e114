package profiler_test

import (
	"strings"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/internal/testchild"
)

// TestEBPFFallback: when the eBPF program cannot be loaded, ebpf auto
// profiles as before and says why, and ebpf required refuses to start.
// The load fails here by a label key the program cannot hold; a kernel
// without BTF or a collector without CAP_BPF takes the same path.
func TestEBPFFallback(t *testing.T) {
	child := testchild.Start(t, testchild.Build(t, "burner"), "-alpha", "1", "-beta", "0")
	opts := func(mode profiler.EBPFMode) profiler.Options {
		return profiler.Options{
			Pids: []int{child.Pid}, Perf: perf.Options{Frequency: 499}, Symbolize: true,
			EBPF: mode, SpanLabelKey: strings.Repeat("k", 40),
		}
	}
	p, err := profiler.Open(opts(profiler.EBPFAuto))
	testchild.RequirePerf(t, err)
	time.Sleep(500 * time.Millisecond)
	st := p.Stats()
	snaps, err := p.Close()
	if err != nil {
		t.Fatal(err)
	}
	if st.EBPF.Active || st.EBPF.Reason == nil || !strings.Contains(st.EBPF.Reason.Error(), "longer than 32 bytes") {
		t.Errorf("ebpf auto: active %v, reason %v", st.EBPF.Active, st.EBPF.Reason)
	}
	n := 0
	for _, sn := range snaps {
		n += len(sn.Samples)
	}
	if n < 100 {
		t.Errorf("ebpf auto without its program: %d samples in 0.5 s at 499 Hz", n)
	}
	if _, err := profiler.Open(opts(profiler.EBPFRequired)); err == nil || !strings.Contains(err.Error(), "eBPF") {
		t.Errorf("ebpf required without its program: Open returned %v", err)
	}
}
