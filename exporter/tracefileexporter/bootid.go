package tracefileexporter

import (
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// bootID is the collector run's boot_id (segment metadata), in dial9's
// form: four lowercase letters from the wall clock at first use, "-", the
// process id. Every exporter of the process writes the same one (the S3
// keys' boot= is read back from the metadata), and span
// instance ids (spanInstances) are unique under it.
var bootID = sync.OnceValue(func() string {
	return formatBootID(uint64(time.Now().UnixNano()), os.Getpid())
})

func formatBootID(ns uint64, pid int) string {
	var b [4]byte
	for i := range b {
		b[i] = 'a' + byte(ns%26)
		ns /= 26
	}
	return string(b[:]) + "-" + strconv.Itoa(max(pid, 0))
}

// spanInstances is the last span_instance_id given out in this process,
// shared by its exporters: ids start at 1 and are never recycled.
var spanInstances atomic.Uint64

// recentSpans maps the OTel ids of the spans written lately to their
// instance ids, so that a child's close names its parent's
// (parent_span_instance_id) when the parent came in the same batch or
// before it. Two generations of at most maxRecentSpans: a parent written
// more than that many spans before its child is not found, and the child
// says nothing of it rather than a made-up id.
type recentSpans struct {
	cur, prev map[recentKey]uint64
}

type recentKey struct {
	trace pcommon.TraceID
	span  pcommon.SpanID
}

// maxRecentSpans bounds a generation: 32 768 spans, about 2 MiB, 6 s of
// spans at 5 000 a second.
const maxRecentSpans = 1 << 15

func (r *recentSpans) put(trace pcommon.TraceID, span pcommon.SpanID, inst uint64) {
	if r.cur == nil || len(r.cur) >= maxRecentSpans {
		r.prev, r.cur = r.cur, make(map[recentKey]uint64, min(2*len(r.cur), maxRecentSpans))
	}
	r.cur[recentKey{trace, span}] = inst
}

// get returns the instance id of a span written lately, 0 if none.
func (r *recentSpans) get(trace pcommon.TraceID, span pcommon.SpanID) uint64 {
	k := recentKey{trace, span}
	if id, ok := r.cur[k]; ok {
		return id
	}
	return r.prev[k]
}
