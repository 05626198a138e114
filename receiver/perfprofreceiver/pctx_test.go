package perfprofreceiver

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/testchild"
)

// TestResourceFromProcessContext: a process that publishes its resource
// (OTEP 4719) and sends no span has its service.name on its profiles.
func TestResourceFromProcessContext(t *testing.T) {
	requirePerf(t)
	bin := testchild.OTelCtxPublisher(t)
	child := testchild.Start(t, bin, "attach", "memfd", filepath.Join(t.TempDir(), "truth"))
	cfg := createDefaultConfig()
	cfg.Targets.Pids = []int{child.Pid}
	cfg.Frequency = 499
	cfg.ReportInterval = 300 * time.Millisecond
	cfg.Correlation.Window = 0
	sink := new(consumertest.ProfilesSink)
	r := startReceiver(t, cfg, sink)
	time.Sleep(time.Second)
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
