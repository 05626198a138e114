package profiler_test

import (
	"encoding/hex"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/perfprof/perfprof/internal/bpf"
	"github.com/perfprof/perfprof/internal/perf"
	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/internal/testchild"
)

// requireEBPF handles the error of an Open with EBPFRequired: it skips the
// test when the kernel or the privileges refused perf events or the eBPF
// programs, or fails it with PERFPROF_REQUIRE_PERF=1.
func requireEBPF(t *testing.T, err error) {
	t.Helper()
	testchild.RequireKernel(t, "perf events and BPF", err,
		bpf.ErrPermission, bpf.ErrNotSupported, perf.ErrPermission, perf.ErrNotSupported)
}

// TestThreadContextAttribution: a C program whose one thread switches
// between two open spans every millisecond, publishing the active one in
// its OTEP 4947 thread context record, burning in work_in_span0/1 and now
// and then blocking in block_in_span0/1. The stack of each sample says
// which span was active; the link, read by the eBPF program at the sample,
// must name that span, on-CPU and off-CPU. The spans are never sent: the
// record's ids are the link. Built as an executable (static TLS) and with
// the record in a dlopen'ed library (dynamic TLS, through the DTV).
func TestThreadContextAttribution(t *testing.T) {
	for _, variant := range []string{"executable", "dlopen"} {
		t.Run(variant, func(t *testing.T) {
			truth := filepath.Join(t.TempDir(), "truth")
			var child *testchild.Child
			if variant == "dlopen" {
				bin, lib := testchild.OTelCtxPublisherDlopen(t)
				child = testchild.Start(t, bin, "work", "memfd", truth, lib)
			} else {
				child = testchild.Start(t, testchild.OTelCtxPublisher(t), "work", "memfd", truth)
			}
			spans := map[string][2][]byte{} // "0", "1" → trace, span
			attrs := map[string][]profiler.Attr{}
			for i := 0; i < 2; i++ {
				f := strings.Fields(child.Line(t, 5*time.Second))
				if len(f) < 6 || f[0] != "span" {
					t.Fatalf("publisher: %q, want a span line", f)
				}
				tr, _ := hex.DecodeString(f[2])
				sp, _ := hex.DecodeString(f[3])
				spans[f[1]] = [2][]byte{tr, sp}
				// The record's attributes, named by the process
				// context's key map.
				attrs[f[1]] = []profiler.Attr{{Key: "http.route", Value: f[4]}, {Key: "user.name", Value: f[5]}}
			}

			p, err := profiler.Open(profiler.Options{
				Pids:           []int{child.Pid},
				Perf:           perf.Options{Frequency: 999, Sched: true, KernelStacks: true},
				OffCPUInterval: time.Millisecond,
				Symbolize:      true,
				EBPF:           profiler.EBPFRequired,
				EBPFRunStats:   true,
			})
			requireEBPF(t, err)
			// Samples enough to judge, however slowly a busy machine
			// runs the publisher (3 s when it is free).
			testchild.WaitFor(t, 30*time.Second, "1100 on-CPU and 100 off-CPU samples", func() bool {
				st := p.Stats()
				return st.Samples >= 1100 && st.OffCPU.Samples >= 100
			})
			prog := p.Stats().EBPF // the programs' counters end with Close
			snaps, err := p.Close()
			if err != nil {
				t.Fatal(err)
			}
			st := p.Stats() // after the final report's join
			if !prog.Active {
				t.Fatalf("eBPF not active: %v", prog.Reason)
			}

			type tally struct{ n, right, wrong, unlinked, attrs int }
			var on, off tally
			unknown := 0
			for _, sn := range snaps {
				if sn.Pid != child.Pid {
					continue
				}
				for _, s := range sn.Samples {
					which := spanOfStack(sn, s.Stack)
					if which == "" {
						unknown++
						continue
					}
					tl := &on
					if s.OffCPU() {
						tl = &off
					}
					tl.n++
					if s.Link.Attrs > 0 && reflect.DeepEqual(sn.ContextAttrs[s.Link.Attrs], attrs[which]) {
						tl.attrs++
					}
					want := spans[which]
					switch {
					case !s.Link.Linked:
						tl.unlinked++
					case string(s.Link.SpanID[:]) == string(want[1]) && string(s.Link.TraceID[:]) == string(want[0]) && s.Link.Source == profiler.SourceThreadContext:
						tl.right++
					default:
						tl.wrong++
					}
				}
			}
			t.Logf("on-CPU samples in a span's function: %d, %d linked to that span (%.2f%%), %d to the other, %d unlinked",
				on.n, on.right, pct(on.right, on.n), on.wrong, on.unlinked)
			t.Logf("off-CPU samples blocked in a span's function: %d, %d linked to that span (%.2f%%), %d to the other, %d unlinked",
				off.n, off.right, pct(off.right, off.n), off.wrong, off.unlinked)
			t.Logf("their record's attributes (http.route, user.name) on %d on-CPU (%.2f%%) and %d off-CPU samples (%.2f%%)",
				on.attrs, pct(on.attrs, on.n), off.attrs, pct(off.attrs, off.n))
			t.Logf("samples in neither span's function: %d; join %+v; program %+v", unknown, st.Joins, prog.Program)
			if n := prog.Program.RunCount; n > 0 {
				t.Logf("programs: %d ns a run over %d runs (cpu-clock and switch-out samples)", int64(prog.Program.RunTime)/int64(n), n)
			}
			if on.n < 1000 {
				t.Fatalf("%d on-CPU samples in the span functions, want ≥ 1000", on.n)
			}
			if float64(on.right) < 0.99*float64(on.n) {
				t.Errorf("on-CPU: %.2f%% linked to the active span, want ≥ 99%%", pct(on.right, on.n))
			}
			if off.n < 50 {
				t.Fatalf("%d off-CPU samples blocked in the span functions, want ≥ 50", off.n)
			}
			if float64(off.right) < 0.99*float64(off.n) {
				t.Errorf("off-CPU: %.2f%% linked to the span that blocked, want ≥ 99%%", pct(off.right, off.n))
			}
			if float64(on.attrs) < 0.99*float64(on.n) || float64(off.attrs) < 0.99*float64(off.n) {
				t.Errorf("the record's attributes on %.2f%% of the on-CPU and %.2f%% of the off-CPU samples, want ≥ 99%%",
					pct(on.attrs, on.n), pct(off.attrs, off.n))
			}
			if st.Joins.Read[profiler.SourceThreadContext] == 0 {
				t.Errorf("join counts no link read from thread contexts: %+v", st.Joins)
			}
		})
	}
}

// spanOfStack returns "0" or "1" when the sample's innermost frame of the
// publisher's span functions is span 0's or span 1's, "" when none is on
// the stack.
func spanOfStack(sn profiler.Snapshot, idx int32) string {
	if idx < 0 || int(idx) >= len(sn.Stacks) {
		return ""
	}
	for _, loc := range sn.Stacks[idx] {
		for _, f := range loc.Frames {
			switch f.Function {
			case "work_in_span0", "block_in_span0":
				return "0"
			case "work_in_span1", "block_in_span1":
				return "1"
			}
		}
	}
	return ""
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}
