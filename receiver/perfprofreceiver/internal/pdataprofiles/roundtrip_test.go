package pdataprofiles

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/perfprof/perfprof/internal/clock"
	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/internal/sched"
	"github.com/perfprof/perfprof/internal/symbolize"
	"github.com/perfprof/perfprof/pkg/pprofiledict"
)

// rtProcess is what a snapshot says of a process, as values: what
// Build writes and pprofiledict.Decode must give back.
type rtProcess struct {
	Resource    map[string]any
	ClockOffset int64
	Samples     []rtSample // in the order of sortSamples
}

// rtSample is one sample at one time. Mono is its CLOCK_MONOTONIC time:
// the generator's for a snapshot, the time read back converted with the
// profile's clock offset for pdata.
type rtSample struct {
	OffCPU bool
	Mono   uint64
	Value  int64
	Stack  []pprofiledict.Location
	Labels pprofiledict.Labels
	Link   pprofiledict.Link
}

// TestRoundTrip is the codec's property: for random snapshots (several
// processes with resources of their own, user and kernel frames with and
// without mappings and build ids, linked samples of every link source,
// workers, CPU deltas, off-CPU groups with and without stacks), a
// snapshot → pdata → values gives the snapshot's values back. What pdata
// does not hold by design is left out of the comparison: the order of
// samples, the process's start time and comm when its executable is known,
// the stack indices (stacks compare by value), and the CPU delta's
// precision (rounded to convention.CPUTimeDeltaQuantum). Every sample's
// monotonic time comes back exactly.
func TestRoundTrip(t *testing.T) {
	cases := 500
	if testing.Short() {
		cases = 50
	}
	for seed := range uint64(cases) {
		rng := rand.New(rand.NewPCG(seed, 28))
		snaps, mono, resources := randomSnapshots(rng)
		params := Params{Frequency: 99, OffCPUInterval: 10_000_000, Resource: func(h int32) (pcommon.Resource, bool) {
			if h < 0 || int(h) >= len(resources) {
				return pcommon.Resource{}, false
			}
			return resources[h], true
		}}
		pd, _ := Build(snaps, params)
		want := snapshotValues(snaps, mono, resources)
		got := pdataValues(t, pprofiledict.Decode(pd))
		require.Equal(t, want, got, "seed %d", seed)
	}
}

// randomSnapshots returns 1 to 3 snapshots with the monotonic time of
// each sample (by snapshot, by sample) and the span resources they name.
func randomSnapshots(rng *rand.Rand) ([]profiler.Snapshot, [][]uint64, []pcommon.Resource) {
	var resources []pcommon.Resource
	for i := range 2 {
		r := pcommon.NewResource()
		r.Attributes().PutStr(convention.ServiceName, fmt.Sprintf("svc-%d", i))
		r.Attributes().PutStr("deployment.environment", "test")
		resources = append(resources, r)
	}
	mappings := []*symbolize.Mapping{
		{Start: 0x400000, Limit: 0x500000, Offset: 0x1000, Path: "/usr/bin/app", BuildID: "0123456789abcdef0123456789abcdef01234567"},
		{Start: 0x7f0000000000, Limit: 0x7f0000100000, Path: "/usr/lib/libc.so.6"},
		{Start: 0x600000, Limit: 0x700000, Path: "/app/gosvc", BuildID: "Xz3_-aQ1bC/0123456789abcdef"},
	}
	n := 1 + rng.IntN(3)
	snaps := make([]profiler.Snapshot, n)
	mono := make([][]uint64, n)
	for i := range snaps {
		s := &snaps[i]
		s.Pid = 100 + i
		s.Comm = fmt.Sprintf("comm-%d", i)
		if rng.IntN(2) == 0 {
			s.Exe = fmt.Sprintf("/usr/bin/app-%d", i)
		}
		if rng.IntN(3) == 0 {
			s.ContainerID, s.PodUID = fmt.Sprintf("c0ffee%d", i), fmt.Sprintf("6b1f2c3d-0000-4000-8000-00000000000%d", i)
		}
		if rng.IntN(2) == 0 {
			s.ProcessContext = map[string]any{convention.ServiceName: "from-process", "telemetry.sdk.language": "go"}
		}
		s.Resource = int32(rng.IntN(len(resources)+1)) - 1
		s.ClockOffset = clock.Fixed(1_700_000_000_000_000_000 + rng.Int64N(1_000_000_000_000_000) - 500_000_000_000_000)
		base := 1_000_000_000 + rng.Uint64N(1_000_000_000_000)
		s.Start, s.End = s.ClockOffset.Unix(base), s.ClockOffset.Unix(base+1_000_000_000)

		var locs []*profiler.Location
		for j := range 1 + rng.IntN(8) {
			l := &profiler.Location{Addr: 0x400000 + rng.Uint64N(0x100000)}
			switch rng.IntN(4) {
			case 0:
				l.Addr, l.Kernel = 0xffffffff81000000+rng.Uint64N(0x100000), true
			case 1:
				// In no known mapping.
			default:
				l.Mapping = mappings[rng.IntN(len(mappings))]
			}
			for k := range rng.IntN(4) {
				l.Frames = append(l.Frames, symbolize.Frame{Function: fmt.Sprintf("fn%d_%d", j, k), SystemName: fmt.Sprintf("_Z%d", k),
					File: []string{"", "/src/a.c", "/src/b.rs"}[rng.IntN(3)], Line: rng.IntN(100), StartLine: rng.IntN(10)})
			}
			locs = append(locs, l)
		}
		for range 1 + rng.IntN(5) {
			var st []*profiler.Location
			for range rng.IntN(7) {
				st = append(st, locs[rng.IntN(len(locs))])
			}
			s.Stacks = append(s.Stacks, st)
		}
		s.Threads = map[uint32]string{}
		if rng.IntN(2) == 0 {
			// Thread context attributes: sets of one or two, one of them
			// shared by name with another set.
			s.ContextAttrs = [][]profiler.Attr{nil,
				{{Key: "http.route", Value: "GET /a"}},
				{{Key: "http.route", Value: "GET /b"}, {Key: "user.name", Value: "ünï"}},
			}
		}
		tids := []uint32{uint32(s.Pid), uint32(s.Pid + 1000), uint32(s.Pid + 2000)}
		for _, tid := range tids {
			s.Threads[tid] = []string{"", "main", "worker"}[rng.IntN(3)]
		}
		for range rng.IntN(30) {
			m := base + rng.Uint64N(1_000_000_000)
			// Samples in a row often share all but their time, or all
			// but their time and one more thing.
			if len(s.Samples) > 0 && rng.IntN(3) == 0 {
				r := s.Samples[len(s.Samples)-1]
				r.Time = s.ClockOffset.Unix(m)
				switch rng.IntN(4) {
				case 0:
					r.Link.Source = profiler.LinkSource(rng.IntN(4)) // the same span, found another way
				case 1:
					r.Weight = rng.Uint64N(10_000_000)
				case 2:
					if len(s.ContextAttrs) > 0 {
						r.Link.Attrs = int32(rng.IntN(len(s.ContextAttrs)))
					}
				}
				s.Samples = append(s.Samples, r)
				mono[i] = append(mono[i], m)
				continue
			}
			r := profiler.Sample{Time: s.ClockOffset.Unix(m), Tid: tids[rng.IntN(len(tids))], CPU: uint32(rng.IntN(64)),
				Stack: int32(rng.IntN(len(s.Stacks))), Link: profiler.Link{Worker: -1}}
			if rng.IntN(3) == 0 {
				r.State = []sched.State{sched.Blocked, sched.Runnable}[rng.IntN(2)]
				r.Weight = 1 + rng.Uint64N(1_000_000_000)
				if rng.IntN(5) == 0 {
					r.Stack = -1
				}
			} else if rng.IntN(2) == 0 {
				r.Weight = rng.Uint64N(10_000_000)
			}
			if rng.IntN(2) == 0 {
				r.Link.Worker = rng.Int64N(8)
			}
			if rng.IntN(3) > 0 {
				r.Link.Linked = true
				r.Link.TraceID, r.Link.SpanID = [16]byte{byte(1 + rng.IntN(3)), 2}, [8]byte{byte(1 + rng.IntN(4))}
				r.Link.Source = profiler.LinkSource(rng.IntN(4))
				if rng.IntN(2) == 0 {
					r.Link.Root = "GET /"
				}
			}
			if len(s.ContextAttrs) > 0 {
				r.Link.Attrs = int32(rng.IntN(len(s.ContextAttrs))) // with or without a link
			}
			s.Samples = append(s.Samples, r)
			mono[i] = append(mono[i], m)
		}
	}
	return snaps, mono, resources
}

// snapshotValues says what Build promises of snaps.
func snapshotValues(snaps []profiler.Snapshot, mono [][]uint64, resources []pcommon.Resource) []rtProcess {
	var out []rtProcess
	for i := range snaps {
		s := &snaps[i]
		if len(s.Samples) == 0 {
			continue // no process without samples
		}
		res := map[string]any{}
		for k, v := range s.ProcessContext {
			res[k] = v
		}
		if s.Resource >= 0 {
			for k, v := range resources[s.Resource].Attributes().AsRaw() {
				res[k] = v
			}
		}
		res[convention.ProcessPid] = int64(s.Pid)
		if s.ContainerID != "" {
			res[convention.ContainerID], res[convention.K8sPodUID] = s.ContainerID, s.PodUID
		}
		if s.Exe != "" {
			res[convention.ProcessExecutableName], res[convention.ProcessExecutablePath] = filepath.Base(s.Exe), s.Exe
		} else {
			res[convention.ProcessExecutableName] = s.Comm
		}
		p := rtProcess{Resource: res, ClockOffset: int64(s.ClockOffset)}
		for j, r := range s.Samples {
			rs := rtSample{OffCPU: r.OffCPU(), Mono: mono[i][j], Value: 1}
			if r.Stack >= 0 {
				for _, l := range s.Stacks[r.Stack] {
					rs.Stack = append(rs.Stack, locationValue(l))
				}
			}
			rs.Labels = pprofiledict.Labels{Tid: r.Tid, ThreadName: s.Threads[r.Tid], CPU: -1, Worker: r.Link.Worker, Root: r.Link.Root}
			if r.OffCPU() {
				rs.Value, rs.Labels.State = int64(r.Weight), r.State.String()
			} else {
				const q = convention.CPUTimeDeltaQuantum
				rs.Labels.CPU, rs.Labels.CPUDelta = int64(r.CPU), (r.Weight+q/2)/q*q
			}
			if r.Link.Linked {
				rs.Link = pprofiledict.Link{TraceID: r.Link.TraceID, SpanID: r.Link.SpanID}
				rs.Labels.LinkSource = r.Link.Source.String()
			}
			if r.Link.Attrs > 0 {
				for _, a := range s.ContextAttrs[r.Link.Attrs] {
					rs.Labels.Context = append(rs.Labels.Context, pprofiledict.KV{Key: a.Key, Value: a.Value})
				}
			}
			p.Samples = append(p.Samples, rs)
		}
		sortSamples(p.Samples)
		out = append(out, p)
	}
	return out
}

func locationValue(l *profiler.Location) pprofiledict.Location {
	v := pprofiledict.Location{Addr: l.Addr, Kernel: l.Kernel}
	if m := l.Mapping; m != nil {
		v.Mapping = pprofiledict.Mapping{Start: m.Start, Limit: m.Limit, Offset: m.Offset, File: m.Path, BuildID: m.BuildID}
	}
	for _, f := range l.Frames {
		v.Frames = append(v.Frames, pprofiledict.Frame{Function: pprofiledict.Function{Name: f.Function, SystemName: f.SystemName,
			File: f.File, StartLine: int64(f.StartLine)}, Line: int64(f.Line)})
	}
	return v
}

// pdataValues reads the values back from decoded profiles; the profiles'
// windows must hold their samples.
func pdataValues(t *testing.T, procs []pprofiledict.Process) []rtProcess {
	var out []rtProcess
	for _, proc := range procs {
		p := rtProcess{Resource: proc.Resource.AsRaw()}
		for _, prof := range proc.Profiles {
			require.True(t, prof.HasClockOffset, "profile without its clock offset")
			p.ClockOffset = prof.ClockOffset
			for _, s := range prof.Samples {
				require.True(t, prof.Start <= s.Time && s.Time < prof.End, "sample at %d outside its profile [%d, %d)", s.Time, prof.Start, prof.End)
				require.Equal(t, s.Labels.State != "", prof.OffCPU, "a sample's state and its profile")
				p.Samples = append(p.Samples, rtSample{OffCPU: prof.OffCPU, Mono: clock.Fixed(prof.ClockOffset).Mono(s.Time), Value: s.Value,
					Stack: s.Stack, Labels: s.Labels, Link: s.Link})
			}
		}
		sortSamples(p.Samples)
		out = append(out, p)
	}
	return out
}

// sortSamples puts samples in an order of their values alone.
func sortSamples(s []rtSample) {
	slices.SortFunc(s, func(a, b rtSample) int {
		x, y := fmt.Sprintf("%+v", a), fmt.Sprintf("%+v", b)
		if x < y {
			return -1
		}
		if x > y {
			return 1
		}
		return 0
	})
}
