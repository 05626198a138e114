package tracefileexporter

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/perfprof/perfprof/exporter/tracefileexporter/tracefiletest"
	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/wire"
	"github.com/perfprof/perfprof/pkg/pprofiledict"
)

var (
	traceA = [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	spanA  = [8]byte{0xa1, 2, 3, 4, 5, 6, 7, 8}
	spanB  = [8]byte{0xb1, 2, 3, 4, 5, 6, 7, 8}
	spanP  = [8]byte{0xc1, 2, 3, 4, 5, 6, 7, 8}
)

// testData is one push of profiles and one of spans, as the receiver and an
// instrumented tokio app would send them, around Unix time base.
type testData struct {
	base                   uint64
	onTimes, offTimes      []uint64
	offValues              []int64
	hotStack, offStack     int32
	inlineAddr, kernelAddr uint64
}

func buildTestData() (*tracefiletest.ProfBuilder, ptrace.Traces, testData) {
	td := testData{base: uint64(time.Now().UnixNano()), inlineAddr: 0x401234, kernelAddr: 0xffffffff81001000}
	b := tracefiletest.NewProfBuilder()
	// main → handle → (parse inlined into handle) at 0x401234; a kernel frame on top.
	mainL := b.Location(0x401000, tracefiletest.F("main", "/src/main.rs", 10))
	inl := b.Location(td.inlineAddr, tracefiletest.F("parse", "/src/parse.rs", 42), tracefiletest.F("handle", "/src/main.rs", 20))
	kern := b.KernelLocation(td.kernelAddr, tracefiletest.F("do_syscall_64", "", 0))
	sleepL := b.Location(0x402000, tracefiletest.F("nanosleep", "/lib/libc.so.6", 0))
	td.hotStack = b.Stack(kern, inl, mainL)
	td.offStack = b.Stack(sleepL, mainL)

	on := b.Profile(4242, "checkout", false)
	for i := range 5 {
		td.onTimes = append(td.onTimes, td.base+uint64(i)*1_000_000)
	}
	attrs := []int32{b.Attr(convention.ThreadID, 101), b.Attr(convention.ThreadName, "tokio-rt-worker"), b.Attr(convention.WorkerID, 1),
		b.Attr(convention.CPU, 3), b.Attr(convention.RootName, "GET /cart"), b.Attr(convention.CPUTimeDelta, 1_010_000),
		b.Attr(convention.LinkSource, convention.LinkSourceThread)}
	b.Sample(on, td.hotStack, b.Link(traceA, spanA), attrs, td.onTimes, []int64{1, 1, 1, 1, 1})

	off := b.Profile(4242, "checkout", true)
	td.offTimes = []uint64{td.base + 500_000, td.base + 2_500_000}
	td.offValues = []int64{300_000, 700_000}
	offAttrs := []int32{b.Attr(convention.ThreadID, 102), b.Attr(convention.ThreadName, "blocking"), b.Attr(convention.ThreadState, convention.ThreadStateBlocked)}
	b.Sample(off, td.offStack, 0, offAttrs, td.offTimes, td.offValues)

	tr := ptrace.NewTraces()
	// A poll on worker 1 holding the on-CPU samples, then a park, and a
	// plain thread span; and a span that says nothing of where it ran.
	tracefiletest.AddSpan(tr, "checkout", 4242, "poll", traceA, spanA, spanP, td.base-100_000, td.base+4_500_000,
		map[string]any{convention.ThreadID: 101, convention.WorkerID: 1, convention.CodeFilePath: "src/cart.rs", convention.CodeLineNumber: 7, convention.CodeColumnNumber: 5})
	tracefiletest.AddSpan(tr, "checkout", 4242, "park", traceA, spanB, [8]byte{}, td.base+4_500_000, td.base+9_000_000,
		map[string]any{convention.ThreadID: 101, convention.WorkerID: 1, convention.WorkerPark: true, convention.SpanCPUTime: 1234})
	tracefiletest.AddSpan(tr, "checkout", 4242, "GET /cart", traceA, spanP, [8]byte{}, td.base-200_000, td.base+9_000_000,
		map[string]any{convention.ThreadID: 101})
	tracefiletest.AddSpan(tr, "checkout", 4242, "client", traceA, [8]byte{9}, [8]byte{}, td.base, td.base+1, nil)
	return b, tr, td
}

func TestExportTRC(t *testing.T) {
	dir := t.TempDir()
	e := newTestFile(t, dir, nil)
	b, tr, td := buildTestData()
	require.NoError(t, e.pushProfiles(t.Context(), b.Profiles))
	require.NoError(t, e.pushTraces(t.Context(), tr))
	require.NoError(t, e.shutdown(t.Context()))

	segs := segmentFiles(t, dir)
	require.Len(t, segs, 1)
	require.True(t, strings.HasSuffix(segs[0], ".bin.gz"), segs[0])
	evs := readTRC(t, segs[0])
	byName := map[string][]*wire.Event{}
	for _, ev := range evs {
		byName[ev.Name()] = append(byName[ev.Name()], ev)
	}

	// Segment start: clock sync pairs CLOCK_MONOTONIC with the wall clock.
	require.NotEmpty(t, byName["ClockSyncEvent"])
	cs := byName["ClockSyncEvent"][0]
	rt, _ := cs.Uint("realtime_ns")
	offset := int64(rt) - int64(cs.Timestamp)
	assert.InDelta(t, clock.Offset(), offset, 5e6, "clock sync offset")
	md := byName["SegmentMetadataEvent"]
	require.NotEmpty(t, md)
	meta := map[string]string{}
	for _, p := range md[len(md)-1].Field("entries").Map {
		meta[p.Key] = p.Value
	}
	assert.Equal(t, "checkout", meta[convention.MetaService])
	assert.Equal(t, "4242", meta[convention.MetaPid])
	assert.Equal(t, "1", meta[convention.MetaWorkers])
	assert.Equal(t, "1000000", meta[convention.MetaSamplePeriod])
	assert.NotEmpty(t, meta[convention.MetaHost])
	assert.Regexp(t, `^[a-z]{4}-[0-9]+$`, meta[convention.MetaBootID])

	// Symbols: the inlined location has two entries, outermost at depth 0.
	syms := symbolTable(evs)
	assert.Equal(t, []string{"handle /src/main.rs:20", "parse /src/parse.rs:42"}, syms[td.inlineAddr])
	assert.Equal(t, []string{"do_syscall_64 kernel:0"}, syms[td.kernelAddr])
	assert.Equal(t, []string{"main /src/main.rs:10"}, syms[0x401000])

	// Samples: one event per timestamp, times converted with the segment's offset.
	samples := byName["CpuSampleEvent"]
	require.Len(t, samples, 7)
	var on, off []*wire.Event
	for _, s := range samples {
		if src, _ := s.Uint("source"); src == 1 {
			off = append(off, s)
		} else {
			on = append(on, s)
		}
	}
	require.Len(t, on, 5)
	require.Len(t, off, 2)
	for i, s := range on {
		assert.InDelta(t, float64(td.onTimes[i]), float64(int64(s.Timestamp)+offset), 5e6)
		w, _ := s.Uint("worker_id")
		tid, _ := s.Uint("tid")
		cpu, _ := s.Uint("cpu")
		trace, _ := s.Str("trace_id")
		span, _ := s.Str("span_id")
		root, _ := s.Str("span_root_name")
		pid, _ := s.Uint("pid")
		assert.Equal(t, []uint64{1, 101, 3, 4242}, []uint64{w, tid, cpu, pid})
		assert.Equal(t, hex.EncodeToString(traceA[:]), trace)
		assert.Equal(t, hex.EncodeToString(spanA[:]), span)
		assert.Equal(t, "GET /cart", root)
		delta, _ := s.Uint(wire.FieldCPUTimeDeltaNs)
		source, _ := s.Str(wire.FieldLinkSource)
		assert.Equal(t, uint64(1_010_000), delta, "thread.cpu.time_delta")
		assert.Equal(t, convention.LinkSourceThread, source, "span.link.source")
		assert.Equal(t, []uint64{td.kernelAddr, td.inlineAddr, 0x401000}, s.Field("callchain").Frames)
		_, hasValue := s.Uint("value_ns")
		assert.False(t, hasValue, "on-CPU samples carry no value_ns")
	}
	// The thread name is written with the first sample of its thread in a batch.
	name, ok := on[0].Str("thread_name")
	assert.True(t, ok)
	assert.Equal(t, "tokio-rt-worker", name)
	for i, s := range off {
		v, _ := s.Uint("value_ns")
		st, _ := s.Uint("thread_state")
		w, _ := s.Uint("worker_id")
		assert.Equal(t, uint64(td.offValues[i]), v)
		assert.Equal(t, uint64(convention.ThreadStateCodeBlocked), st)
		assert.Equal(t, uint64(convention.NoWorker), w, "no worker.id")
		_, linked := s.Str("span_id")
		assert.False(t, linked)
		_, hasDelta := s.Uint(wire.FieldCPUTimeDeltaNs)
		_, hasSource := s.Str(wire.FieldLinkSource)
		assert.False(t, hasDelta || hasSource, "an unlinked off-CPU sample has no CPU delta or link source")
	}

	// Spans: three said where they ran; the fourth is skipped.
	spans := byName[wire.NameSpanCloseOTel]
	require.Len(t, spans, 3)
	names := map[string]*wire.Event{}
	for _, s := range spans {
		n, _ := s.Str(wire.FieldSpanName)
		names[n] = s
	}
	poll := names["poll"]
	require.NotNil(t, poll)
	start, _ := poll.Uint(wire.FieldStartTimestampNs)
	assert.Equal(t, uint64(4_600_000), poll.Timestamp-start)
	parent, _ := poll.Str(wire.FieldOTelParentSpanID)
	assert.Equal(t, hex.EncodeToString(spanP[:]), parent)
	_, hasParent := names["GET /cart"].Str(wire.FieldOTelParentSpanID)
	assert.False(t, hasParent)
	_, hasWorker := names["GET /cart"].Uint("worker_id")
	assert.False(t, hasWorker)

	// Worker spans: a poll pair and a park pair, in time order.
	require.Len(t, byName["PollStartEvent"], 1)
	require.Len(t, byName["PollEndEvent"], 1)
	ps := byName["PollStartEvent"][0]
	task, _ := ps.Uint("task_id")
	loc, _ := ps.Str("spawn_loc")
	assert.Equal(t, uint64(0xa102030405060708), task)
	assert.Equal(t, "src/cart.rs:7:5", loc)
	require.Len(t, byName["WorkerParkEvent"], 1)
	require.Len(t, byName["WorkerUnparkEvent"], 1)
	cpuNs, _ := byName["WorkerUnparkEvent"][0].Uint("cpu_time_ns")
	assert.Equal(t, uint64(1234), cpuNs)
	assert.Less(t, byName["PollEndEvent"][0].Timestamp, byName["WorkerParkEvent"][0].Timestamp+1)
	assert.Equal(t, byName["PollEndEvent"][0].Timestamp, byName["WorkerParkEvent"][0].Timestamp)
	// Within a batch (here the spans' push) events are in time order, and
	// the poll end comes before the park that starts at the same instant.
	var last uint64
	var order []string
	for _, ev := range evs {
		switch ev.Name() {
		case wire.NameSpanCloseOTel, "PollStartEvent", "PollEndEvent", "WorkerParkEvent", "WorkerUnparkEvent":
		default:
			continue
		}
		assert.GreaterOrEqual(t, ev.Timestamp, last, "%s out of order", ev.Name())
		last = ev.Timestamp
		if ev.Name() != wire.NameSpanCloseOTel {
			order = append(order, ev.Name())
		}
	}
	assert.Contains(t, strings.Join(order, ","), "PollEndEvent,WorkerParkEvent")
}

// TestAddressCollision: two processes with the same address in different
// functions each keep their own symbols.
func TestAddressCollision(t *testing.T) {
	dir := t.TempDir()
	e := newTestFile(t, dir, nil)
	b := tracefiletest.NewProfBuilder()
	la := b.Location(0x400100, tracefiletest.F("alpha", "/a.c", 1))
	lb := b.Location(0x400100, tracefiletest.F("beta", "/b.c", 2))
	now := uint64(time.Now().UnixNano())
	pa := b.Profile(1, "a", false)
	b.Sample(pa, b.Stack(la), 0, []int32{b.Attr(convention.ThreadID, 1)}, []uint64{now}, []int64{1})
	pb := b.Profile(2, "b", false)
	b.Sample(pb, b.Stack(lb), 0, []int32{b.Attr(convention.ThreadID, 2)}, []uint64{now + 1}, []int64{1})
	require.NoError(t, e.pushProfiles(t.Context(), b.Profiles))
	require.NoError(t, e.shutdown(t.Context()))

	evs := readTRC(t, segmentFiles(t, dir)[0])
	syms := symbolTable(evs)
	got := map[uint64]string{}
	for _, ev := range evs {
		if ev.Name() == "CpuSampleEvent" {
			tid, _ := ev.Uint("tid")
			a := ev.Field("callchain").Frames[0]
			require.NotEmpty(t, syms[a], "address %#x has no symbol", a)
			got[tid] = syms[a][0]
			if tid == 2 {
				assert.Equal(t, uint64(1<<63), a, "the second function gets the first synthetic address")
			}
		}
	}
	assert.Equal(t, map[uint64]string{1: "alpha /a.c:1", 2: "beta /b.c:2"}, got)
}

// TestPushesReuseBatch pushes reports of different dictionaries one after
// another, as the receiver does, through the one batch the exporter keeps:
// a later push with fewer and shorter locations (inlined frames before,
// none now) must name its samples with its own symbols only, in both
// formats.
func TestPushesReuseBatch(t *testing.T) {
	for _, format := range []string{FormatTRC, FormatTokioTRC} {
		t.Run(format, func(t *testing.T) {
			dir := t.TempDir()
			e := newTestFile(t, dir, func(c *Config) { c.Format = format })
			now := uint64(time.Now().UnixNano())
			push := func(n int, name string, inlined bool) {
				t.Helper()
				b := tracefiletest.NewProfBuilder()
				p := b.Profile(1, "svc", false)
				for i := range n {
					fns := []tracefiletest.Fn{tracefiletest.F(fmt.Sprintf("%s_%d", name, i), "/"+name+".c", int64(i+1))}
					if inlined {
						fns = append([]tracefiletest.Fn{tracefiletest.F("inlined_"+name, "/inl.h", 7)}, fns...)
					}
					l := b.Location(0x500000+uint64(i)*0x10, fns...)
					b.Sample(p, b.Stack(l), 0, []int32{b.Attr(convention.ThreadID, 10+i)}, []uint64{now}, []int64{1})
				}
				now += 1000
				require.NoError(t, e.pushProfiles(t.Context(), b.Profiles))
			}
			push(40, "first", true)
			push(3, "second", false)
			require.NoError(t, e.shutdown(t.Context()))

			got := map[string]int{} // function of the leaf, by sample
			files := segmentFiles(t, dir)
			require.NotEmpty(t, files)
			if format == FormatTRC {
				syms := map[uint64][]string{}
				for _, f := range files {
					evs := readTRC(t, f)
					for a, s := range symbolTable(evs) {
						syms[a] = s
					}
					for _, ev := range evs {
						if ev.Name() == "CpuSampleEvent" {
							a := ev.Field("callchain").Frames[0]
							require.NotEmpty(t, syms[a], "address %#x has no symbol", a)
							got[strings.Join(syms[a], " < ")]++
						}
					}
				}
			} else {
				names := map[uint64]string{}
				for _, f := range files {
					for _, r := range readLegacy(t, f) {
						if r.Code == wire.LegacyCallframeDef {
							names[r.Addr] = r.Symbol
						}
						if r.Code == wire.LegacyCpuSample {
							got[names[r.Frames[0]]]++
						}
					}
				}
			}
			want := map[string]int{}
			for i := range 40 {
				if format == FormatTRC {
					want[fmt.Sprintf("first_%d /first.c:%d < inlined_first /inl.h:7", i, i+1)] = 1
				} else {
					want[fmt.Sprintf("first_%d", i)] = 1
				}
			}
			for i := range 3 {
				if format == FormatTRC {
					want[fmt.Sprintf("second_%d /second.c:%d", i, i+1)] = 1
				} else {
					want[fmt.Sprintf("second_%d", i)] = 1
				}
			}
			assert.Equal(t, want, got)
		})
	}
}

// TestSpareBatchBounded: the batch kept for the next push is let go when a
// push made it larger than maxSpareEvents, and kept again after a usual one.
func TestSpareBatchBounded(t *testing.T) {
	e := newTestFile(t, t.TempDir(), nil)
	push := func(values int64, n int) {
		t.Helper()
		b := tracefiletest.NewProfBuilder()
		p := b.Profile(1, "svc", false)
		l := b.Location(0x500000, tracefiletest.F("f", "/f.c", 1))
		now := uint64(time.Now().UnixNano())
		ts, vals := make([]uint64, n), make([]int64, n)
		for i := range n {
			ts[i], vals[i] = now+uint64(i), values
		}
		b.Sample(p, b.Stack(l), 0, []int32{b.Attr(convention.ThreadID, 1)}, ts, vals)
		require.NoError(t, e.pushProfiles(t.Context(), b.Profiles))
	}
	push(maxRepeat, maxSpareEvents/maxRepeat+1)
	assert.Nil(t, e.spare.Load(), "a batch of more than maxSpareEvents events was kept")
	push(1, 100)
	assert.NotNil(t, e.spare.Load(), "a usual batch was not kept")
	require.NoError(t, e.shutdown(t.Context()))
}

func TestExportLegacy(t *testing.T) {
	dir := t.TempDir()
	e := newTestFile(t, dir, func(c *Config) { c.Format = FormatTokioTRC; c.Compress = false })
	b, tr, td := buildTestData()
	// A 300-frame stack is cut to 255 frames, leaf first.
	deep := make([]int32, 300)
	for i := range deep {
		deep[i] = b.Location(0x500000+uint64(i), tracefiletest.F(fmt.Sprintf("rec%d", i), "/r.c", int64(i+1)))
	}
	p := b.Profile(4242, "checkout", false)
	b.Sample(p, b.Stack(deep...), 0, []int32{b.Attr(convention.ThreadID, 103)}, []uint64{td.base + 3_000_000}, []int64{1})
	require.NoError(t, e.pushProfiles(t.Context(), b.Profiles))
	require.NoError(t, e.pushTraces(t.Context(), tr))
	require.NoError(t, e.shutdown(t.Context()))

	segs := segmentFiles(t, dir)
	require.Len(t, segs, 1)
	recs := readLegacy(t, segs[0])
	frames, threads, locs := map[uint64]string{}, map[uint32]string{}, map[uint16]string{}
	var samples, polls, parks int
	for _, r := range recs {
		switch r.Code {
		case wire.LegacyCallframeDef:
			frames[r.Addr] = r.Symbol + " " + r.Location
		case wire.LegacyThreadNameDef:
			threads[r.Tid] = r.Name
		case wire.LegacySpawnLocationDef:
			locs[r.SpawnLocID] = r.Name
		case wire.LegacyCpuSample:
			samples++
			for _, a := range r.Frames {
				require.Contains(t, frames, a, "frame %#x used before its CallframeDef", a)
			}
			if r.Tid == 101 {
				assert.Equal(t, "tokio-rt-worker", threads[101])
				assert.Equal(t, uint8(1), r.Worker)
				assert.Equal(t, "handle /src/main.rs:20", frames[td.inlineAddr])
			}
			if r.Tid == 103 {
				require.Len(t, r.Frames, 255)
				assert.Equal(t, uint64(0x500000), r.Frames[0], "the leaf is kept")
			}
		case wire.LegacyPollStart:
			polls++
			assert.Equal(t, "src/cart.rs:7:5", locs[r.SpawnLocID])
			assert.Equal(t, uint32(0x05060708), r.TaskID)
		case wire.LegacyWorkerPark:
			parks++
		}
	}
	assert.Equal(t, 8, samples)
	assert.Equal(t, 1, polls)
	assert.Equal(t, 1, parks)
}

// TestNestedWorkerSpans: spans of one worker that nest become polls only
// for the innermost, in one batch and across batches (the SDK exports a
// child before its parent), so that polls pair up without nesting.
func TestNestedWorkerSpans(t *testing.T) {
	dir := t.TempDir()
	e := newTestFile(t, dir, nil)
	base := uint64(time.Now().UnixNano())
	w := map[string]any{convention.ThreadID: 5, convention.WorkerID: 0}
	children := ptrace.NewTraces()
	tracefiletest.AddSpan(children, "s", 1, "step1", traceA, [8]byte{1}, spanP, base+1000, base+2000, w)
	tracefiletest.AddSpan(children, "s", 1, "step2", traceA, [8]byte{2}, spanP, base+2000, base+3000, w)
	tracefiletest.AddSpan(children, "s", 1, "step2.inner", traceA, [8]byte{3}, [8]byte{2}, base+2100, base+2200, w)
	tracefiletest.AddSpan(children, "s", 1, "other worker", traceA, [8]byte{4}, spanP, base+1500, base+2500, map[string]any{convention.WorkerID: 1})
	require.NoError(t, e.pushTraces(t.Context(), children))
	parent := ptrace.NewTraces()
	tracefiletest.AddSpan(parent, "s", 1, "request", traceA, spanP, [8]byte{}, base, base+4000, w)
	tracefiletest.AddSpan(parent, "s", 1, "next", traceA, [8]byte{5}, [8]byte{}, base+4000, base+5000, w)
	require.NoError(t, e.pushTraces(t.Context(), parent))
	require.NoError(t, e.shutdown(t.Context()))

	var polls []string
	open := map[uint64]bool{}
	spans := 0
	for _, ev := range readTRC(t, segmentFiles(t, dir)[0]) {
		switch ev.Name() {
		case wire.NameSpanCloseOTel:
			spans++
		case "PollStartEvent":
			wk, _ := ev.Uint("worker_id")
			require.False(t, open[wk], "nested poll on worker %d", wk)
			open[wk] = true
			loc, _ := ev.Str("spawn_loc")
			polls = append(polls, loc)
		case "PollEndEvent":
			wk, _ := ev.Uint("worker_id")
			require.True(t, open[wk], "poll end without start on worker %d", wk)
			open[wk] = false
		}
	}
	assert.Equal(t, []string{"step1", "other worker", "step2.inner", "next"}, polls)
	assert.Equal(t, 6, spans, "every span is still a span close")
}

// TestCorrelationAttributes: spans that say where they ran under the
// attribute names the correlation section gives (as the receiver's) are
// read with those names, and the default names are then ignored.
func TestCorrelationAttributes(t *testing.T) {
	dir := t.TempDir()
	e := newTestFile(t, dir, func(c *Config) {
		c.Correlation.ThreadIDAttribute = "os.thread_id"
		c.Correlation.WorkerIDAttribute = "tokio.worker"
	})
	base := uint64(time.Now().UnixNano())
	tr := ptrace.NewTraces()
	tracefiletest.AddSpan(tr, "s", 1, "on thread", traceA, spanA, [8]byte{}, base, base+1000,
		map[string]any{"os.thread_id": 4711})
	// JavaScript SDKs send integers as doubles, some SDKs as strings.
	tracefiletest.AddSpan(tr, "s", 1, "on worker", traceA, spanB, [8]byte{}, base+2000, base+3000,
		map[string]any{"os.thread_id": "4712", "tokio.worker": 3.0})
	tracefiletest.AddSpan(tr, "s", 1, "default names", traceA, spanP, [8]byte{}, base, base+1000,
		map[string]any{convention.ThreadID: 99, convention.WorkerID: 1})
	require.NoError(t, e.pushTraces(t.Context(), tr))
	require.NoError(t, e.shutdown(t.Context()))

	tids, workers := map[string]uint64{}, map[string]uint64{}
	var polls int
	for _, ev := range readTRC(t, segmentFiles(t, dir)[0]) {
		switch ev.Name() {
		case wire.NameSpanCloseOTel:
			name, _ := ev.Str(wire.FieldSpanName)
			if tid, ok := ev.Uint("tid"); ok {
				tids[name] = tid
			}
			if w, ok := ev.Uint("worker_id"); ok {
				workers[name] = w
			}
		case "PollStartEvent":
			polls++
		}
	}
	assert.Equal(t, map[string]uint64{"on thread": 4711, "on worker": 4712}, tids)
	assert.Equal(t, map[string]uint64{"on worker": 3}, workers)
	assert.Equal(t, 1, polls, "the worker span is a poll")
}

// TestSampleMonotonicTimeSurvives: a profile that carries the receiver's
// clock offset goes back to the exact CLOCK_MONOTONIC times of its
// samples, however far the exporter's own estimate of the offset is from
// it (here 3 s: a wall clock stepped between the two readings).
func TestSampleMonotonicTimeSurvives(t *testing.T) {
	dir := t.TempDir()
	e := newTestFile(t, dir, nil)
	off := clock.Offset() + 3_000_000_007
	now := clock.Monotonic()
	mono := []uint64{now + 1, now + 1_234_567, now + 2_000_000_003}
	b := tracefiletest.NewProfBuilder()
	p := b.Profile(4242, "checkout", false)
	b.Dict.SetClockOffset(p, off)
	var unix []uint64
	for _, m := range mono {
		unix = append(unix, clock.Fixed(off).Unix(m))
	}
	b.Sample(p, b.Stack(b.Location(0x401000, tracefiletest.F("main", "main.rs", 1))), 0,
		b.Labels(pprofiledict.Labels{Tid: 7, CPU: -1, Worker: -1}), unix, []int64{1, 1, 1})
	require.NoError(t, e.pushProfiles(t.Context(), b.Profiles))
	require.NoError(t, e.shutdown(t.Context()))

	var got []uint64
	for _, seg := range segmentFiles(t, dir) {
		for _, ev := range readTRC(t, seg) {
			if ev.Name() == "CpuSampleEvent" {
				got = append(got, ev.Timestamp)
			}
		}
	}
	require.Equal(t, mono, got)
}
