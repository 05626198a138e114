package perfprofreceiver

import (
	"crypto/rand"
	"path/filepath"
	"strconv"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/internal/sched"
	"github.com/perfprof/perfprof/internal/symbolize"
)

// profileParams are the fixed parts of every profile.
type profileParams struct {
	frequency      uint64
	offCPUInterval uint64
	// resource returns the span resource of a handle (Snapshot.Resource).
	resource func(h int32) (pcommon.Resource, bool)
}

// dict interns the entries of a ProfilesDictionary with maps. Index 0 of
// every table is the empty entry, as the format requires.
type dict struct {
	d         pprofile.ProfilesDictionary
	strings   map[string]int32
	functions map[symbolize.Frame]int32
	mappings  map[*symbolize.Mapping]int32
	locations map[*profiler.Location]int32
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
		locations: map[*profiler.Location]int32{},
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
		key := convention.BuildIDGNU
		if strings.ContainsRune(m.BuildID, '/') || len(m.BuildID) != 40 {
			key = convention.BuildIDGo
		}
		mp.AttributeIndices().Append(t.attrStr(key, m.BuildID))
	}
	t.mappings[m] = i
	return i
}

func (t *dict) location(l *profiler.Location) int32 {
	if i, ok := t.locations[l]; ok {
		return i
	}
	// Resolve the mapping and functions before appending the location,
	// so that appends to the other tables cannot invalidate it.
	mi := t.mapping(l.Mapping)
	fis := make([]int32, len(l.Frames))
	for j, f := range l.Frames {
		fis[j] = t.functionOf(f)
	}
	i := int32(t.d.LocationTable().Len())
	pl := t.d.LocationTable().AppendEmpty()
	pl.SetAddress(l.Addr)
	pl.SetMappingIndex(mi)
	for j, f := range l.Frames {
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

func (t *dict) stack(locs []*profiler.Location) int32 {
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
func buildProfiles(snaps []profiler.Snapshot, p profileParams) (pprofile.Profiles, int) {
	out := pprofile.NewProfiles()
	t := newDict(out.Dictionary())
	total := 0
	for i := range snaps {
		s := &snaps[i]
		if len(s.Samples) == 0 {
			continue
		}
		rp := out.ResourceProfiles().AppendEmpty()
		res := rp.Resource().Attributes()
		// The span resource of the process (service.name, ...) first, so
		// that what the kernel says of the process wins.
		if p.resource != nil {
			if r, ok := p.resource(s.Resource); ok {
				r.Attributes().CopyTo(res)
			}
		}
		res.PutInt(convention.ProcessPid, int64(s.Pid))
		if s.Exe != "" {
			res.PutStr(convention.ProcessExecutableName, filepath.Base(s.Exe))
			res.PutStr(convention.ProcessExecutablePath, s.Exe)
		} else {
			res.PutStr(convention.ProcessExecutableName, s.Comm)
		}
		sp := rp.ScopeProfiles().AppendEmpty()
		sp.Scope().SetName(convention.ScopeName)
		total += addProfile(sp, t, s, p, false)
		total += addProfile(sp, t, s, p, true)
	}
	return out, total
}

// addProfile adds to sp the on-CPU or the off-CPU profile of a snapshot
// and returns its number of samples (none: no profile is added).
//
// On-CPU: sample type samples/count, period cpu/nanoseconds; a sample
// merges the perf samples of one stack, thread, CPU, span and CPU delta.
// Off-CPU: sample type off_cpu/nanoseconds, each value the off-CPU time of
// one group, with thread.state blocked or runnable.
func addProfile(sp pprofile.ScopeProfiles, t *dict, s *profiler.Snapshot, p profileParams, off bool) int {
	lo, hi, n := s.Start, s.End, 0
	for i := range s.Samples {
		r := &s.Samples[i]
		if r.OffCPU() == off {
			n++
			// The profile spans the report window, widened to hold every
			// sample (records read late may predate the window).
			lo = min(lo, r.Time)
			hi = max(hi, r.Time+1)
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
		prof.SampleType().SetTypeStrindex(t.str(convention.OffCPUType))
		prof.SampleType().SetUnitStrindex(t.str(convention.OffCPUUnit))
		prof.PeriodType().SetTypeStrindex(t.str(convention.OffCPUType))
		prof.PeriodType().SetUnitStrindex(t.str(convention.OffCPUUnit))
		prof.SetPeriod(int64(p.offCPUInterval))
	} else {
		prof.SampleType().SetTypeStrindex(t.str(convention.OnCPUSampleType))
		prof.SampleType().SetUnitStrindex(t.str(convention.OnCPUSampleUnit))
		prof.PeriodType().SetTypeStrindex(t.str(convention.OnCPUPeriodType))
		prof.PeriodType().SetUnitStrindex(t.str(convention.OnCPUPeriodUnit))
		prof.SetPeriod(int64(1_000_000_000 / p.frequency))
	}
	prof.SetTime(pcommon.Timestamp(lo))
	prof.SetDurationNano(hi - lo)

	type sampleKey struct {
		stack    int32
		tid, cpu uint32
		state    sched.State
		delta    uint64
		link     int32
		worker   int64
		root     string
	}
	merged := map[sampleKey]pprofile.Sample{}
	for i := range s.Samples {
		r := &s.Samples[i]
		if r.OffCPU() != off {
			continue
		}
		j := &r.Link
		k := sampleKey{stack: r.Stack, tid: r.Tid, cpu: r.CPU, state: r.State, worker: j.Worker, root: j.Root}
		if !off {
			const q = convention.CPUTimeDeltaQuantum
			k.delta = (r.Weight + q/2) / q * q
		}
		if j.Linked {
			k.link = t.link(j.TraceID, j.SpanID)
		}
		ps, ok := merged[k]
		if !ok {
			ps = prof.Samples().AppendEmpty()
			if r.Stack >= 0 {
				ps.SetStackIndex(t.stack(s.Stacks[r.Stack]))
			}
			ps.SetLinkIndex(k.link)
			ps.AttributeIndices().Append(
				t.attrInt(convention.ThreadID, int64(r.Tid)),
				t.attrStr(convention.ThreadName, s.Threads[r.Tid]),
			)
			if off {
				ps.AttributeIndices().Append(t.attrStr(convention.ThreadState, r.State.String()))
			} else {
				ps.AttributeIndices().Append(t.attrInt(convention.CPU, int64(r.CPU)))
				if k.delta > 0 {
					ps.AttributeIndices().Append(t.attrIntUnit(convention.CPUTimeDelta, int64(k.delta), convention.CPUTimeDeltaUnit))
				}
			}
			if j.Worker >= 0 {
				ps.AttributeIndices().Append(t.attrInt(convention.WorkerID, j.Worker))
			}
			if j.Root != "" {
				ps.AttributeIndices().Append(t.attrStr(convention.RootName, j.Root))
			}
			merged[k] = ps
		}
		ps.TimestampsUnixNano().Append(r.Time)
		if off {
			ps.Values().Append(int64(r.Weight))
		} else {
			ps.Values().Append(1)
		}
	}
	return n
}
