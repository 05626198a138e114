package spanconv

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/perfprof/perfprof/internal/convention"
)

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
	for i := 1; i < MaxResources; i++ {
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
	old := h&(MaxResources-1) | (h>>resourceSlotBits-1)<<resourceSlotBits
	_, ok = tab.get(old)
	require.False(t, ok, "the evicted resource's handle names none")
	require.Equal(t, MaxResources, tab.len())
}
