package tracefileexporter

import (
	"cmp"
	"encoding/hex"
	"slices"
	"strconv"
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
	tid              uint64      // of the intervals
	onCPU, blocked   uint64      // the time split (A.8)
	asyncWait, sched uint64
	unknown          uint64
	onSamples        int
	// perfprof's OTel ids (the contract names none on the wire).
	traceID, spanID, parentID string
	// The optional close fields: parent_span_instance_id (0: absent),
	// first_enter_timestamp_ns, active_ns.
	parentInstance uint64
	firstEnter     uint64
	hasFirstEnter  bool
	active         uint64
	attributes     map[string]string // close-time attributes
}

type contractTrace struct {
	bootID           string
	periodNs         uint64
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
	var samples [][2]uint64 // on-CPU: time, tid
	for seq, ev := range evs {
		name := ev.Name()
		switch {
		case name == "SegmentMetadataEvent":
			if f := ev.Field("entries"); f != nil {
				for _, kv := range f.Map {
					if kv.Key == "boot_id" && kv.Value != "" && out.bootID == "" {
						out.bootID = kv.Value
					}
					if kv.Key == "perfprof.sample_period_ns" {
						out.periodNs, _ = strconv.ParseUint(kv.Value, 10, 64)
					}
				}
			}
		case name == "CpuSampleEvent":
			if src, _ := ev.Uint("source"); src == 0 {
				tid, _ := ev.Uint("tid")
				samples = append(samples, [2]uint64{ev.Timestamp, tid})
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
			s.parentInstance, _ = ev.Uint("parent_span_instance_id")
			s.firstEnter, s.hasFirstEnter = ev.Uint("first_enter_timestamp_ns")
			s.active, _ = ev.Uint("active_ns")
			if f := ev.Field("attributes"); f != nil && !f.Absent && len(f.Map) > 0 {
				s.attributes = map[string]string{}
				for _, kv := range f.Map {
					s.attributes[kv.Key] = kv.Value
				}
			}
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
			s.tid = m.tid
		}
	}
	for _, st := range stacks {
		out.unbalancedEnters += len(st)
	}
	// The time split (A.8): on_cpu_ns_est is the CPU samples of the span's
	// thread in its entered intervals × the sample period, clamped to the
	// active wall time (the intervals' union); blocked_ns_est the rest of
	// the active wall time; with no task polls, async_wait_ns and
	// scheduler_delay_ns are unknown (0); unknown_ns is the rest of
	// elapsed. A split that does not fit in elapsed is dropped.
	for _, s := range out.spans {
		var active uint64
		for _, iv := range s.intervals {
			active += iv[1] - iv[0] // one thread: the intervals do not overlap
			for _, smp := range samples {
				if smp[1] == s.tid && smp[0] >= iv[0] && smp[0] < iv[1] {
					s.onSamples++
				}
			}
		}
		s.onCPU = min(uint64(s.onSamples)*out.periodNs, active)
		s.blocked = active - s.onCPU
		if sum := s.onCPU + s.blocked + s.asyncWait + s.sched; sum <= s.elapsed {
			s.unknown = s.elapsed - sum
		} else {
			s.onCPU, s.blocked, s.asyncWait, s.sched, s.unknown = 0, 0, 0, 0, s.elapsed
		}
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
		{"GET /a", traceA, [8]byte{0xa1}, [8]byte{}, base, base + 10*ms, true, 1,
			map[string]any{convention.ThreadID: 10, convention.HTTPRoute: "/a/{id}", "http.response.status_code": 200, "user.secret": "x"}},
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
	// On-CPU samples (period 1 ms) of thread 10 at 1, 3, 4 and 12 ms: three
	// in GET /a, two of them in db, one after both; and of thread 20 at
	// 1 ms, in GET /b, which was never entered.
	pb := tracefiletest.NewProfBuilder()
	leaf := pb.Stack(pb.Location(0x401000, tracefiletest.F("work", "/src/w.rs", 1)))
	on := pb.Profile(1, "svc", false)
	pb.Sample(on, leaf, 0, []int32{pb.Attr(convention.ThreadID, 10)},
		[]uint64{base + ms, base + 3*ms, base + 4*ms, base + 12*ms}, []int64{1, 1, 1, 1})
	pb.Sample(on, leaf, 0, []int32{pb.Attr(convention.ThreadID, 20)}, []uint64{base + ms}, []int64{1})
	require.NoError(t, e.pushProfiles(t.Context(), pb.Profiles))
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
		// The split: GET /a holds three samples, db two: 1 ms each on CPU,
		// the rest of their entered time blocked; the others were never
		// entered, all of their time is unknown.
		wantOn := map[string]int{"GET /a": 3, "db": 2}[want.name]
		assert.Equal(t, wantOn, s.onSamples, "%s: samples in its entered intervals", want.name)
		assert.Equal(t, uint64(wantOn)*ms, s.onCPU, "%s: on_cpu_ns_est", want.name)
		if want.entered {
			assert.Equal(t, s.elapsed-s.onCPU, s.blocked, "%s: blocked_ns_est", want.name)
			assert.Zero(t, s.unknown, "%s: unknown_ns", want.name)
		} else {
			assert.Equal(t, s.elapsed, s.unknown, "%s: all of elapsed is unknown_ns", want.name)
		}
		assert.Equal(t, s.elapsed, s.onCPU+s.blocked+s.asyncWait+s.sched+s.unknown, "%s: the five parts add up", want.name)
		if want.entered {
			require.Len(t, s.intervals, 1, want.name)
			assert.Equal(t, [2]uint64{s.start, s.close}, s.intervals[0], "%s: entered for its lifecycle", want.name)
			assert.True(t, s.hasFirstEnter && s.firstEnter == s.start, "%s: first_enter_timestamp_ns", want.name)
			assert.Equal(t, s.elapsed, s.active, "%s: active_ns is the entered interval", want.name)
		} else {
			assert.Empty(t, s.intervals, want.name)
			assert.False(t, s.hasFirstEnter, "%s: first_enter_timestamp_ns of a span never entered", want.name)
			assert.Zero(t, s.active, want.name)
		}
		// Close-time attributes: those span_attributes names, as strings.
		if want.name == "GET /a" {
			assert.Equal(t, map[string]string{convention.HTTPRoute: "/a/{id}", "http.response.status_code": "200"}, s.attributes)
		} else {
			assert.Nil(t, s.attributes, "%s: no attribute named by span_attributes", want.name)
		}
		// parent_span_instance_id: the parent's, when it was written;
		// never made up for a parent that was not (GET /c's).
		if p := byID[hex.EncodeToString(want.parent[:])]; p != nil {
			assert.Equal(t, p.instance, s.parentInstance, "%s: parent_span_instance_id", want.name)
		} else {
			assert.Zero(t, s.parentInstance, "%s: parent_span_instance_id of a parent never written", want.name)
		}
	}
	// A child in a later push names its parent written before.
	for _, s := range second.spans {
		assert.Equal(t, byID[hex.EncodeToString([]byte{0xa1, 0, 0, 0, 0, 0, 0, 0})].instance, s.parentInstance, "later: parent_span_instance_id")
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

// A span that shares its thread with a span of another trace written in
// an earlier push was not entered; one of the same trace nested in it, and
// one after it, were.
func TestSpansOwnershipAcrossPushes(t *testing.T) {
	dir := t.TempDir()
	e := newTestFile(t, dir, func(c *Config) { c.Compress = false })
	base := uint64(time.Now().UnixNano())
	ms := uint64(time.Millisecond)
	tid := map[string]any{convention.ThreadID: 30}
	push := func(name string, trace byte, span byte, start, end uint64) {
		tr := ptrace.NewTraces()
		tracefiletest.AddSpan(tr, "svc", 1, name, [16]byte{trace}, [8]byte{span}, [8]byte{}, base+start*ms, base+end*ms, tid)
		require.NoError(t, e.pushTraces(t.Context(), tr))
	}
	push("first", 0xa, 1, 0, 10)
	push("other trace, overlapping", 0xb, 2, 5, 15)
	push("same trace, nested", 0xa, 3, 2, 3)
	push("after", 0xc, 4, 20, 25)
	require.NoError(t, e.shutdown(t.Context()))
	got := map[string]int{}
	for _, seg := range segmentFiles(t, dir) {
		for _, s := range decodeContract(t, readTRC(t, seg)).spans {
			got[s.name] = len(s.intervals)
		}
	}
	assert.Equal(t, map[string]int{"first": 1, "other trace, overlapping": 0, "same trace, nested": 1, "after": 1}, got)
}
