package tracefileexporter

import (
	"cmp"
	"encoding/hex"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/perfprof/perfprof/exporter/tracefileexporter/tracefiletest"
	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/wire"
)

// A decoder of spans written from the text of dial9's span wire contract
// (docs/dial9-span-contract.md, part A), independent of internal/analysis
// and of the wire package's typed readers: it reads raw events by the
// names the contract gives.

// contractSpan is one span as the contract resolves it.
type contractSpan struct {
	instance         uint64
	name             string
	start, close     uint64
	elapsed          uint64
	intervals        [][2]uint64 // entered intervals [enter, exit), half-open
	onCPU, blocked   uint64      // the time split (A.8): no samples here,
	asyncWait, sched uint64      // so all of elapsed is unknown
	unknown          uint64
	// perfprof's OTel ids (the contract names none on the wire).
	traceID, spanID, parentID string
}

type contractTrace struct {
	bootID           string
	spans            map[uint64]*contractSpan
	unbalancedEnters int
	unbalancedExits  int
}

func decodeContract(t *testing.T, evs []*wire.Event) contractTrace {
	t.Helper()
	out := contractTrace{spans: map[uint64]*contractSpan{}}
	type mark struct {
		ts, seq, instance, tid uint64
		enter                  bool
	}
	var marks []mark
	for seq, ev := range evs {
		name := ev.Name()
		switch {
		case name == "SegmentMetadataEvent":
			if f := ev.Field("entries"); f != nil && out.bootID == "" {
				for _, kv := range f.Map {
					if kv.Key == "boot_id" && kv.Value != "" {
						out.bootID = kv.Value
						break
					}
				}
			}
		case strings.HasPrefix(name, "SpanClose__") || name == "SpanCloseEvent":
			id, _ := ev.Uint("span_instance_id")
			start, okStart := ev.Uint("start_timestamp_ns")
			sn, okName := ev.Str("span_name")
			require.True(t, id > 0 && okStart && okName, "close without the contract's required fields: %s", name)
			require.Nil(t, out.spans[id], "two closes of instance %d (P3)", id)
			require.GreaterOrEqual(t, ev.Timestamp, start)
			s := &contractSpan{instance: id, name: sn, start: start, close: ev.Timestamp, elapsed: ev.Timestamp - start}
			s.traceID, _ = ev.Str("trace_id")
			s.spanID, _ = ev.Str("otel_span_id")
			s.parentID, _ = ev.Str("otel_parent_span_id")
			out.spans[id] = s
		case strings.HasPrefix(name, "SpanEnter__"), strings.HasPrefix(name, "SpanExit__"):
			id, _ := ev.Uint("span_instance_id")
			tid, okTid := ev.Uint("tid")
			require.True(t, id > 0 && okTid, "%s not in the modern dialect", name)
			marks = append(marks, mark{ev.Timestamp, uint64(seq), id, tid, strings.HasPrefix(name, "SpanEnter__")})
		}
	}
	// Pairing (§4.2): by (timestamp, decode order); a LIFO stack per
	// (span_instance_id, tid); an exit pops the latest enter at or before it.
	slices.SortFunc(marks, func(a, b mark) int {
		return cmp.Or(cmp.Compare(a.ts, b.ts), cmp.Compare(a.seq, b.seq))
	})
	type key struct{ instance, tid uint64 }
	stacks := map[key][]uint64{}
	for _, m := range marks {
		k := key{m.instance, m.tid}
		if m.enter {
			stacks[k] = append(stacks[k], m.ts)
			continue
		}
		st := stacks[k]
		if len(st) == 0 || st[len(st)-1] > m.ts {
			out.unbalancedExits++
			continue
		}
		enter := st[len(st)-1]
		stacks[k] = st[:len(st)-1]
		if s := out.spans[m.instance]; s != nil {
			s.intervals = append(s.intervals, [2]uint64{enter, m.ts})
		}
	}
	for _, st := range stacks {
		out.unbalancedEnters += len(st)
	}
	// The time split: with no samples and no task polls, nothing is
	// classified; unknown_ns is the rest.
	for _, s := range out.spans {
		s.unknown = s.elapsed - s.onCPU - s.blocked - s.asyncWait - s.sched
	}
	return out
}

// isBootID is dial9's {4 lowercase letters}-{digits} form.
func isBootID(s string) bool {
	pre, post, ok := strings.Cut(s, "-")
	if !ok || len(pre) != 4 || post == "" {
		return false
	}
	for _, c := range []byte(pre) {
		if c < 'a' || c > 'z' {
			return false
		}
	}
	for _, c := range []byte(post) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// TestSpansByContract: every OTLP span that says where it ran reads back,
// by the contract, as one span of the same name, duration, ids and parent;
// a span that owned its thread has its lifecycle as its one entered
// interval; spans of two traces on one thread, zero-length spans and
// worker-only spans have none; the boot_id is dial9's and is the same in
// every segment of the run.
func TestSpansByContract(t *testing.T) {
	dir := t.TempDir()
	e := newTestFile(t, dir, func(c *Config) { c.Compress = false })
	base := uint64(time.Now().UnixNano())
	ms := uint64(time.Millisecond)
	tid := func(n int) map[string]any { return map[string]any{convention.ThreadID: n} }
	trB, trC, trD := [16]byte{0xb}, [16]byte{0xc}, [16]byte{0xd}
	type sent struct {
		name         string
		trace        [16]byte
		span, parent [8]byte
		start, end   uint64
		entered      bool
		pid          int
		attrs        map[string]any
	}
	spans := []sent{
		{"GET /a", traceA, [8]byte{0xa1}, [8]byte{}, base, base + 10*ms, true, 1, tid(10)},
		{"db", traceA, [8]byte{0xa2}, [8]byte{0xa1}, base + 2*ms, base + 5*ms, true, 1, tid(10)},
		{"GET /b", trB, [8]byte{0xb1}, [8]byte{}, base, base + 4*ms, false, 1, tid(20)},
		{"GET /c", trC, [8]byte{0xc1}, [8]byte{0x77}, base + 3*ms, base + 6*ms, false, 1, tid(20)},
		{"other pid", trD, [8]byte{0xd1}, [8]byte{}, base, base + ms, true, 2, tid(20)},
		{"instant", trD, [8]byte{0xd2}, [8]byte{0xd1}, base + ms, base + ms, false, 2, tid(30)},
		{"poll", trD, [8]byte{0xd3}, [8]byte{}, base + 7*ms, base + 8*ms, false, 2, map[string]any{convention.WorkerID: 1}},
	}
	tr := ptrace.NewTraces()
	for _, s := range spans {
		tracefiletest.AddSpan(tr, "svc", s.pid, s.name, s.trace, s.span, s.parent, s.start, s.end, s.attrs)
	}
	require.NoError(t, e.pushTraces(t.Context(), tr))
	require.NoError(t, e.rot.Rotate())
	tr = ptrace.NewTraces()
	tracefiletest.AddSpan(tr, "svc", 1, "later", traceA, [8]byte{0xa3}, [8]byte{0xa1}, base+20*ms, base+21*ms, tid(10))
	require.NoError(t, e.pushTraces(t.Context(), tr))
	require.NoError(t, e.shutdown(t.Context()))
	segs := segmentFiles(t, dir)
	require.Len(t, segs, 2)

	first := decodeContract(t, readTRC(t, segs[0]))
	second := decodeContract(t, readTRC(t, segs[1]))
	assert.True(t, isBootID(first.bootID), "boot_id %q", first.bootID)
	assert.Equal(t, first.bootID, second.bootID, "boot_id is the run's")
	assert.Zero(t, first.unbalancedEnters+first.unbalancedExits)
	require.Len(t, first.spans, len(spans))
	require.Len(t, second.spans, 1)
	for id := range second.spans {
		assert.Nil(t, first.spans[id], "instance id %d recycled", id)
	}

	byID := map[string]*contractSpan{}
	for _, s := range first.spans {
		byID[s.spanID] = s
	}
	for _, want := range spans {
		s := byID[hex.EncodeToString(want.span[:])]
		require.NotNil(t, s, want.name)
		assert.Equal(t, want.name, s.name)
		assert.Equal(t, want.end-want.start, s.elapsed, want.name)
		assert.Equal(t, hex.EncodeToString(want.trace[:]), s.traceID, want.name)
		if want.parent == [8]byte{} {
			assert.Empty(t, s.parentID, want.name)
		} else {
			assert.Equal(t, hex.EncodeToString(want.parent[:]), s.parentID, want.name)
		}
		assert.Equal(t, s.elapsed, s.unknown, "%s: all of elapsed is unknown_ns", want.name)
		if want.entered {
			require.Len(t, s.intervals, 1, want.name)
			assert.Equal(t, [2]uint64{s.start, s.close}, s.intervals[0], "%s: entered for its lifecycle", want.name)
		} else {
			assert.Empty(t, s.intervals, want.name)
		}
	}
	// dial9's varint span_id is the instance id on every span event.
	for _, ev := range readTRC(t, segs[0]) {
		if n := ev.Name(); strings.HasPrefix(n, "SpanClose__") || strings.HasPrefix(n, "SpanEnter__") || strings.HasPrefix(n, "SpanExit__") {
			id, _ := ev.Uint("span_id")
			inst, _ := ev.Uint("span_instance_id")
			assert.Equal(t, inst, id, n)
		}
	}
}
