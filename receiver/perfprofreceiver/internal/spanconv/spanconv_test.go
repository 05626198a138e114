package spanconv

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/profiler"
)

// TestConvert: the spans that name their thread become the engine's spans
// with their resource's process, container, pod and service; the others
// and the bounds are counted.
func TestConvert(t *testing.T) {
	c := New(convention.ThreadID, convention.WorkerID)
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	ra := rs.Resource().Attributes()
	ra.PutStr(convention.ServiceName, "checkout")
	ra.PutInt(convention.ProcessPid, 4242)
	ra.PutStr(convention.ContainerID, "3f4e5d6c7b8a")
	ra.PutStr(convention.K8sPodUID, strings.Repeat("p", maxContainerID+1)) // too long to be one
	spans := rs.ScopeSpans().AppendEmpty().Spans()
	sp := spans.AppendEmpty()
	sp.SetName("GET /cart")
	sp.SetTraceID(pcommon.TraceID{1})
	sp.SetSpanID(pcommon.SpanID{1})
	sp.SetStartTimestamp(10)
	sp.SetEndTimestamp(20)
	sp.Attributes().PutStr(convention.ThreadID, "4243") // some SDKs send strings
	sp.Attributes().PutInt(convention.WorkerID, 2)
	for _, tid := range []int64{0, -1, 1 << 32} {
		spans.AppendEmpty().Attributes().PutInt(convention.ThreadID, tid)
	}
	spans.AppendEmpty().SetName("no thread")

	b := c.Convert(td)
	require.Equal(t, int64(4), b.NoThread)
	require.Zero(t, b.LongNames)
	require.Zero(t, b.BigResources)
	require.Len(t, b.Spans, 1)
	h := b.Spans[0].Resource
	require.Equal(t, []Process{{Pid: 4242, ContainerID: "3f4e5d6c7b8a", Resource: h}}, b.Processes)
	require.Equal(t, profiler.Span{Tid: 4243, Pid: 4242, TraceID: [16]byte{1}, SpanID: [8]byte{1}, Start: 10, End: 20,
		Name: "GET /cart", WorkerID: 2, Resource: h, ContainerID: "3f4e5d6c7b8a", Service: "checkout"}, b.Spans[0])
	res, ok := c.Resource(h)
	require.True(t, ok)
	require.Equal(t, ra.AsRaw(), res.Attributes().AsRaw())

	// The same resource again, its attributes in another order: the same
	// handle.
	td2 := ptrace.NewTraces()
	rs2 := td2.ResourceSpans().AppendEmpty()
	ra.CopyTo(rs2.Resource().Attributes())
	rs2.Resource().Attributes().Remove(convention.ServiceName)
	rs2.Resource().Attributes().PutStr(convention.ServiceName, "checkout")
	sp2 := rs2.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	sp2.Attributes().PutInt(convention.ThreadID, 4243)
	b = c.Convert(td2)
	require.Equal(t, h, b.Spans[0].Resource)
	require.Equal(t, int64(convention.NoWorkerID), b.Spans[0].WorkerID)
	require.Equal(t, 1, c.Resources())
}

// TestConvertKeys: the thread and worker ids are read from the configured
// attributes.
func TestConvertKeys(t *testing.T) {
	c := New("os.tid", "tokio.worker")
	td := ptrace.NewTraces()
	spans := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans()
	a := spans.AppendEmpty().Attributes()
	a.PutInt("os.tid", 7)
	a.PutInt("tokio.worker", 3)
	spans.AppendEmpty().Attributes().PutInt(convention.ThreadID, 8)
	b := c.Convert(td)
	require.Equal(t, int64(1), b.NoThread)
	require.Len(t, b.Spans, 1)
	require.Equal(t, uint32(7), b.Spans[0].Tid)
	require.Equal(t, int64(3), b.Spans[0].WorkerID)
	require.Zero(t, b.Spans[0].Pid, "no process.pid")
	require.Empty(t, b.Processes)
}

// TestConvertRemoteParent: a span's parent is remote when its flags say so,
// or, without them, for a server or consumer span with a parent.
func TestConvertRemoteParent(t *testing.T) {
	for _, tc := range []struct {
		name   string
		flags  uint32
		kind   ptrace.SpanKind
		parent bool
		remote bool
	}{
		{"flags remote", flagHasIsRemote | flagIsRemote, ptrace.SpanKindInternal, true, true},
		{"flags local", flagHasIsRemote, ptrace.SpanKindServer, true, false},
		{"server", 0, ptrace.SpanKindServer, true, true},
		{"consumer", 0, ptrace.SpanKindConsumer, true, true},
		{"client", 0, ptrace.SpanKindClient, true, false},
		{"server root", 0, ptrace.SpanKindServer, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			td := ptrace.NewTraces()
			sp := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty()
			sp.Attributes().PutInt(convention.ThreadID, 7)
			sp.SetFlags(tc.flags)
			sp.SetKind(tc.kind)
			if tc.parent {
				sp.SetParentSpanID(pcommon.SpanID{9})
			}
			b := New(convention.ThreadID, convention.WorkerID).Convert(td)
			require.Len(t, b.Spans, 1)
			require.Equal(t, tc.remote, b.Spans[0].ParentRemote)
		})
	}
}

// TestConvertBounds: a long name is cut at MaxSpanName (to valid UTF-8), and
// a resource over maxResourceSize is not remembered: its spans and process
// name none.
func TestConvertBounds(t *testing.T) {
	c := New(convention.ThreadID, convention.WorkerID)
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutInt(convention.ProcessPid, 100)
	rs.Resource().Attributes().PutStr("blob", strings.Repeat("v", maxResourceSize))
	sp := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	sp.Attributes().PutInt(convention.ThreadID, 7)
	sp.SetName(strings.Repeat("a", MaxSpanName-1) + "é" + "tail") // the cut splits é
	b := c.Convert(td)
	require.Equal(t, int64(1), b.LongNames)
	require.Equal(t, int64(1), b.BigResources)
	require.Equal(t, strings.Repeat("a", MaxSpanName-1), b.Spans[0].Name)
	require.True(t, utf8.ValidString(b.Spans[0].Name))
	require.Equal(t, int32(-1), b.Spans[0].Resource)
	require.Equal(t, []Process{{Pid: 100, Resource: -1}}, b.Processes)
	require.Zero(t, c.Resources())
	_, ok := c.Resource(-1)
	require.False(t, ok)
}
