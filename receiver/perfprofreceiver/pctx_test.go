package perfprofreceiver

import (
	"context"
	"encoding/hex"
	"errors"
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
)

// profilePublisher starts the OTEP 4719 publisher burning the CPU, with
// its process context published as pctx says, and a receiver profiling it
// into the sink, reporting every 300 ms.
func profilePublisher(t *testing.T, pctx string) (*testchild.Child, xreceiver.Profiles, *consumertest.ProfilesSink) {
	requirePerf(t)
	child := testchild.Start(t, testchild.OTelCtxPublisher(t), "work", pctx, filepath.Join(t.TempDir(), "truth"))
	cfg := createDefaultConfig()
	cfg.Targets.Pids = []int{child.Pid}
	cfg.Frequency = 499
	cfg.ReportInterval = 300 * time.Millisecond
	cfg.Correlation.Window = 0
	sink := new(consumertest.ProfilesSink)
	return child, startReceiver(t, cfg, sink), sink
}

// TestResourceFromProcessContext: a process that publishes its resource
// (OTEP 4719) and sends no span has its service.name on its profiles. The
// publisher burns the CPU (work mode): one that wakes for microseconds
// every millisecond, as in attach mode, may get no sample in a second from
// per-CPU events, whose timer can keep missing its timer-driven wake-ups.
func TestResourceFromProcessContext(t *testing.T) {
	child, r, sink := profilePublisher(t, "memfd")
	require.Eventually(t, func() bool { return sink.SampleCount() > 0 }, 20*time.Second, 50*time.Millisecond, "no profile")
	require.NoError(t, r.Shutdown(context.Background()))

	n := 0
	for _, pd := range sink.AllProfiles() {
		for i := 0; i < pd.ResourceProfiles().Len(); i++ {
			res := pd.ResourceProfiles().At(i).Resource().Attributes()
			name, ok := res.Get("service.name")
			require.True(t, ok, "no service.name on the resource: %v", res.AsRaw())
			require.Equal(t, "otelctx-publisher", name.Str())
			pid, _ := res.Get(convention.ProcessPid)
			require.Equal(t, int64(child.Pid), pid.Int(), "the kernel's pid wins")
			n++
		}
	}
	require.Positive(t, n, "no profiles")
}

// TestResourcePublishedLate: a process attached before its SDK published
// the process context gets its service.name on profiles seconds after it
// publishes, not at the next full re-read (processContextInterval, 10 s).
// The publisher publishes 1.5 s after it started; reads that find nothing
// are tried again after 1 s, 2 s, 4 s.
func TestResourcePublishedLate(t *testing.T) {
	_, r, sink := profilePublisher(t, "late")
	start := time.Now()
	named := func() bool {
		for _, pd := range sink.AllProfiles() {
			for i := 0; i < pd.ResourceProfiles().Len(); i++ {
				if _, ok := pd.ResourceProfiles().At(i).Resource().Attributes().Get("service.name"); ok {
					return true
				}
			}
		}
		return false
	}
	require.Eventually(t, named, 15*time.Second, 50*time.Millisecond, "no profile with a service.name")
	took := time.Since(start)
	require.NoError(t, r.Shutdown(context.Background()))
	t.Logf("service.name on a profile %v after the receiver started; published 1.5 s after the publisher did", took.Round(time.Millisecond))
	// The first read, at the start, finds nothing: without the retry
	// the next is processContextInterval (10 s) later.
	require.Less(t, took, 8*time.Second, "a late publication waited for the full re-read")
}

// TestThreadContextLinks: the receiver links the samples of a process that
// publishes its running span in its OTEP 4947 thread context to that span,
// on-CPU and off-CPU, with no span sent: the publisher's one thread switches
// between two spans every millisecond, burning (and now and then blocking)
// in a function of each span's own.
func TestThreadContextLinks(t *testing.T) {
	requirePerf(t)
	bin := testchild.OTelCtxPublisher(t)
	child := testchild.Start(t, bin, "work", "memfd", filepath.Join(t.TempDir(), "truth"))
	want := map[string][24]byte{}
	for i := 0; i < 2; i++ {
		f := strings.Fields(child.Line(t, 5*time.Second))
		require.True(t, len(f) >= 4 && f[0] == "span", "publisher: %q", f)
		var tr pcommon.TraceID
		var sp pcommon.SpanID
		_, err1 := hex.Decode(tr[:], []byte(f[2]))
		_, err2 := hex.Decode(sp[:], []byte(f[3]))
		require.NoError(t, errors.Join(err1, err2))
		want[f[1]] = linkKey(tr, sp)
	}
	cfg := createDefaultConfig()
	cfg.Targets.Pids = []int{child.Pid}
	cfg.Frequency = 999
	cfg.Sched.Enabled = ptr(true)
	// Off-CPU samples of 1 ms: 280 to 450 of them (groups: a long
	// block is one sample), so that a 99% bar is not one miss in a
	// hundred (a switch-out taken while the thread
	// rewrote its record says nothing of the span).
	cfg.Sched.OffCPUInterval = time.Millisecond
	cfg.ReportInterval = 300 * time.Millisecond
	cfg.Correlation.Window = 0
	cfg.EBPF = "required"
	sink := new(consumertest.ProfilesSink)
	r := startReceiver(t, cfg, sink)
	// Off-CPU samples count apart by state: blocked in a span's function
	// (the thread's own sleep), and runnable (preempted). On a busy
	// machine preemptions come often enough that the scheduler program
	// reads the stack and span of only some of them (sched.stack_min_gap);
	// the others carry the latest read, of the other span when the thread
	// switched spans since (measured 91-95% right at a load of 12).
	var on, onRight, blocked, blockedRight, runnable, runnableRight int
	count := func() {
		on, onRight, blocked, blockedRight, runnable, runnableRight = 0, 0, 0, 0, 0, 0
		for _, s := range joinedSamples(t, sink, child.Pid) {
			which := ""
			for _, fn := range s.functions {
				if strings.HasPrefix(fn, "work_in_span") || strings.HasPrefix(fn, "block_in_span") {
					which = fn[len(fn)-1:]
					break
				}
			}
			if which == "" {
				continue
			}
			n, right := &on, &onRight
			switch {
			case s.offCPU && s.state == "blocked":
				n, right = &blocked, &blockedRight
			case s.offCPU:
				n, right = &runnable, &runnableRight
			}
			*n++
			if s.link == want[which] {
				*right++
			}
		}
	}
	// Samples enough to judge: the bars are 99% of them.
	require.Eventually(t, func() bool { count(); return on > 1000 && blocked > 200 }, 30*time.Second, 200*time.Millisecond, "too few samples in the spans' functions")
	require.NoError(t, r.Shutdown(context.Background()))
	count()
	t.Logf("on-CPU: %d of %d samples linked to the active span; off-CPU blocked: %d of %d; runnable: %d of %d",
		onRight, on, blockedRight, blocked, runnableRight, runnable)
	require.GreaterOrEqual(t, float64(onRight)/float64(on), 0.99)
	require.GreaterOrEqual(t, float64(blockedRight)/float64(blocked), 0.99)
	if runnable > 0 {
		require.GreaterOrEqual(t, float64(runnableRight)/float64(runnable), 0.8)
	}
}
