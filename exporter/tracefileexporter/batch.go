package tracefileexporter

import (
	"cmp"
	"encoding/binary"
	"slices"
	"strconv"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/wire"
	"github.com/perfprof/perfprof/pkg/pprofiledict"
)

// Profiles are read with pprofiledict's Reader; the attribute keys read
// from spans and resources are internal/convention's
// (docs/trace-conventions.md); those of spans that say where a span ran
// come from the configuration (CorrelationConfig).
const (
	maxRepeat        = 10000 // most events one OTLP sample value may stand for
	syntheticAddrBit = 1 << 63
)

// Event kinds, in the order events of equal timestamps are written: a
// poll that ends where the next begins closes first, and a span leaves its
// thread and closes before the next enters it.
const (
	kPollEnd uint8 = iota
	kSpanExit
	kSpanClose
	kUnpark
	kSpanEnter
	kPollStart
	kPark
	kSample
)

// evRef is one event of a batch, pointing into the batch's groups or spans.
type evRef struct {
	ts   uint64 // CLOCK_MONOTONIC ns
	kind uint8
	idx  int32  // sample group or span
	val  uint64 // sample: off-CPU ns
}

// sampleGroup holds what the events of one OTLP sample share.
type sampleGroup struct {
	stack  int32 // index of a batch stack (batch.stack)
	tid    uint32
	worker uint64
	source uint8
	state  uint8
	cpu    wire.Opt[uint64]
	name   string
	root   string
	link   pprofiledict.Link
	pid    wire.Opt[uint32]
	// cpuDelta and linkSource are the sample's thread.cpu.time_delta (0:
	// none) and span.link.source ("": none).
	cpuDelta   uint64
	linkSource string
	// ctx are the attributes of the thread context the sample was read
	// in; set is the id of their ContextAttributeSet in the segment,
	// given when the batch is encoded.
	ctx []pprofiledict.KV
	set wire.Opt[uint64]
}

// spanEv is one span that said where it ran.
type spanEv struct {
	start, end    uint64
	trace         pcommon.TraceID
	span, parent  pcommon.SpanID // parent: empty for a root span
	name, service string
	spawnLoc      string
	tid           wire.Opt[uint32]
	worker        wire.Opt[uint64]
	pid           wire.Opt[uint32]
	park          bool
	cpuTimeNs     uint64
	// inst is the span's span_instance_id (and dial9 span_id), given
	// when the batch is written; parentInst its parent's, 0 when not
	// known.
	inst, parentInst uint64
	// entered: the span had its thread for its whole lifecycle (enter and
	// exit events are written).
	entered bool
	// attrs are its close-time attributes: batch.spanAttrs[attrs[0]:attrs[1]].
	attrs [2]int32
}

// frame is one line of a location, outermost last as in pprof.
type frame struct {
	name, file string
	line       uint64
}

// location is a dictionary location as the batch uses it.
type location struct {
	// key is its identity, frames or mapping and address if unsymbolized:
	// batch.keys[keyOff:keyEnd].
	keyOff, keyEnd int32
	addr           uint64 // address in the profile
	frames         []frame
	kernel         bool
}

// batch is what one push becomes: events in time order over sample groups
// and spans, with the locations their stacks use. The exporter keeps one
// for the next push (reset): a push of a report at 999 Hz grew these
// slices anew each time, a twentieth of the collector's CPU.
type batch struct {
	evs    []evRef
	groups []sampleGroup
	spans  []spanEv

	locs      []location // used locations, in first-use order
	keys      []byte     // the locations' identities, one after another
	stackLocs []int32    // the used stacks' indices into locs, leaf first, one after another
	stackEnd  []int32    // per used stack: where its indices end in stackLocs
	stackIdx  map[int32]int32
	locIdx    map[int32]int32
	dict      pprofiledict.Reader
	loc       pprofiledict.Location // scratch of location

	workerSpans []int32 // spans with worker.id, candidates for polls and parks

	services, hosts, pids, workers []string
	period                         int64
	noThread                       int
	// spanAttrs are the close-time attributes of the spans
	// (spanEv.attrs indexes them); attrsCut counts values cut to
	// maxSpanAttrValue.
	spanAttrs []wire.StringPair
	attrsCut  int
}

// reset empties b for the next push and keeps the room it grew to. What
// refers to the last push's data (strings of its dictionary) is cleared,
// so that the batch does not keep it alive.
func (b *batch) reset() {
	clear(b.groups)
	clear(b.spans)
	for i := range b.locs {
		clear(b.locs[i].frames)
	}
	clear(b.services)
	clear(b.hosts)
	clear(b.pids)
	clear(b.workers)
	b.evs, b.groups, b.spans = b.evs[:0], b.groups[:0], b.spans[:0]
	b.locs, b.keys, b.stackLocs, b.stackEnd = b.locs[:0], b.keys[:0], b.stackLocs[:0], b.stackEnd[:0]
	clear(b.stackIdx)
	clear(b.locIdx)
	b.dict.Reset(pprofile.ProfilesDictionary{})
	clear(b.loc.Frames)
	b.workerSpans = b.workerSpans[:0]
	b.services, b.hosts, b.pids, b.workers = b.services[:0], b.hosts[:0], b.pids[:0], b.workers[:0]
	clear(b.spanAttrs)
	b.spanAttrs = b.spanAttrs[:0]
	b.period, b.noThread, b.attrsCut = 0, 0, 0
}

// stack returns the location indices of the batch's stack i, leaf first.
func (b *batch) stack(i int32) []int32 {
	start := int32(0)
	if i > 0 {
		start = b.stackEnd[i-1]
	}
	return b.stackLocs[start:b.stackEnd[i]]
}

// key returns the identity of location i.
func (b *batch) key(i int) []byte { return b.keys[b.locs[i].keyOff:b.locs[i].keyEnd] }

// sort orders the events by time, then kind, then what they refer to: a
// total order, so an unstable sort gives the same file every time. A
// stable sort cost 2.6 times as much (BenchmarkSortEvents): the events of
// each sample group come in their own time order, the groups interleaved.
func (b *batch) sort() {
	slices.SortFunc(b.evs, func(x, y evRef) int {
		if c := cmp.Compare(x.ts, y.ts); c != 0 {
			return c
		}
		if c := cmp.Compare(x.kind, y.kind); c != 0 {
			return c
		}
		if c := cmp.Compare(x.idx, y.idx); c != 0 {
			return c
		}
		return cmp.Compare(x.val, y.val)
	})
}

// addStack returns the batch's index of dictionary stack si, adding it
// and its locations on first use.
func (b *batch) addStack(si int32) int32 {
	if i, ok := b.stackIdx[si]; ok {
		return i
	}
	raw := b.dict.Stack(si)
	for j := range raw.Len() {
		b.stackLocs = append(b.stackLocs, b.location(raw.At(j)))
	}
	i := int32(len(b.stackEnd))
	b.stackEnd = append(b.stackEnd, int32(len(b.stackLocs)))
	b.stackIdx[si] = i
	return i
}

func (b *batch) location(li int32) int32 {
	if i, ok := b.locIdx[li]; ok {
		return i
	}
	i := int32(len(b.locs))
	if len(b.locs) < cap(b.locs) {
		// The slot of a location of an earlier push: its frames' room
		// serves again.
		b.locs = b.locs[:i+1]
		b.locs[i] = location{frames: b.locs[i].frames[:0]}
	} else {
		b.locs = append(b.locs, location{})
	}
	l := &b.locs[i]
	l.keyOff = int32(len(b.keys))
	key := b.keys
	pl := &b.loc
	b.dict.Location(li, pl)
	l.addr, l.kernel = pl.Addr, pl.Kernel
	for _, ln := range pl.Frames {
		f := frame{name: ln.Name, file: ln.File}
		if ln.Line > 0 {
			f.line = uint64(ln.Line)
		}
		if l.kernel && f.file == "" {
			f.file = "kernel"
		}
		l.frames = append(l.frames, f)
		key = append(key, f.name...)
		key = append(key, 0)
		key = append(key, f.file...)
		key = append(key, 0)
		key = strconv.AppendUint(key, f.line, 10)
		key = append(key, 1)
	}
	if len(l.frames) == 0 {
		// Unsymbolized: the address means something only in its mapping.
		key = append(key, 2)
		key = append(key, pl.Mapping.File...)
		key = append(key, 0)
		key = strconv.AppendUint(key, l.addr, 16)
	}
	b.keys = key
	l.keyEnd = int32(len(b.keys))
	b.locIdx[li] = i
	return i
}

// addProfiles turns every sample timestamp of pd into a CpuSampleEvent.
// Timestamps go back to CLOCK_MONOTONIC with the offset the receiver
// converted them with (convention.ClockOffset), so that they are the perf
// records' own; a profile without one (from another source) is converted
// with own, the exporter's estimate.
func (b *batch) addProfiles(pd pprofile.Profiles, own clock.Fixed) {
	b.dict.Reset(pd.Dictionary())
	if b.stackIdx == nil {
		b.stackIdx, b.locIdx = map[int32]int32{}, map[int32]int32{}
	}
	rps := pd.ResourceProfiles()
	for i := range rps.Len() {
		rp := rps.At(i)
		res := resourceOf(rp.Resource().Attributes())
		b.addResource(res)
		sps := rp.ScopeProfiles()
		for j := range sps.Len() {
			profs := sps.At(j).Profiles()
			for k := range profs.Len() {
				prof := profs.At(k)
				clk := own
				if o, ok := b.dict.ClockOffset(prof); ok {
					clk = clock.Fixed(o)
				}
				b.addProfile(prof, res, clk)
			}
		}
	}
}

type resource struct {
	service, host string
	pid           wire.Opt[uint32]
}

func resourceOf(attrs pcommon.Map) resource {
	var r resource
	if v, ok := attrs.Get(convention.ServiceName); ok {
		r.service = v.AsString()
	}
	if v, ok := attrs.Get(convention.HostName); ok {
		r.host = v.AsString()
	}
	if n, ok := getInt(attrs, convention.ProcessPid); ok && n >= 0 && n <= 1<<32-1 {
		r.pid = wire.Some(uint32(n))
	}
	return r
}

func (b *batch) addResource(r resource) {
	b.services = append(b.services, r.service)
	b.hosts = append(b.hosts, r.host)
	if r.pid.Valid {
		b.pids = append(b.pids, strconv.FormatUint(uint64(r.pid.V), 10))
	}
}

func (b *batch) addProfile(prof pprofile.Profile, res resource, clk clock.Fixed) {
	off := b.dict.OffCPU(prof)
	if p := b.dict.PeriodNs(prof); !off && p > 0 {
		b.period = p
	}
	samples := prof.Samples()
	for i := range samples.Len() {
		s := samples.At(i)
		l := b.dict.Labels(s.AttributeIndices())
		g := sampleGroup{stack: b.addStack(s.StackIndex()), tid: l.Tid, name: l.ThreadName, root: l.Root,
			state: convention.ThreadStateCode(l.State), worker: convention.NoWorker, pid: res.pid, link: b.dict.Link(s.LinkIndex()),
			cpuDelta: l.CPUDelta, linkSource: l.LinkSource, ctx: l.Context}
		if off {
			g.source = convention.SourceOffCPU
		}
		if l.Worker >= 0 {
			g.worker = uint64(l.Worker)
		}
		if l.CPU >= 0 {
			g.cpu = wire.Some(uint64(l.CPU))
		}
		gi := int32(len(b.groups))
		b.groups = append(b.groups, g)
		pprofiledict.Values(prof, s, func(t uint64, v int64) { b.addSampleEvents(gi, clk.Mono(t), v, off) })
	}
}

// addSampleEvents adds the events of one sample value: one off-CPU event
// carrying its nanoseconds, or v on-CPU events (v samples at that time).
func (b *batch) addSampleEvents(gi int32, ts uint64, v int64, off bool) {
	if off {
		b.evs = append(b.evs, evRef{ts: ts, kind: kSample, idx: gi, val: uint64(max(v, 0))})
		return
	}
	for range min(max(v, 1), maxRepeat) {
		b.evs = append(b.evs, evRef{ts: ts, kind: kSample, idx: gi})
	}
}

// getInt reads the integer attribute key of m (convention.Int: SDKs type
// ids differently); "" names no attribute.
func getInt(m pcommon.Map, key string) (int64, bool) {
	if key == "" {
		return 0, false
	}
	v, ok := m.Get(key)
	if !ok {
		return 0, false
	}
	return convention.Int(v.AsRaw())
}

// addTraces adds the spans of td that say where they ran, by the span
// attributes that keys names: a SpanEvent for each, and poll or park
// events for worker spans.
func (b *batch) addTraces(td ptrace.Traces, clk clock.Fixed, keys CorrelationConfig, attrNames []string) {
	rss := td.ResourceSpans()
	for i := range rss.Len() {
		rs := rss.At(i)
		res := resourceOf(rs.Resource().Attributes())
		b.addResource(res)
		sss := rs.ScopeSpans()
		for j := range sss.Len() {
			spans := sss.At(j).Spans()
			for k := range spans.Len() {
				b.addSpan(spans.At(k), res, clk, keys, attrNames)
			}
		}
	}
}

func (b *batch) addSpan(s ptrace.Span, res resource, clk clock.Fixed, keys CorrelationConfig, attrNames []string) {
	attrs := s.Attributes()
	var ev spanEv
	if n, ok := getInt(attrs, keys.ThreadIDAttribute); ok && n >= 0 && n <= 1<<32-1 {
		ev.tid = wire.Some(uint32(n))
	}
	if n, ok := getInt(attrs, keys.WorkerIDAttribute); ok && n >= 0 {
		ev.worker = wire.Some(uint64(n))
	}
	if !ev.tid.Valid && !ev.worker.Valid {
		b.noThread++
		return
	}
	ev.start = clk.Mono(uint64(s.StartTimestamp()))
	ev.end = clk.Mono(uint64(s.EndTimestamp()))
	if ev.end < ev.start {
		ev.end = ev.start
	}
	ev.trace, ev.span, ev.parent = s.TraceID(), s.SpanID(), s.ParentSpanID()
	ev.name, ev.service, ev.pid = s.Name(), res.service, res.pid
	if v, ok := attrs.Get(convention.WorkerPark); ok && v.Type() == pcommon.ValueTypeBool && v.Bool() {
		ev.park = true
	}
	if n, ok := getInt(attrs, convention.SpanCPUTime); ok && n > 0 {
		ev.cpuTimeNs = uint64(n)
	}
	ev.spawnLoc = ev.name
	if f, ok := attrs.Get(convention.CodeFilePath); ok && f.AsString() != "" {
		line, _ := getInt(attrs, convention.CodeLineNumber)
		col, _ := getInt(attrs, convention.CodeColumnNumber)
		ev.spawnLoc = f.AsString() + ":" + strconv.FormatInt(line, 10) + ":" + strconv.FormatInt(col, 10)
	}
	ev.attrs[0] = int32(len(b.spanAttrs))
	for _, name := range attrNames {
		if v, ok := attrs.Get(name); ok {
			val := v.AsString()
			if len(val) > maxSpanAttrValue {
				val = strings.ToValidUTF8(val[:maxSpanAttrValue], "")
				b.attrsCut++
			}
			b.spanAttrs = append(b.spanAttrs, wire.StringPair{Key: name, Value: val})
		}
	}
	ev.attrs[1] = int32(len(b.spanAttrs))
	si := int32(len(b.spans))
	b.spans = append(b.spans, ev)
	b.evs = append(b.evs, evRef{ts: ev.end, kind: kSpanClose, idx: si})
	if ev.worker.Valid {
		b.workers = append(b.workers, strconv.FormatUint(ev.worker.V, 10))
		if ev.end > ev.start {
			b.workerSpans = append(b.workerSpans, si)
		}
	}
}

// addThreadIntervals adds enter and exit events for the spans of the batch
// that owned their thread: those with a thread id, of nonzero length, and
// with no span of another trace open on the same thread (pid and tid) at
// any time during them, in this push or in those before (threads remembers
// the spans written on each thread). Spans of one trace may nest on a
// thread: each of them was entered for its whole lifecycle. A span that
// shares its thread with one written in an earlier push is not entered;
// the earlier one was, and stays so.
func (b *batch) addThreadIntervals(threads *threadSet) {
	type key = threadKey
	var idx []int32
	for i := range b.spans {
		if s := &b.spans[i]; s.tid.Valid && s.end > s.start {
			idx = append(idx, int32(i))
		}
	}
	k := func(i int32) key { return key{b.spans[i].pid.V, b.spans[i].tid.V} }
	slices.SortFunc(idx, func(x, y int32) int {
		kx, ky := k(x), k(y)
		if c := cmp.Compare(kx.pid, ky.pid); c != 0 {
			return c
		}
		if c := cmp.Compare(kx.tid, ky.tid); c != 0 {
			return c
		}
		if c := cmp.Compare(b.spans[x].start, b.spans[y].start); c != 0 {
			return c
		}
		return cmp.Compare(x, y)
	})
	shared := make([]bool, len(idx))
	for i, si := range idx {
		s := &b.spans[si]
		for j := i + 1; j < len(idx) && k(idx[j]) == k(si) && b.spans[idx[j]].start < s.end; j++ {
			if b.spans[idx[j]].trace != s.trace {
				shared[i], shared[j] = true, true
			}
		}
	}
	for i, si := range idx {
		s := &b.spans[si]
		if t := threads.m[k(si)]; t != nil && t.overlapsOther(s.start, s.end, s.trace) {
			shared[i] = true
		}
	}
	for i, si := range idx {
		s := &b.spans[si]
		threads.add(k(si), s.start, s.end, s.trace)
		if !shared[i] {
			s.entered = true
			b.evs = append(b.evs, evRef{ts: s.start, kind: kSpanEnter, idx: si}, evRef{ts: s.end, kind: kSpanExit, idx: si})
		}
	}
}

// addWorkerEvents adds poll or park events for the worker spans of the
// batch that do not overlap a poll or park already written for their
// worker, innermost spans first, and returns how many did overlap. A
// worker does one thing at a time: dial9 readers pair starts and ends
// and allow no nesting. Spans of one worker that nest (a request span and
// the spans of its steps) yield polls for the innermost; the others are
// still SpanEvents.
func (b *batch) addWorkerEvents(busy map[uint64]*intervals) int {
	idx := slices.Clone(b.workerSpans)
	slices.SortStableFunc(idx, func(x, y int32) int {
		dx, dy := b.spans[x].end-b.spans[x].start, b.spans[y].end-b.spans[y].start
		if dx != dy {
			if dx < dy {
				return -1
			}
			return 1
		}
		return 0
	})
	overlapping := 0
	for _, si := range idx {
		s := &b.spans[si]
		iv := busy[s.worker.V]
		if iv == nil {
			if len(busy) >= maxBusyWorkers {
				forgetIdle(busy, maxBusyWorkers)
			}
			iv = &intervals{}
			busy[s.worker.V] = iv
		}
		if !iv.add(s.start, s.end) {
			overlapping++
			continue
		}
		if s.park {
			b.evs = append(b.evs, evRef{ts: s.start, kind: kPark, idx: si}, evRef{ts: s.end, kind: kUnpark, idx: si})
		} else {
			b.evs = append(b.evs, evRef{ts: s.start, kind: kPollStart, idx: si}, evRef{ts: s.end, kind: kPollEnd, idx: si})
		}
	}
	return overlapping
}

// A worker's written polls are remembered for intervalHorizon after the
// latest one, and at most maxIntervals of them: a span that ends more than
// that before the polls it would overlap, and arrives after them, is not
// noticed (a span that overlaps a remembered poll is, however long it
// is). The count bound keeps a worker that ends spans at a high rate
// under 1 MiB (at the soak's 625 spans/s a worker, it is 52 s of polls).
const (
	intervalHorizon = 5 * 60 * 1e9
	maxIntervals    = 1 << 15
)

// maxBusyWorkers bounds the workers whose polls are remembered. Worker ids
// are the client's to choose: a runtime has a few dozen workers, a client
// that invents an id per span would otherwise grow the map for the
// collector's life. Past it, the half of the workers whose latest poll is
// the oldest are forgotten: a span of theirs that overlaps a poll written
// before is not noticed.
const maxBusyWorkers = 4096

// forgetIdle drops the half of m (workers or threads) whose latest
// interval ends the earliest: once per max/2 new keys, not once each.
func forgetIdle[K comparable, V interface {
	last() uint64
	len() int
}](m map[K]V, max int) {
	ends := make([]uint64, 0, len(m))
	for _, iv := range m {
		ends = append(ends, iv.last())
	}
	slices.Sort(ends)
	cut := ends[len(ends)/2]
	for w, iv := range m {
		if iv.last() < cut || iv.len() == 0 {
			delete(m, w)
		}
	}
	// Keys whose intervals end at the same time as the cut stay; all at
	// one time (a client's made-up spans) would stay all.
	if len(m) >= max {
		for w := range m {
			delete(m, w)
			if len(m) < max/2 {
				break
			}
		}
	}
}

// intervals is a set of disjoint half-open intervals [start, end), sorted:
// iv[head:]. Forgotten intervals are skipped by moving head and dropped
// from the slice once they are a quarter of it, so that forgetting costs
// O(1) amortized rather than a copy of the set per poll, and the slice
// stays within a third over what it remembers.
type intervals struct {
	iv   [][2]uint64
	head int
}

// add inserts [a, b) unless it overlaps an interval of the set, and
// reports whether it did. Intervals ending more than intervalHorizon
// before the latest end, and all but the latest maxIntervals, are
// forgotten.
func (s *intervals) add(a, b uint64) bool {
	live := s.iv[s.head:]
	// The first interval ending after a is the only one that can overlap.
	i, _ := slices.BinarySearchFunc(live, a, func(x [2]uint64, t uint64) int {
		if x[1] <= t {
			return -1
		}
		return 1
	})
	if i < len(live) && live[i][0] < b {
		return false
	}
	s.iv = slices.Insert(s.iv, s.head+i, [2]uint64{a, b})
	if last := s.iv[len(s.iv)-1][1]; last > intervalHorizon {
		for s.head < len(s.iv) && s.iv[s.head][1] < last-intervalHorizon {
			s.head++
		}
	}
	if n := len(s.iv) - s.head; n > maxIntervals {
		s.head += n - maxIntervals
	}
	if s.head > 0 && s.head >= len(s.iv)/4 {
		s.iv = s.iv[:copy(s.iv, s.iv[s.head:])]
		s.head = 0
	}
	return true
}

// len is the number of intervals remembered.
func (s *intervals) len() int { return len(s.iv) - s.head }

// last is the end of the latest interval remembered, 0 if none.
func (s *intervals) last() uint64 {
	if s.len() == 0 {
		return 0
	}
	return s.iv[len(s.iv)-1][1]
}

// taskID is the span id read as a big-endian u64, so that a poll's task
// is its SpanEvent's span_id.
func taskID(span pcommon.SpanID) uint64 { return binary.BigEndian.Uint64(span[:]) }

// addrTable gives every location identity one address in the trace files.
// A location keeps its own address unless another identity took it first;
// then it gets a synthetic, non-canonical one. The table is shared by all
// segments, so an address means the same in every segment.
type addrTable struct {
	byKey  map[string]uint64
	byAddr map[uint64]string
	next   uint64
}

// resolve returns the address of the location with identity key and
// address addr.
func (t *addrTable) resolve(key []byte, addr uint64) uint64 {
	if a, ok := t.byKey[string(key)]; ok {
		return a
	}
	if t.byKey == nil {
		t.byKey, t.byAddr = map[string]uint64{}, map[uint64]string{}
	}
	if _, taken := t.byAddr[addr]; taken {
		for {
			addr = syntheticAddrBit | t.next
			t.next++
			if _, taken := t.byAddr[addr]; !taken {
				break
			}
		}
	}
	k := string(key)
	t.byKey[k] = addr
	t.byAddr[addr] = k
	return addr
}

// Bounds on the close-time attributes of a span: the names configured
// (span_attributes), and the bytes of a value.
const (
	maxSpanAttrs     = 16
	maxSpanAttrValue = 256
)
