package perfprofreceiver

import (
	"crypto/rand"
	"path/filepath"
	"strconv"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/perfprof/perfprof/internal/sched"
	"github.com/perfprof/perfprof/internal/symbolize"
)

// loc is one resolved stack address of one process. Locations are shared
// by pointer between the stacks of a process, so the dictionary can intern
// them by identity.
type loc struct {
	addr    uint64
	kernel  bool
	mapping *symbolize.Mapping // nil when in no known mapping (or kernel)
	frames  []symbolize.Frame  // innermost first; empty when unresolved
}

// rawSample is one sample waiting for its report: an on-CPU perf sample,
// or (state != 0) a group of off-CPU time.
type rawSample struct {
	time uint64 // CLOCK_MONOTONIC ns
	// weight is, on-CPU, the thread's CPU time since its previous sample
	// (0: unknown, without sched capture) and, off-CPU, the time the
	// group stands for; both ns.
	weight uint64
	tid    uint32
	cpu    uint32
	stack  int32 // index into batch.stacks; -1: unknown (off-CPU only)
	state  uint8 // 0: on-CPU; else a sched.State
}

// batch holds what one process produced during one report interval.
type batch struct {
	samples []rawSample
	stacks  [][]*loc           // interned stacks, leaf first
	byHash  map[uint64][]int32 // stack hash → candidates in stacks
	raw     [][]uint64         // raw callchain of each stack, to settle hash collisions
	threads map[uint32]string  // names of the threads in samples, set at snapshot
}

func newBatch() *batch { return &batch{byHash: map[uint64][]int32{}} }

// internStack returns the index of the stack with raw callchain chain,
// resolving it with resolve the first time it is seen in this batch.
func (b *batch) internStack(chain []uint64, resolve func([]uint64) []*loc) int32 {
	h := hashChain(chain)
	for _, i := range b.byHash[h] {
		if equalChain(b.raw[i], chain) {
			return i
		}
	}
	i := int32(len(b.stacks))
	b.stacks = append(b.stacks, resolve(chain))
	b.raw = append(b.raw, append([]uint64(nil), chain...))
	b.byHash[h] = append(b.byHash[h], i)
	return i
}

// takeBefore splits off the samples older than cut: out holds them (nil if
// none) and shares b's stack tables; keep holds the rest, re-interned into
// tables of its own so that out's can be dropped after the report. When
// the samples were split, moved maps the index of each kept sample in b to
// its index in keep.
func (b *batch) takeBefore(cut uint64) (out, keep *batch, moved map[int32]int32) {
	n := 0
	for _, s := range b.samples {
		if s.time < cut {
			n++
		}
	}
	switch n {
	case 0:
		return nil, b, nil
	case len(b.samples):
		return b, newBatch(), nil
	}
	out = &batch{samples: make([]rawSample, 0, n), stacks: b.stacks, raw: b.raw}
	keep = newBatch()
	moved = make(map[int32]int32, len(b.samples)-n)
	stacks := map[int32]int32{}
	for i, s := range b.samples {
		if s.time < cut {
			out.samples = append(out.samples, s)
			continue
		}
		if s.stack >= 0 {
			j, ok := stacks[s.stack]
			if !ok {
				j = keep.internLocs(b.raw[s.stack], b.stacks[s.stack])
				stacks[s.stack] = j
			}
			s.stack = j
		}
		moved[int32(i)] = int32(len(keep.samples))
		keep.samples = append(keep.samples, s)
	}
	return out, keep, moved
}

// internLocs interns a stack already resolved in another batch.
func (b *batch) internLocs(chain []uint64, locs []*loc) int32 {
	h := hashChain(chain)
	for _, i := range b.byHash[h] {
		if equalChain(b.raw[i], chain) {
			return i
		}
	}
	i := int32(len(b.stacks))
	b.stacks = append(b.stacks, locs)
	b.raw = append(b.raw, chain)
	b.byHash[h] = append(b.byHash[h], i)
	return i
}

// hashChain is FNV-1a over the addresses; collisions are settled by
// comparing the chains.
func hashChain(chain []uint64) uint64 {
	h := uint64(14695981039346656037)
	for _, a := range chain {
		h ^= a
		h *= 1099511628211
	}
	return h
}

func equalChain(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// joinInfo is what the join found for one sample.
type joinInfo struct {
	linked  bool
	traceID [16]byte
	spanID  [8]byte
	worker  int64  // -1: unknown
	root    string // name of the local root span, "" when not linked
}

// snapshot is one process's samples taken out for a report.
type snapshot struct {
	pid      int
	exe      string
	comm     string
	batch    *batch
	joins    []joinInfo       // one per batch sample
	resource pcommon.Resource // span resource of the process; zero value if none
	windowA  uint64           // report window in CLOCK_MONOTONIC ns: [windowA, windowB)
	windowB  uint64
}

// profileParams are the fixed parts of every profile.
type profileParams struct {
	frequency      uint64
	offCPUInterval uint64
	toUnix         func(mono uint64) uint64
}

// dict interns the entries of a ProfilesDictionary with maps. Index 0 of
// every table is the empty entry, as the format requires.
type dict struct {
	d         pprofile.ProfilesDictionary
	strings   map[string]int32
	functions map[symbolize.Frame]int32
	mappings  map[*symbolize.Mapping]int32
	locations map[*loc]int32
	stacks    map[string]int32
	attrs     map[attrKey]int32
	links     map[[24]byte]int32
	keyBuf    []byte
}

type attrKey struct {
	key  string
	str  string
	num  int64
	kind byte // 's' string, 'i' int
}

func newDict(d pprofile.ProfilesDictionary) *dict {
	t := &dict{
		d:         d,
		strings:   map[string]int32{},
		functions: map[symbolize.Frame]int32{},
		mappings:  map[*symbolize.Mapping]int32{},
		locations: map[*loc]int32{},
		stacks:    map[string]int32{},
		attrs:     map[attrKey]int32{},
		links:     map[[24]byte]int32{},
	}
	t.str("")
	d.MappingTable().AppendEmpty()
	d.LocationTable().AppendEmpty()
	d.FunctionTable().AppendEmpty()
	d.LinkTable().AppendEmpty()
	d.StackTable().AppendEmpty()
	d.AttributeTable().AppendEmpty()
	return t
}

func (t *dict) str(s string) int32 {
	if i, ok := t.strings[s]; ok {
		return i
	}
	i := int32(t.d.StringTable().Len())
	t.d.StringTable().Append(s)
	t.strings[s] = i
	return i
}

func (t *dict) attrStr(key, val string) int32 {
	k := attrKey{key: key, str: val, kind: 's'}
	if i, ok := t.attrs[k]; ok {
		return i
	}
	i := int32(t.d.AttributeTable().Len())
	a := t.d.AttributeTable().AppendEmpty()
	a.SetKeyStrindex(t.str(key))
	a.Value().SetStr(val)
	t.attrs[k] = i
	return i
}

func (t *dict) attrInt(key string, val int64) int32 { return t.attrIntUnit(key, val, "") }

func (t *dict) attrIntUnit(key string, val int64, unit string) int32 {
	k := attrKey{key: key, num: val, kind: 'i', str: unit}
	if i, ok := t.attrs[k]; ok {
		return i
	}
	i := int32(t.d.AttributeTable().Len())
	a := t.d.AttributeTable().AppendEmpty()
	a.SetKeyStrindex(t.str(key))
	a.Value().SetInt(val)
	if unit != "" {
		a.SetUnitStrindex(t.str(unit))
	}
	t.attrs[k] = i
	return i
}

func (t *dict) link(traceID [16]byte, spanID [8]byte) int32 {
	var k [24]byte
	copy(k[:], traceID[:])
	copy(k[16:], spanID[:])
	if i, ok := t.links[k]; ok {
		return i
	}
	i := int32(t.d.LinkTable().Len())
	l := t.d.LinkTable().AppendEmpty()
	l.SetTraceID(traceID)
	l.SetSpanID(spanID)
	t.links[k] = i
	return i
}

func (t *dict) mapping(m *symbolize.Mapping) int32 {
	if m == nil {
		return 0
	}
	if i, ok := t.mappings[m]; ok {
		return i
	}
	i := int32(t.d.MappingTable().Len())
	mp := t.d.MappingTable().AppendEmpty()
	mp.SetMemoryStart(m.Start)
	mp.SetMemoryLimit(m.Limit)
	mp.SetFileOffset(m.Offset)
	mp.SetFilenameStrindex(t.str(m.Path))
	if m.BuildID != "" {
		key := "process.executable.build_id.gnu"
		if strings.ContainsRune(m.BuildID, '/') || len(m.BuildID) != 40 {
			key = "process.executable.build_id.go"
		}
		mp.AttributeIndices().Append(t.attrStr(key, m.BuildID))
	}
	t.mappings[m] = i
	return i
}

func (t *dict) location(l *loc) int32 {
	if i, ok := t.locations[l]; ok {
		return i
	}
	// Resolve the mapping and functions before appending the location,
	// so that appends to the other tables cannot invalidate it.
	mi := t.mapping(l.mapping)
	fis := make([]int32, len(l.frames))
	for j, f := range l.frames {
		fis[j] = t.functionOf(f)
	}
	i := int32(t.d.LocationTable().Len())
	pl := t.d.LocationTable().AppendEmpty()
	pl.SetAddress(l.addr)
	pl.SetMappingIndex(mi)
	for j, f := range l.frames {
		ln := pl.Lines().AppendEmpty()
		ln.SetFunctionIndex(fis[j])
		ln.SetLine(int64(f.Line))
	}
	t.locations[l] = i
	return i
}

// functionOf interns the function of a frame: same name, system name,
// file and start line make one function, whatever the line.
func (t *dict) functionOf(f symbolize.Frame) int32 {
	f.Line = 0
	if i, ok := t.functions[f]; ok {
		return i
	}
	i := int32(t.d.FunctionTable().Len())
	fn := t.d.FunctionTable().AppendEmpty()
	fn.SetNameStrindex(t.str(f.Function))
	fn.SetSystemNameStrindex(t.str(f.SystemName))
	fn.SetFilenameStrindex(t.str(f.File))
	fn.SetStartLine(int64(f.StartLine))
	t.functions[f] = i
	return i
}

func (t *dict) stack(locs []*loc) int32 {
	t.keyBuf = t.keyBuf[:0]
	idx := make([]int32, len(locs))
	for j, l := range locs {
		idx[j] = t.location(l)
		t.keyBuf = strconv.AppendInt(t.keyBuf, int64(idx[j]), 36)
		t.keyBuf = append(t.keyBuf, ',')
	}
	if i, ok := t.stacks[string(t.keyBuf)]; ok {
		return i
	}
	i := int32(t.d.StackTable().Len())
	st := t.d.StackTable().AppendEmpty()
	st.LocationIndices().FromRaw(idx)
	t.stacks[string(t.keyBuf)] = i
	return i
}

// buildProfiles turns the snapshots of one report into OTLP profiles: one
// ResourceProfiles per process, sharing one dictionary. Samples with the
// same stack and attributes are merged into one Sample that keeps every
// timestamp (and a value of 1 per timestamp).
func buildProfiles(snaps []snapshot, p profileParams) (pprofile.Profiles, int) {
	out := pprofile.NewProfiles()
	t := newDict(out.Dictionary())
	total := 0
	for _, s := range snaps {
		if len(s.batch.samples) == 0 {
			continue
		}
		rp := out.ResourceProfiles().AppendEmpty()
		res := rp.Resource().Attributes()
		// The span resource of the process (service.name, ...) first, so
		// that what the kernel says of the process wins.
		if s.resource != (pcommon.Resource{}) {
			s.resource.Attributes().CopyTo(res)
		}
		res.PutInt("process.pid", int64(s.pid))
		if s.exe != "" {
			res.PutStr("process.executable.name", filepath.Base(s.exe))
			res.PutStr("process.executable.path", s.exe)
		} else {
			res.PutStr("process.executable.name", s.comm)
		}
		sp := rp.ScopeProfiles().AppendEmpty()
		sp.Scope().SetName("github.com/perfprof/perfprof/receiver/perfprofreceiver")
		total += addProfile(sp, t, s, p, false)
		total += addProfile(sp, t, s, p, true)
	}
	return out, total
}

// cpuDeltaQuantum rounds the CPU delta of on-CPU samples, so that samples
// of a busy thread, whose deltas differ by microseconds, still merge.
const cpuDeltaQuantum = 10_000 // ns

// addProfile adds to sp the on-CPU or the off-CPU profile of a snapshot
// and returns its number of samples (none: no profile is added).
//
// On-CPU: sample type samples/count, period cpu/nanoseconds; a sample
// merges the perf samples of one stack, thread, CPU, span and CPU delta.
// Off-CPU: sample type off_cpu/nanoseconds, each value the off-CPU time of
// one group, with thread.state blocked or runnable.
func addProfile(sp pprofile.ScopeProfiles, t *dict, s snapshot, p profileParams, off bool) int {
	lo, hi, n := s.windowA, s.windowB, 0
	for _, r := range s.batch.samples {
		if (r.state != 0) == off {
			n++
			// The profile spans the report window, widened to hold every
			// sample (records read late may predate the window).
			lo = min(lo, r.time)
			hi = max(hi, r.time+1)
		}
	}
	if n == 0 {
		return 0
	}
	prof := sp.Profiles().AppendEmpty()
	var id pprofile.ProfileID
	_, _ = rand.Read(id[:])
	prof.SetProfileID(id)
	if off {
		prof.SampleType().SetTypeStrindex(t.str("off_cpu"))
		prof.SampleType().SetUnitStrindex(t.str("nanoseconds"))
		prof.PeriodType().SetTypeStrindex(t.str("off_cpu"))
		prof.PeriodType().SetUnitStrindex(t.str("nanoseconds"))
		prof.SetPeriod(int64(p.offCPUInterval))
	} else {
		prof.SampleType().SetTypeStrindex(t.str("samples"))
		prof.SampleType().SetUnitStrindex(t.str("count"))
		prof.PeriodType().SetTypeStrindex(t.str("cpu"))
		prof.PeriodType().SetUnitStrindex(t.str("nanoseconds"))
		prof.SetPeriod(int64(1_000_000_000 / p.frequency))
	}
	prof.SetTime(pcommon.Timestamp(p.toUnix(lo)))
	prof.SetDurationNano(hi - lo)

	type sampleKey struct {
		stack    int32
		tid, cpu uint32
		state    uint8
		delta    uint64
		link     int32
		worker   int64
		root     string
	}
	merged := map[sampleKey]pprofile.Sample{}
	for i, r := range s.batch.samples {
		if (r.state != 0) != off {
			continue
		}
		j := s.joins[i]
		k := sampleKey{stack: r.stack, tid: r.tid, cpu: r.cpu, state: r.state, worker: j.worker, root: j.root}
		if !off {
			k.delta = (r.weight + cpuDeltaQuantum/2) / cpuDeltaQuantum * cpuDeltaQuantum
		}
		if j.linked {
			k.link = t.link(j.traceID, j.spanID)
		}
		ps, ok := merged[k]
		if !ok {
			ps = prof.Samples().AppendEmpty()
			if r.stack >= 0 {
				ps.SetStackIndex(t.stack(s.batch.stacks[r.stack]))
			}
			ps.SetLinkIndex(k.link)
			ps.AttributeIndices().Append(
				t.attrInt("thread.id", int64(r.tid)),
				t.attrStr("thread.name", s.batch.threads[r.tid]),
			)
			if off {
				ps.AttributeIndices().Append(t.attrStr("thread.state", sched.State(r.state).String()))
			} else {
				ps.AttributeIndices().Append(t.attrInt("cpu.logical_number", int64(r.cpu)))
				if k.delta > 0 {
					ps.AttributeIndices().Append(t.attrIntUnit("thread.cpu.time_delta", int64(k.delta), "ns"))
				}
			}
			if j.worker >= 0 {
				ps.AttributeIndices().Append(t.attrInt("worker.id", j.worker))
			}
			if j.root != "" {
				ps.AttributeIndices().Append(t.attrStr("span.root.name", j.root))
			}
			merged[k] = ps
		}
		ps.TimestampsUnixNano().Append(p.toUnix(r.time))
		if off {
			ps.Values().Append(int64(r.weight))
		} else {
			ps.Values().Append(1)
		}
	}
	return n
}
