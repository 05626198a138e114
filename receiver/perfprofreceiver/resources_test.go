package perfprofreceiver

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"

	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/receiver/perfprofreceiver/internal/spanconv"
)

// TestNewestResourcesAreNamed: after spans of 5 000 processes, each with
// its own resource (its process.pid), the process that sent spans last is
// still named by its resource: the resources and the pid names make room
// for the newest, rather than refusing them once full.
func TestNewestResourcesAreNamed(t *testing.T) {
	tt := componenttest.NewTelemetry()
	defer func() { require.NoError(t, tt.Shutdown(context.Background())) }()
	sc := startScripted(t, tt, time.Second, 1000)
	r, sink := sc.r, sc.sink
	now := clock.Monotonic()
	s := uint64(time.Second)
	for pid := 1000; pid < 6000; pid++ {
		td := spanAt(7, "GET /a", 1, now-30*s, now-29*s)
		td.ResourceSpans().At(0).Resource().Attributes().PutInt(convention.ProcessPid, int64(pid))
		r.indexSpans(td)
	}
	td := spanAt(7, "GET /a", 1, now-30*s, now-29*s)
	td.ResourceSpans().At(0).Resource().Attributes().PutStr(convention.ServiceName, "newest")
	td.ResourceSpans().At(0).Resource().Attributes().PutInt(convention.ProcessPid, 100)
	r.indexSpans(td)
	require.Equal(t, spanconv.MaxResources, r.spanConv.Resources())
	sc.sample(8, now-10*s) // no span on its thread
	r.report(context.Background())
	require.Len(t, sink.AllProfiles(), 1)
	attrs := sink.AllProfiles()[0].ResourceProfiles().At(0).Resource().Attributes()
	svc, ok := attrs.Get(convention.ServiceName)
	require.True(t, ok, "resource %v", attrs.AsRaw())
	require.Equal(t, "newest", svc.Str())
}
