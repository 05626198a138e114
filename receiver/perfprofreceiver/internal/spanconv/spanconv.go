// Package spanconv is the receiver's codec of spans: it turns the OTLP
// spans apps send the receiver into the engine's spans (profiler.Span)
// for the join, and keeps the span resources that the profiles of their
// processes carry. It is apart from the receiver so that the conversion
// and its bounds can be tested without a collector component.
package spanconv // import "github.com/perfprof/perfprof/receiver/perfprofreceiver/internal/spanconv"

import (
	"math"
	"sort"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/profiler"
)

// Span flags of the OTLP data model (SpanFlags in trace.proto).
const (
	flagHasIsRemote = 0x100
	flagIsRemote    = 0x200
)

// Bounds on what a span may make the receiver hold: max_spans names and
// MaxResources resources stay in memory, and one request may carry values
// of megabytes (up to max_request_body_size).
const (
	MaxSpanName     = 1 << 10  // bytes of a span name held for the join
	maxResourceSize = 64 << 10 // bytes of a remembered resource's attributes
	maxContainerID  = 256      // bytes of a container.id looked at
)

// Converter turns OTLP spans into the engine's spans and remembers their
// resources. Its methods may be called from any goroutine.
type Converter struct {
	threadKey, workerKey string // span attributes of the thread and worker ids
	// resources are the span resources, which profiles name by handle.
	resources resourceTable
}

// New returns a Converter that reads a span's thread and worker ids from
// the attributes threadKey and workerKey (correlation.thread_id_attribute
// and worker_id_attribute).
func New(threadKey, workerKey string) *Converter {
	return &Converter{threadKey: threadKey, workerKey: workerKey}
}

// Process is a process that spans name (process.pid in their resource),
// with what the receiver passes to profiler.Profiler.NameProcess.
type Process struct {
	Pid                 int
	ContainerID, PodUID string
	Resource            int32 // handle of the spans' resource
}

// Batch is what Convert makes of one export request.
type Batch struct {
	// Spans are the spans that name their thread.
	Spans []profiler.Span
	// Processes are the processes that the resources name, in the order
	// of the resources: the process's profiles get this resource from now
	// on.
	Processes []Process
	// What was skipped or bounded: spans without a thread id (not in
	// Spans), names cut at MaxSpanName, resources over maxResourceSize
	// (their spans and process name none).
	NoThread, LongNames, BigResources int64
}

// Convert turns the spans of one export request that name their thread
// into the engine's spans, and says which processes their resources name.
func (c *Converter) Convert(td ptrace.Traces) Batch {
	threadKey, workerKey := c.threadKey, c.workerKey
	var b Batch
	b.Spans = make([]profiler.Span, 0, td.SpanCount())
	for i := 0; i < td.ResourceSpans().Len(); i++ {
		rs := td.ResourceSpans().At(i)
		res, ok := c.internResource(rs.Resource())
		if !ok {
			b.BigResources++
		}
		// SDKs name their process (resource detector process.pid), and
		// its spans link only its own samples.
		var spanPid uint32
		if pid, ok := intAttr(rs.Resource().Attributes(), convention.ProcessPid); ok && pid > 0 && pid <= math.MaxInt32 {
			spanPid = uint32(pid)
		}
		// An app in a container of its own names its process by its pid
		// there; the engine maps it (and the threads) to the collector's
		// ids, choosing the process by the container.
		containerID, podUID := strAttr(rs.Resource().Attributes(), convention.ContainerID), strAttr(rs.Resource().Attributes(), convention.K8sPodUID)
		service := strAttr(rs.Resource().Attributes(), convention.ServiceName)
		if spanPid != 0 {
			b.Processes = append(b.Processes, Process{Pid: int(spanPid), ContainerID: containerID, PodUID: podUID, Resource: res})
		}
		for j := 0; j < rs.ScopeSpans().Len(); j++ {
			ss := rs.ScopeSpans().At(j).Spans()
			for k := 0; k < ss.Len(); k++ {
				sp := ss.At(k)
				attrs := sp.Attributes()
				tid, ok := intAttr(attrs, threadKey)
				if !ok || tid <= 0 || tid > math.MaxUint32 {
					b.NoThread++
					continue
				}
				worker := int64(convention.NoWorkerID)
				if w, ok := intAttr(attrs, workerKey); ok && w >= 0 {
					worker = w
				}
				flags := sp.Flags()
				kind := sp.Kind()
				parent := sp.ParentSpanID()
				remote := flags&(flagHasIsRemote|flagIsRemote) == flagHasIsRemote|flagIsRemote ||
					(flags&flagHasIsRemote == 0 && !parent.IsEmpty() && (kind == ptrace.SpanKindServer || kind == ptrace.SpanKindConsumer))
				name := sp.Name()
				if len(name) > MaxSpanName {
					// Cloned: the cut must not keep the whole name alive.
					name = strings.Clone(strings.ToValidUTF8(name[:MaxSpanName], ""))
					b.LongNames++
				}
				b.Spans = append(b.Spans, profiler.Span{
					Tid:          uint32(tid),
					Pid:          spanPid,
					TraceID:      sp.TraceID(),
					SpanID:       sp.SpanID(),
					ParentSpanID: parent,
					ParentRemote: remote,
					Start:        uint64(sp.StartTimestamp()),
					End:          uint64(sp.EndTimestamp()),
					Name:         name,
					WorkerID:     worker,
					Resource:     res,
					ContainerID:  containerID,
					PodUID:       podUID,
					Service:      service,
				})
			}
		}
	}
	return b
}

// strAttr reads a string attribute that names a container, a pod or a
// service: "" when absent, not a string or too long to be one.
func strAttr(m pcommon.Map, key string) string {
	if v, ok := m.Get(key); ok && v.Type() == pcommon.ValueTypeStr && len(v.Str()) <= maxContainerID {
		return v.Str()
	}
	return ""
}

// intAttr reads an integer attribute (see convention.Int).
func intAttr(m pcommon.Map, key string) (int64, bool) {
	if v, ok := m.Get(key); ok && key != "" {
		return convention.Int(v.AsRaw())
	}
	return 0, false
}

// internResource returns the handle of a span resource, remembering it for
// the profiles of its process (see resourceTable); -1 and false for a
// resource over maxResourceSize.
func (c *Converter) internResource(res pcommon.Resource) (int32, bool) {
	attrs := res.Attributes()
	keys := make([]string, 0, attrs.Len())
	size := 0
	attrs.Range(func(k string, v pcommon.Value) bool {
		kv := k + "=" + v.AsString()
		keys = append(keys, kv)
		size += len(kv)
		return size <= maxResourceSize
	})
	if size > maxResourceSize {
		return -1, false
	}
	sort.Strings(keys)
	return c.resources.intern(strings.Join(keys, "\x00"), res), true
}

// Resource returns the span resource of handle h (profiler.Span.Resource,
// profiler.Snapshot.Resource), and false for none.
func (c *Converter) Resource(h int32) (pcommon.Resource, bool) {
	return c.resources.get(h)
}

// Resources returns the number of span resources held.
func (c *Converter) Resources() int {
	return c.resources.len()
}
