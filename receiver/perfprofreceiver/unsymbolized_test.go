package perfprofreceiver

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/perfprof/perfprof/internal/symbolize"
	"github.com/perfprof/perfprof/internal/testchild"
	"github.com/perfprof/perfprof/pkg/pprofiledict"
)

// TestReceiverUnsymbolized: with symbolize: false the profiles keep raw
// addresses with their mappings and build ids, and those are enough for
// a backend to symbolize: resolving them afterwards names the child's
// functions.
func TestReceiverUnsymbolized(t *testing.T) {
	requirePerf(t)
	bin := testchild.Build(t, "burner")
	child := testchild.Start(t, bin, "-alpha", "1", "-beta", "0")
	cfg := createDefaultConfig()
	cfg.Targets.Pids = []int{child.Pid}
	cfg.Frequency = 499
	cfg.ReportInterval = 500 * time.Millisecond
	cfg.Correlation.Window = 0
	cfg.Symbolize = false
	sink := new(consumertest.ProfilesSink)
	r := startReceiver(t, cfg, sink)
	require.Eventually(t, func() bool { return len(flatten(t, sink.AllProfiles())) >= 300 }, 20*time.Second, 100*time.Millisecond, "300 samples")
	require.NoError(t, r.Shutdown(context.Background()))

	cache := symbolize.NewCache(symbolize.Options{})
	defer cache.Close()
	proc, err := cache.Process(child.Pid)
	require.NoError(t, err)

	var locs, inExe, named int
	for _, pd := range sink.AllProfiles() {
		r := pprofiledict.NewReader(pd.Dictionary())
		var l pprofiledict.Location
		for i := 1; i < pd.Dictionary().LocationTable().Len(); i++ {
			r.Location(int32(i), &l)
			locs++
			require.Empty(t, l.Frames, "a location was symbolized")
			require.NotZero(t, l.Addr)
			if l.Mapping.File != bin {
				continue
			}
			inExe++
			require.NotEmpty(t, l.Mapping.BuildID, "the executable's mapping carries its build id")
			// What a backend would do with (build id, mapping, address).
			for _, f := range proc.Lookup(l.Addr - 1).Frames {
				if f.Function == "main.burnAlpha" || f.Function == "main.worker" {
					named++
					break
				}
			}
		}
	}
	t.Logf("%d locations, %d in the executable, %d of those resolve later to the child's functions", locs, inExe, named)
	require.Greater(t, inExe, 3)
	require.Greater(t, named, 0)
}
