// Package pdataprofiles is the receiver's codec of profiles: it writes
// the engine's snapshots (profiler.Snapshot) as pdata profiles, one
// ResourceProfiles per process sharing one dictionary, through
// pkg/pprofiledict's builder. It is apart from the receiver so that the
// conversion can be tested and measured without a collector component.
package pdataprofiles // import "github.com/perfprof/perfprof/receiver/perfprofreceiver/internal/pdataprofiles"

import (
	"crypto/rand"
	"path/filepath"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/internal/sched"
	"github.com/perfprof/perfprof/internal/symbolize"
	"github.com/perfprof/perfprof/pkg/pprofiledict"
)

// Params are the fixed parts of every profile.
type Params struct {
	Frequency      uint64
	OffCPUInterval uint64
	// Resource returns the span resource of a handle (Snapshot.Resource).
	Resource func(h int32) (pcommon.Resource, bool)
}

// dict is a pprofiledict.Builder with caches in front of it keyed by the
// engine's pointers: locations and mappings are shared by pointer across a
// process's stacks, so most stack entries are found without hashing their
// content.
type dict struct {
	*pprofiledict.Builder
	mappings  map[*symbolize.Mapping]int32
	locations map[*profiler.Location]int32
	lines     []pprofiledict.Line
	stackBuf  []int32
}

func newDict(d pprofile.ProfilesDictionary) *dict {
	return &dict{
		Builder:   pprofiledict.New(d),
		mappings:  map[*symbolize.Mapping]int32{},
		locations: map[*profiler.Location]int32{},
	}
}

func (t *dict) mapping(m *symbolize.Mapping) int32 {
	if m == nil {
		return 0
	}
	i, ok := t.mappings[m]
	if !ok {
		i = t.Mapping(pprofiledict.Mapping{Start: m.Start, Limit: m.Limit, Offset: m.Offset, File: m.Path, BuildID: m.BuildID})
		t.mappings[m] = i
	}
	return i
}

// location interns a location; its frames are innermost first, as pprof's
// lines are. A function is one name, system name, file and start line,
// whatever the line.
func (t *dict) location(l *profiler.Location) int32 {
	if i, ok := t.locations[l]; ok {
		return i
	}
	t.lines = t.lines[:0]
	for _, f := range l.Frames {
		fn := t.Function(pprofiledict.Function{Name: f.Function, SystemName: f.SystemName, File: f.File, StartLine: int64(f.StartLine)})
		t.lines = append(t.lines, pprofiledict.Line{Function: fn, Line: int64(f.Line)})
	}
	var i int32
	if l.Kernel {
		i = t.KernelLocation(l.Addr, t.mapping(l.Mapping), t.lines...)
	} else {
		i = t.Location(l.Addr, t.mapping(l.Mapping), t.lines...)
	}
	t.locations[l] = i
	return i
}

func (t *dict) stack(locs []*profiler.Location) int32 {
	t.stackBuf = t.stackBuf[:0]
	for _, l := range locs {
		t.stackBuf = append(t.stackBuf, t.location(l))
	}
	return t.Stack(t.stackBuf)
}

// Build turns the snapshots of one report into OTLP profiles: one
// ResourceProfiles per process, sharing one dictionary. Samples with the
// same stack and attributes are merged into one Sample that keeps every
// timestamp (and a value of 1 per timestamp).
func Build(snaps []profiler.Snapshot, p Params) (pprofile.Profiles, int) {
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
		// What the process publishes of itself (OTEP 4719), then the
		// resource of its spans over it, then what the kernel says of the
		// process over both.
		if s.ProcessContext != nil {
			if err := res.FromRaw(s.ProcessContext); err != nil {
				res.Clear()
			}
		}
		if p.Resource != nil {
			if r, ok := p.Resource(s.Resource); ok {
				for k, v := range r.Attributes().All() {
					v.CopyTo(res.PutEmpty(k))
				}
			}
		}
		res.PutInt(convention.ProcessPid, int64(s.Pid))
		if s.ContainerID != "" {
			res.PutStr(convention.ContainerID, s.ContainerID)
		}
		if s.PodUID != "" {
			res.PutStr(convention.K8sPodUID, s.PodUID)
		}
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
func addProfile(sp pprofile.ScopeProfiles, t *dict, s *profiler.Snapshot, p Params, off bool) int {
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
		t.SetProfileType(prof, true, int64(p.OffCPUInterval))
	} else {
		t.SetProfileType(prof, false, int64(1_000_000_000/p.Frequency))
	}
	t.SetClockOffset(prof, int64(s.ClockOffset))
	prof.SetTime(pcommon.Timestamp(lo))
	prof.SetDurationNano(hi - lo)

	// A pdata sample stands for the samples of one key, with a timestamp
	// and a value each: what the exporter writes one event per timestamp
	// of, and pprofiledict.Decode reads back one Sample per timestamp.
	type sampleKey struct {
		stack    int32
		tid, cpu uint32
		state    sched.State
		delta    uint64
		link     int32
		source   profiler.LinkSource
		worker   int64
		root     string
		attrs    int32 // Link.Attrs
	}
	merged := map[sampleKey]pprofile.Sample{}
	for i := range s.Samples {
		r := &s.Samples[i]
		if r.OffCPU() != off {
			continue
		}
		j := &r.Link
		k := sampleKey{stack: r.Stack, tid: r.Tid, cpu: r.CPU, state: r.State, worker: j.Worker, root: j.Root, attrs: j.Attrs}
		if !off {
			const q = convention.CPUTimeDeltaQuantum
			k.delta = (r.Weight + q/2) / q * q
		}
		if j.Linked {
			k.link, k.source = t.Link(j.TraceID, j.SpanID), j.Source
		}
		ps, ok := merged[k]
		if !ok {
			ps = prof.Samples().AppendEmpty()
			if r.Stack >= 0 {
				ps.SetStackIndex(t.stack(s.Stacks[r.Stack]))
			}
			ps.SetLinkIndex(k.link)
			l := pprofiledict.Labels{Tid: r.Tid, ThreadName: s.Threads[r.Tid], CPU: -1, Worker: j.Worker, Root: j.Root}
			if off {
				l.State = r.State.String()
			} else {
				l.CPU, l.CPUDelta = int64(r.CPU), k.delta
			}
			if j.Linked {
				l.LinkSource = j.Source.String()
			}
			if j.Attrs > 0 && int(j.Attrs) < len(s.ContextAttrs) {
				for _, a := range s.ContextAttrs[j.Attrs] {
					l.Context = append(l.Context, pprofiledict.KV{Key: a.Key, Value: a.Value})
				}
			}
			t.AppendLabels(ps.AttributeIndices(), &l)
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
