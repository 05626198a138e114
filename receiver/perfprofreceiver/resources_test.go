package perfprofreceiver

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/convention"
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
	require.Equal(t, maxResources, r.resources.len())
	sc.sample(8, now-10*s) // no span on its thread
	r.report(context.Background())
	require.Len(t, sink.AllProfiles(), 1)
	attrs := sink.AllProfiles()[0].ResourceProfiles().At(0).Resource().Attributes()
	svc, ok := attrs.Get(convention.ServiceName)
	require.True(t, ok, "resource %v", attrs.AsRaw())
	require.Equal(t, "newest", svc.Str())
}

// TestEvictedResourceHandle: a handle kept from before its resource made
// room for another names none, not the resource now in its slot.
func TestEvictedResourceHandle(t *testing.T) {
	var tab resourceTable
	res := func(i int) pcommon.Resource {
		r := pcommon.NewResource()
		r.Attributes().PutInt(convention.ProcessPid, int64(i))
		return r
	}
	first := tab.intern("first", res(0))
	for i := 1; i < maxResources; i++ {
		tab.intern(fmt.Sprint(i), res(i))
	}
	require.Equal(t, first, tab.intern("first", res(0)), "interned again: same handle")
	h := tab.intern("new", res(-1)) // evicts "1", the least recently interned
	got, ok := tab.get(h)
	require.True(t, ok)
	pid, _ := got.Attributes().Get(convention.ProcessPid)
	require.Equal(t, int64(-1), pid.Int())
	_, ok = tab.get(first)
	require.True(t, ok, "interned recently: kept")
	// The evicted "1" held the slot "new" has now.
	old := h&(maxResources-1) | (h>>resourceSlotBits-1)<<resourceSlotBits
	_, ok = tab.get(old)
	require.False(t, ok, "the evicted resource's handle names none")
	require.Equal(t, maxResources, tab.len())
}
