package perfprofreceiver

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/receiver/xreceiver"

	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/testchild"
	"github.com/perfprof/perfprof/pkg/pprofiledict"
)

// truthSpan is a span as the app exported it (from the traces sink).
type truthSpan struct {
	name       string
	tid        int64
	start, end uint64 // Unix ns
}

// joinedSample is one perf sample of the profiles, with its link.
type joinedSample struct {
	offCPU    bool
	value     int64
	state     string
	time      uint64
	tid       int64
	functions []string
	link      [24]byte // trace id, span id; zero when not linked
	worker    int64
	root      string
	cpuDelta  int64 // thread.cpu.time_delta, ns; 0 when absent
}

// spanFunction is the function each spanner span wraps (ground truth).
var spanFunction = map[string]string{
	"alpha": "main.spanAlpha",
	"beta":  "main.spanBeta",
	"gamma": "main.spanGamma",
}

// TestJoinGroundTruth runs the spanner workload against the receiver at
// 999 Hz for 16 s, with its spans exported up to 2 s late, and measures the
// join against the ground truth of the spans themselves: precision (a
// linked sample's span covered its thread and time, and its stack holds
// that span's function), recall (samples in a span's function carry that
// span's link) and false links (samples in burnOutside, outside any span).
func TestJoinGroundTruth(t *testing.T) {
	requirePerf(t)
	if testing.Short() {
		t.Skip("16 s of sampling")
	}
	bin := testchild.Build(t, "spanner")
	cfg := createDefaultConfig()
	cfg.Targets.Executables = []string{filepath.Base(bin)}
	cfg.Frequency = 999
	cfg.ReportInterval = time.Second
	cfg.DiscoveryInterval = 100 * time.Millisecond
	cfg.Correlation.Window = 4 * time.Second
	cfg.Sched.Enabled = ptr(true)
	cfg.Protocols.GRPC.GetOrInsertDefault().NetAddr.Endpoint = "127.0.0.1:0"
	profiles := new(consumertest.ProfilesSink)
	traces := new(consumertest.TracesSink)
	f := NewFactory().(xreceiver.Factory)
	set, logged := processLogged(t)
	pr, err := f.CreateProfiles(context.Background(), set, cfg, profiles)
	require.NoError(t, err)
	tr, err := f.CreateTraces(context.Background(), set, cfg, traces)
	require.NoError(t, err)
	require.Same(t, pr.(signal).Value(), tr.(signal).Value(), "one receiver instance for both signals")
	require.NoError(t, pr.Start(context.Background(), nil))
	require.NoError(t, tr.Start(context.Background(), nil))
	addr := pr.(signal).Value().server.GRPCAddr

	child := testchild.Start(t, bin, "-endpoint", addr, "-workers", "2", "-late", "2s", "-duration", "16s", "-wait", "5ms")
	// A deadline, not the measure: the spanner runs 16 s whenever it is
	// found.
	require.Eventually(t, func() bool { return logged("Sampling process", child.Pid) }, 10*time.Second, 20*time.Millisecond, "the spanner was not attached")
	require.NoError(t, child.Cmd.Wait(), "spanner failed")
	childCPU := child.Cmd.ProcessState.UserTime() + child.Cmd.ProcessState.SystemTime()
	// The spanner sent its last spans before it exited; its samples go
	// out with the reports after the window has passed them, and then
	// the engine lets go of the process.
	prof := pr.(signal).Value().prof
	require.Eventually(t, func() bool { return prof.Stats().ProcessesHeld == 0 }, 4*(cfg.Correlation.Window+2*cfg.ReportInterval), 50*time.Millisecond,
		"the spanner's samples were not all reported")
	require.NoError(t, pr.Shutdown(context.Background()))
	require.NoError(t, tr.Shutdown(context.Background()))

	// Ground truth from the spans the app sent.
	truth := map[[24]byte]truthSpan{}
	for _, td := range traces.AllTraces() {
		for i := 0; i < td.ResourceSpans().Len(); i++ {
			ss := td.ResourceSpans().At(i).ScopeSpans()
			for j := 0; j < ss.Len(); j++ {
				for k := 0; k < ss.At(j).Spans().Len(); k++ {
					sp := ss.At(j).Spans().At(k)
					tid, _ := sp.Attributes().Get("thread.id")
					truth[linkKey(sp.TraceID(), sp.SpanID())] = truthSpan{sp.Name(), tid.Int(), uint64(sp.StartTimestamp()), uint64(sp.EndTimestamp())}
				}
			}
		}
	}
	require.NotEmpty(t, truth)

	for _, pd := range profiles.AllProfiles() {
		for i := 0; i < pd.ResourceProfiles().Len(); i++ {
			attrs := pd.ResourceProfiles().At(i).Resource().Attributes()
			if p, _ := attrs.Get("process.pid"); p.Int() != int64(child.Pid) {
				continue
			}
			svc, ok := attrs.Get("service.name")
			require.True(t, ok && svc.Str() == "spanner", "profile resource lacks the span resource: %v", attrs.AsRaw())
		}
	}
	var inSpanFn, inSpanFnLinkedRight, linked, linkedRight, strictRight, outside, outsideLinked, total int
	var waits, waitsLinked int
	var roots = map[string]int{}
	wrong := map[string]int{} // what the mislinked samples were doing, for the log
	for _, s := range joinedSamples(t, profiles, child.Pid) {
		if s.offCPU {
			// Off-CPU time in the wait span's sleep must be linked to it.
			for _, f := range s.functions {
				if f == "main.waitSleep" {
					waits++
					sp, ok := truth[s.link]
					if ok && sp.name == "wait" && sp.tid == s.tid && sp.start <= s.time && s.time < sp.end {
						waitsLinked++
					}
					break
				}
			}
			continue
		}
		total++
		fn := ""
		for _, f := range s.functions {
			switch f {
			case "main.spanAlpha", "main.spanBeta", "main.spanGamma", "main.burnOutside":
				if fn == "" {
					fn = f
				}
			}
		}
		sp, isLinked := truth[s.link]
		if s.link != ([24]byte{}) {
			linked++
			require.True(t, isLinked, "a link to a span the app never sent")
			roots[s.root]++
			covers := sp.tid == s.tid && sp.start <= s.time && s.time < sp.end
			holds := fn != "" && spanFunction[sp.name] == fn || (sp.name == "request" || sp.name == "wait") && fn == ""
			// The Go scheduler runs on the thread's system stack, where
			// frame pointers do not lead back to the goroutine: such a
			// sample inside the span is the span's thread doing the
			// runtime's work for it (preemption, hand-offs), rightly linked,
			// but its stack cannot hold the span's function.
			if covers && !holds && goRuntimeOnly(s.functions) {
				holds = true
			} else if covers && holds {
				strictRight++
			}
			if covers && holds {
				linkedRight++
			} else {
				top := s.functions
				if len(top) > 4 {
					top = top[:4]
				}
				wrong[fmt.Sprintf("span %s covers=%t: %v", sp.name, covers, top)]++
			}
		}
		switch fn {
		case "main.burnOutside":
			outside++
			if s.link != ([24]byte{}) {
				outsideLinked++
			}
		case "main.spanAlpha", "main.spanBeta", "main.spanGamma":
			inSpanFn++
			if isLinked && spanFunction[sp.name] == fn && sp.tid == s.tid && sp.start <= s.time && s.time < sp.end {
				inSpanFnLinkedRight++
			}
		}
	}
	precision := float64(linkedRight) / float64(linked)
	strict := float64(strictRight) / float64(linked)
	recall := float64(inSpanFnLinkedRight) / float64(inSpanFn)
	falseLinks := float64(outsideLinked) / float64(outside)
	t.Logf("%d samples of spanner, %d spans; precision %.4f (%d/%d; %.4f counting samples in the Go scheduler's system stack as misses), recall %.4f (%d/%d), linked outside spans %.4f (%d/%d); root names %v",
		total, len(truth), precision, linkedRight, linked, strict, recall, inSpanFnLinkedRight, inSpanFn, falseLinks, outsideLinked, outside, roots)
	for k, n := range wrong {
		if n > 1 {
			t.Logf("mislinked %3d × %s", n, k)
		}
	}
	// 16 s at 999 Hz of ~1.7 busy threads when the machine is free
	// (~16 000 samples); on a busy one, what the CPU time the spanner got
	// (its rusage) stands for, less its start before it was found (67%
	// of it measured at a load of 12 on 2 CPUs).
	want := childCPU.Seconds() * float64(cfg.Frequency)
	t.Logf("spanner's CPU %v: %.0f samples at %d Hz", childCPU, want, cfg.Frequency)
	require.Greater(t, total, 2000, "too few samples to judge")
	require.GreaterOrEqual(t, float64(total), 0.5*want, "samples against the spanner's CPU time")
	// Measured 0.9947-0.9960 over eight runs (eBPF on or off): the misses
	// are samples in the SDK's own Start and End of a span, inside the
	// span's time but outside the work it names.
	require.GreaterOrEqual(t, precision, 0.99, "precision")
	require.GreaterOrEqual(t, recall, 0.97, "recall")
	require.LessOrEqual(t, falseLinks, 0.005, "samples outside any span that carry a link")
	require.Equal(t, linked, roots["request"], "every joined sample names its local root span")
	t.Logf("off-CPU samples in main.waitSleep: %d, linked to their wait span: %d", waits, waitsLinked)
	require.Greater(t, waits, 100, "off-CPU samples of the wait span's sleep")
	require.GreaterOrEqual(t, float64(waitsLinked)/float64(waits), 0.95, "off-CPU samples linked to the span that slept")
}

func linkKey(tr pcommon.TraceID, sp pcommon.SpanID) [24]byte {
	var k [24]byte
	copy(k[:], tr[:])
	copy(k[16:], sp[:])
	return k
}

// joinedSamples flattens the profiles of pid into one entry per timestamp.
func joinedSamples(t *testing.T, sink *consumertest.ProfilesSink, pid int) []joinedSample {
	var out []joinedSample
	for _, pd := range sink.AllProfiles() {
		for _, p := range pprofiledict.Decode(pd) {
			if v, _ := p.Resource.Get(convention.ProcessPid); v.Int() != int64(pid) {
				continue
			}
			for _, prof := range p.Profiles {
				for _, s := range prof.Samples {
					js := joinedSample{offCPU: prof.OffCPU, value: s.Value, state: s.State, time: s.Time, tid: int64(s.Tid),
						worker: s.Worker, root: s.Root, cpuDelta: int64(s.CPUDelta)}
					if s.Link.Linked() {
						js.link = linkKey(s.Link.TraceID, s.Link.SpanID)
					}
					for _, l := range s.Stack {
						for _, f := range l.Frames {
							js.functions = append(js.functions, f.Name)
						}
					}
					out = append(out, js)
				}
			}
		}
	}
	return out
}

// goRuntimeOnly reports whether every frame of a stack is the Go runtime's.
func goRuntimeOnly(fns []string) bool {
	if len(fns) == 0 {
		return false
	}
	for _, f := range fns {
		if !strings.HasPrefix(f, "runtime.") && !strings.HasPrefix(f, "internal/runtime/") {
			return false
		}
	}
	return true
}
