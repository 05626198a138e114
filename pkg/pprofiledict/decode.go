package pprofiledict

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// Process is a ResourceProfiles read back: a process and its profiles.
type Process struct {
	Resource pcommon.Map
	Profiles []Profile
}

// Profile is a profile read back, with one Sample per timestamp.
type Profile struct {
	OffCPU     bool
	PeriodNs   int64  // 0 when the period is not in ns
	Start, End uint64 // Unix ns, [Start, End)
	// ClockOffset is the convention.ClockOffset attribute (Unix −
	// CLOCK_MONOTONIC ns of the sample times), when HasClockOffset.
	ClockOffset    int64
	HasClockOffset bool
	Samples        []Sample
}

// Sample is one value of a pdata sample at one of its times: the receiver
// merges the samples that share a stack and labels into one pdata sample
// with a timestamp and a value each, and a Sample is one of those again.
type Sample struct {
	Time  uint64 // Unix ns
	Value int64
	// Stack is the sample's stack, leaf first; Samples of one stack share
	// the slice.
	Stack []Location
	Labels
	Link Link
}

// Decode reads every profile of pd back: the reader half of what the
// receiver writes with a Builder, for tests and tools that want the values
// rather than the tables. Hot paths read with a Reader, by index.
func Decode(pd pprofile.Profiles) []Process {
	r := NewReader(pd.Dictionary())
	stacks := map[int32][]Location{}
	stack := func(si int32) []Location {
		if st, ok := stacks[si]; ok {
			return st
		}
		idx := r.Stack(si)
		var st []Location
		for j := range idx.Len() {
			var l Location
			r.Location(idx.At(j), &l)
			st = append(st, l)
		}
		stacks[si] = st
		return st
	}
	var out []Process
	rps := pd.ResourceProfiles()
	for i := range rps.Len() {
		rp := rps.At(i)
		p := Process{Resource: rp.Resource().Attributes()}
		sps := rp.ScopeProfiles()
		for j := range sps.Len() {
			profs := sps.At(j).Profiles()
			for k := range profs.Len() {
				prof := profs.At(k)
				dp := Profile{OffCPU: r.OffCPU(prof), PeriodNs: r.PeriodNs(prof),
					Start: uint64(prof.Time()), End: uint64(prof.Time()) + prof.DurationNano()}
				dp.ClockOffset, dp.HasClockOffset = r.ClockOffset(prof)
				ss := prof.Samples()
				for x := range ss.Len() {
					s := ss.At(x)
					base := Sample{Stack: stack(s.StackIndex()), Labels: r.Labels(s.AttributeIndices()), Link: r.Link(s.LinkIndex())}
					Values(prof, s, func(t uint64, v int64) {
						base.Time, base.Value = t, v
						dp.Samples = append(dp.Samples, base)
					})
				}
				p.Profiles = append(p.Profiles, dp)
			}
		}
		out = append(out, p)
	}
	return out
}
