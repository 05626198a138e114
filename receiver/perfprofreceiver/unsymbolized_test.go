package perfprofreceiver

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/perfprof/perfprof/internal/symbolize"
	"github.com/perfprof/perfprof/internal/testchild"
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
		dic := pd.Dictionary()
		strs := dic.StringTable()
		for i := 1; i < dic.LocationTable().Len(); i++ {
			l := dic.LocationTable().At(i)
			locs++
			require.Zero(t, l.Lines().Len(), "a location was symbolized")
			require.NotZero(t, l.Address())
			if l.MappingIndex() == 0 {
				continue
			}
			m := dic.MappingTable().At(int(l.MappingIndex()))
			if strs.At(int(m.FilenameStrindex())) != bin {
				continue
			}
			inExe++
			var buildID string
			for _, ai := range m.AttributeIndices().AsRaw() {
				a := dic.AttributeTable().At(int(ai))
				if k := strs.At(int(a.KeyStrindex())); k == "process.executable.build_id.go" || k == "process.executable.build_id.gnu" {
					buildID = a.Value().Str()
				}
			}
			require.NotEmpty(t, buildID, "the executable's mapping carries its build id")
			// What a backend would do with (build id, mapping, address).
			for _, f := range proc.Lookup(l.Address() - 1).Frames {
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
