package tracefileexporter

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/perfprof/perfprof/exporter/tracefileexporter/internal/metadatatest"
	"github.com/perfprof/perfprof/exporter/tracefileexporter/tracefiletest"
	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/wire"
	"github.com/perfprof/perfprof/pkg/pprofiledict"
)

// contextProfiles is one push of samples with the context attributes ctxs
// (nil: none), one on-CPU sample of two timestamps for each, and an
// off-CPU sample with the first.
func contextProfiles(base uint64, ctxs ...[]pprofiledict.KV) *tracefiletest.ProfBuilder {
	b := tracefiletest.NewProfBuilder()
	stack := b.Stack(b.Location(0x401000, tracefiletest.F("work", "/src/w.c", 1)))
	on := b.Profile(4242, "routes", false)
	off := b.Profile(4242, "routes", true)
	for i, ctx := range ctxs {
		l := pprofiledict.NoLabels
		l.Tid, l.Context = 7, ctx
		ts := base + uint64(i)*10_000_000
		b.Sample(on, stack, 0, b.Labels(l), []uint64{ts, ts + 1_000_000}, []int64{1, 1})
		if i == 0 {
			b.Sample(off, stack, 0, b.Labels(l), []uint64{ts + 2_000_000}, []int64{5_000_000})
		}
	}
	return b
}

// contextOf reads a segment's samples back as the attributes of their
// sets, in file order, "" for a sample without a set; and how many sets
// the segment defines.
func contextOf(t *testing.T, path string) (samples []string, sets int) {
	t.Helper()
	byID := map[uint64]string{}
	for _, ev := range readTRC(t, path) {
		switch ev.Name() {
		case wire.NameContextAttributeSet:
			sets++
			id, ok := ev.Uint(wire.FieldSetID)
			require.True(t, ok)
			assert.Zero(t, ev.Timestamp, "a set has no timestamp")
			var kv []string
			for _, p := range ev.Field(wire.FieldAttributes).Map {
				kv = append(kv, p.Key+"="+p.Value)
			}
			byID[id] = strings.Join(kv, " ")
		case wire.NameCpuSample:
			id, ok := ev.Uint(wire.FieldContextSetID)
			if !ok {
				samples = append(samples, "")
				continue
			}
			s, defined := byID[id]
			require.True(t, defined, "a sample refers to set %d before it is defined", id)
			samples = append(samples, s)
		}
	}
	return samples, sets
}

// TestExportContextAttributes: samples carry their context attributes as a
// reference to a set written once per segment, on- and off-CPU alike, and
// the sets are bounded as the receiver bounds them.
func TestExportContextAttributes(t *testing.T) {
	dir := t.TempDir()
	e, tt := newMeasuredFile(t, dir)
	base := uint64(time.Now().UnixNano())
	a := []pprofiledict.KV{{Key: convention.HTTPRoute, Value: "GET /a"}, {Key: "user.name", Value: "bob"}}
	bRoute := []pprofiledict.KV{{Key: convention.HTTPRoute, Value: "GET /b"}}
	// 20 attributes, a key repeated and a value of 300 bytes whose 128th
	// byte is inside a character.
	var big []pprofiledict.KV
	long := "x" + strings.Repeat("é", 150)
	big = append(big, pprofiledict.KV{Key: "long", Value: long}, pprofiledict.KV{Key: "long", Value: "again"})
	for i := range 19 {
		big = append(big, pprofiledict.KV{Key: fmt.Sprintf("k%02d", i), Value: "v"})
	}
	require.NoError(t, e.pushProfiles(t.Context(), contextProfiles(base, a, bRoute, nil, big).Profiles))
	// The next push of the segment refers to the sets written.
	require.NoError(t, e.pushProfiles(t.Context(), contextProfiles(base+1e9, bRoute, a).Profiles))
	require.NoError(t, e.rotator().Rotate())
	// The next segment writes them again.
	require.NoError(t, e.pushProfiles(t.Context(), contextProfiles(base+2e9, a).Profiles))
	require.NoError(t, e.shutdown(t.Context()))

	segs := segmentFiles(t, dir)
	require.Len(t, segs, 2)
	samples, sets := contextOf(t, segs[0])
	assert.Equal(t, 3, sets, "sets in the first segment")
	const sa, sb = "http.route=GET /a user.name=bob", "http.route=GET /b"
	var bigSet string
	for _, s := range samples {
		if strings.HasPrefix(s, "long=") {
			bigSet = s
		}
	}
	// Samples are in time order: a's two on-CPU and its off-CPU, b's,
	// none, big's; then the second push, whose first context has an off-CPU
	// sample too.
	assert.Equal(t, []string{sa, sa, sa, sb, sb, "", "", bigSet, bigSet, sb, sb, sb, sa, sa}, samples)
	kvs := strings.Split(bigSet, " ")
	require.Len(t, kvs, convention.ContextAttrsMax)
	v := strings.TrimPrefix(kvs[0], "long=")
	assert.True(t, utf8.ValidString(v) && len(v) <= convention.ContextAttrMaxBytes && len(v) >= convention.ContextAttrMaxBytes-1 &&
		strings.HasPrefix(long, v), "long value written as %q", v)
	assert.Equal(t, "k14=v", kvs[15], "the 16th attribute")

	samples, sets = contextOf(t, segs[1])
	assert.Equal(t, 1, sets, "sets in the second segment")
	assert.Equal(t, []string{sa, sa, sa}, samples)

	// Left out: the repeated key and the 4 attributes past 16.
	metadatatest.AssertEqualExporterTracefileSkipped(t, tt, []metricdata.DataPoint[int64]{
		{Value: 5, Attributes: attribute.NewSet(attribute.String("reason", "context_attribute"))},
	}, metricdatatest.IgnoreTimestamp())
}

// TestContextSetsForget: a table past its bound starts over without
// reusing an id in the segment, and a failed batch's sets are written
// again.
func TestContextSetsForget(t *testing.T) {
	var c contextSets
	w := wire.NewWriter(new(strings.Builder))
	b := &batch{}
	for i := range maxContextSets + 2 {
		b.groups = append(b.groups, sampleGroup{ctx: []pprofiledict.KV{{Key: "id", Value: fmt.Sprint(i)}}})
	}
	_, err := c.assign(w, b)
	require.NoError(t, err)
	assert.Len(t, c.ids, 2, "sets remembered after the table filled")
	assert.Equal(t, wire.Some[uint64](maxContextSets+1), b.groups[len(b.groups)-1].set)
	c.forget()
	b.groups = b.groups[:1]
	_, err = c.assign(w, b)
	require.NoError(t, err)
	assert.Equal(t, wire.Some[uint64](maxContextSets+2), b.groups[0].set, "a forgotten set gets a new id")
	c.newSegment()
	_, err = c.assign(w, b)
	require.NoError(t, err)
	assert.Equal(t, wire.Some[uint64](0), b.groups[0].set, "ids start over in a new segment")
}
