package pdataprofiles

import (
	"os"
	"regexp"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/perfprof/perfprof/internal/profiler"
	"github.com/perfprof/perfprof/internal/sched"
	"github.com/perfprof/perfprof/internal/symbolize"
)

// TestREADMEListsEveryAttribute builds profiles from a snapshot that takes
// every branch of the conversion (on- and off-CPU, joined, with worker,
// link source and CPU delta, a kernel location, GNU and Go build ids) and
// checks that the receiver README's attribute
// table lists exactly the keys that come out, so that it cannot drift.
func TestREADMEListsEveryAttribute(t *testing.T) {
	gnu := &symbolize.Mapping{Start: 0x1000, Limit: 0x2000, Path: "/usr/lib/libc.so.6", BuildID: "0123456789012345678901234567890123456789"}
	gob := &symbolize.Mapping{Start: 0x3000, Limit: 0x4000, Path: "/app", BuildID: "abc/def"}
	locs := []*profiler.Location{
		{Addr: 0x1100, Mapping: gnu, Frames: []symbolize.Frame{{Function: "memcpy"}}},
		{Addr: 0x3100, Mapping: gob, Frames: []symbolize.Frame{{Function: "main.main"}}},
		{Addr: 0xffffffff81001000, Kernel: true, Frames: []symbolize.Frame{{Function: "do_syscall_64"}}},
	}
	snap := profiler.Snapshot{
		Pid: 100, Exe: "/app", Comm: "app", Resource: -1, Start: 1, End: 1e9,
		ContainerID: "3f4e5d6c7b8a", PodUID: "6b1f2c3d-0000-4000-8000-000000000001",
		Stacks:  [][]*profiler.Location{locs},
		Threads: map[uint32]string{7: "worker"},
		// A thread context record's attributes go on the samples under
		// the names its process's key map gives: the README lists them
		// as one row.
		ContextAttrs: [][]profiler.Attr{nil, {{Key: recordAttr, Value: "GET /"}}},
		Samples: []profiler.Sample{
			{Time: 10, Weight: 20_000, Tid: 7, CPU: 1, Stack: 0,
				Link: profiler.Link{Linked: true, TraceID: [16]byte{1}, SpanID: [8]byte{1}, Worker: 2, Root: "GET /", Attrs: 1}},
			{Time: 20, Weight: 10_000_000, Tid: 7, Stack: 0, State: sched.Blocked, Link: profiler.Link{Worker: -1}},
		},
	}
	pd, n := Build([]profiler.Snapshot{snap}, Params{Frequency: 99, OffCPUInterval: 10_000_000})
	require.Equal(t, 2, n)
	emitted := map[string]string{}
	dict := pd.Dictionary()
	key := func(i int32) string {
		return dict.StringTable().At(int(dict.AttributeTable().At(int(i)).KeyStrindex()))
	}
	rp := pd.ResourceProfiles().At(0)
	for k := range rp.Resource().Attributes().All() {
		emitted[k] = "resource"
	}
	profs := rp.ScopeProfiles().At(0).Profiles()
	for i := range profs.Len() {
		for _, a := range profs.At(i).AttributeIndices().AsRaw() {
			emitted[key(a)] = "profile"
		}
		forEachSample(profs.At(i), func(s pprofile.Sample) {
			for _, a := range s.AttributeIndices().AsRaw() {
				emitted[key(a)] = "sample"
			}
		})
	}
	for i := 1; i < dict.MappingTable().Len(); i++ {
		for _, a := range dict.MappingTable().At(i).AttributeIndices().AsRaw() {
			emitted[key(a)] = "mapping"
		}
	}
	for i := 1; i < dict.LocationTable().Len(); i++ {
		for _, a := range dict.LocationTable().At(i).AttributeIndices().AsRaw() {
			emitted[key(a)] = "location"
		}
	}

	if where, ok := emitted[recordAttr]; ok {
		delete(emitted, recordAttr)
		emitted[recordAttrRow] = where
	}
	readme, err := os.ReadFile("../../README.md") // the receiver's
	require.NoError(t, err)
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9_.]+|<[a-z ]+>)` \\| (resource|profile|sample|location|mapping) \\|")
	listed := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(string(readme), -1) {
		listed[m[1]] = m[2]
	}
	require.Equal(t, sorted(emitted), sorted(listed), "README attribute table (key and where) against what Build emits")
}

// recordAttr is a thread context record's attribute in the snapshot of
// TestREADMEListsEveryAttribute, and recordAttrRow the README's row of
// all such attributes.
const (
	recordAttr    = "http.route"
	recordAttrRow = "<record attribute>"
)

func forEachSample(p pprofile.Profile, fn func(pprofile.Sample)) {
	for i := range p.Samples().Len() {
		fn(p.Samples().At(i))
	}
}

func sorted(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, v+" "+k)
	}
	sort.Strings(out)
	return slices.Clip(out)
}
