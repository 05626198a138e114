package analysis

import (
	"cmp"
	"encoding/binary"
	"slices"
	"strings"

	"github.com/perfprof/perfprof/internal/wire"
)

// Context attributes: the attributes of the thread context record a sample
// was read in (http.route, datadog.trace_endpoint, ...), which a file holds
// as ContextAttributeSet events that samples refer to by id
// (docs/trace-conventions.md). They are a property of the sample's Link,
// as the samples of one span share them: a sample pays nothing for them.
// They group samples by what a request did even when the application sends
// no spans at all.

// internAttrs returns the index of set in t.AttrSets, adding it if new.
func (t *Trace) internAttrs(set AttrSet) int32 {
	if len(set) == 0 {
		return 0
	}
	var buf [256]byte
	k := setKey(buf[:0], set)
	if i, ok := t.attrIdx[string(k)]; ok {
		return i
	}
	i := int32(len(t.AttrSets))
	t.AttrSets = append(t.AttrSets, set)
	t.attrIdx[string(k)] = i
	return i
}

// setKey appends the identity of a set to dst: each key and value with its
// length, so that no two sets share one.
func setKey(dst []byte, set AttrSet) []byte {
	for _, kv := range set {
		dst = binary.AppendUvarint(dst, uint64(len(kv.Key)))
		dst = append(dst, kv.Key...)
		dst = binary.AppendUvarint(dst, uint64(len(kv.Value)))
		dst = append(dst, kv.Value...)
	}
	return dst
}

// contextSet records a ContextAttributeSet of the file: the samples after
// it that give its id have its attributes, until the id is defined again.
// A key given twice keeps its first value.
func (b *builder) contextSet(e wire.ContextAttributeSet) {
	set := make(AttrSet, 0, len(e.Attributes))
	for _, p := range e.Attributes {
		if _, dup := set.Get(p.Key); !dup {
			set = append(set, KV{p.Key, p.Value})
		}
	}
	if b.ctxSets == nil {
		b.ctxSets = map[uint64]int32{}
	}
	b.ctxSets[e.ID] = b.t.internAttrs(set)
}

// contextAttrs returns the index of the set a sample's context_set_id
// names, 0 when it names none; an id no set defined before the sample is
// counted for a warning.
func (b *builder) contextAttrs(id wire.Opt[uint64]) int32 {
	if !id.Valid {
		return 0
	}
	i, ok := b.ctxSets[id.V]
	if !ok {
		b.unresolvedSets++
	}
	return i
}

// Attrs returns the context attributes of sample s (nil when it has none).
func (t *Trace) Attrs(s *TraceSample) AttrSet {
	if s.Link < 0 {
		return nil
	}
	return t.attrSet(t.Links[s.Link].Attrs)
}

// attrSet returns t.AttrSets[i], nil past its end (a Trace not made by
// Load may have no AttrSets at all).
func (t *Trace) attrSet(i int32) AttrSet {
	if i > 0 && int(i) < len(t.AttrSets) {
		return t.AttrSets[i]
	}
	return nil
}

// ByAttr groups samples by the value of their context attribute key;
// samples without it are in no group.
func (t *Trace) ByAttr(key string) Grouping {
	ids := map[string]int32{}
	var names []string
	linkVal := make([]int32, len(t.Links))
	for i, l := range t.Links {
		linkVal[i] = -1
		v, ok := t.attrSet(l.Attrs).Get(key)
		if !ok {
			continue
		}
		id, seen := ids[v]
		if !seen {
			id = int32(len(names))
			names = append(names, v)
			ids[v] = id
		}
		linkVal[i] = id
	}
	return Grouping{
		Key: func(s *TraceSample) int32 {
			if s.Link < 0 {
				return -1
			}
			return linkVal[s.Link]
		},
		Name: func(k int32) string { return names[k] },
	}
}

// AttrKey is a context attribute key of a trace's samples: how many
// samples carry it, and with how many values.
type AttrKey struct {
	Key     string
	Samples int64
	Values  int
}

// AttrKeys returns the context attribute keys of the samples that pass
// filter (nil: all), those carried by the most samples first.
func (t *Trace) AttrKeys(filter func(*TraceSample) bool) []AttrKey {
	perLink := make([]int64, len(t.Links))
	for i := range t.Samples {
		s := &t.Samples[i]
		if s.Link >= 0 && (filter == nil || filter(s)) {
			perLink[s.Link]++
		}
	}
	type stat struct {
		samples int64
		values  map[string]bool
	}
	keys := map[string]*stat{}
	for li, n := range perLink {
		if n == 0 {
			continue
		}
		for _, kv := range t.attrSet(t.Links[li].Attrs) {
			st := keys[kv.Key]
			if st == nil {
				st = &stat{values: map[string]bool{}}
				keys[kv.Key] = st
			}
			st.samples += n
			st.values[kv.Value] = true
		}
	}
	out := make([]AttrKey, 0, len(keys))
	for k, st := range keys {
		out = append(out, AttrKey{k, st.samples, len(st.values)})
	}
	slices.SortFunc(out, func(a, b AttrKey) int {
		if c := cmp.Compare(b.Samples, a.Samples); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out
}

// GroupBreakdown is the breakdown of the samples of one group (Breakdown
// without the wall time: a group of samples has none).
type GroupBreakdown struct {
	Name string
	Breakdown
}

// BreakdownBy counts the samples that pass filter (nil: all) per group of
// g: on-CPU samples and their CPU time (× the sample period), off-CPU
// samples and their time by thread state. The groups come largest on-CPU
// count first, then by off-CPU time; the samples in no group are counted
// in the returned Breakdown.
func (t *Trace) BreakdownBy(filter func(*TraceSample) bool, g Grouping) ([]GroupBreakdown, Breakdown) {
	groups := map[int32]*Breakdown{}
	var none Breakdown
	for i := range t.Samples {
		s := &t.Samples[i]
		if filter != nil && !filter(s) {
			continue
		}
		k := g.Key(s)
		if k < 0 {
			none.add(s)
			continue
		}
		b := groups[k]
		if b == nil {
			b = &Breakdown{}
			groups[k] = b
		}
		b.add(s)
	}
	period, _ := t.SamplePeriod()
	out := make([]GroupBreakdown, 0, len(groups))
	for k, b := range groups {
		b.finish(period)
		out = append(out, GroupBreakdown{g.Name(k), *b})
	}
	none.finish(period)
	slices.SortFunc(out, func(a, b GroupBreakdown) int {
		if c := cmp.Compare(b.OnSamples, a.OnSamples); c != 0 {
			return c
		}
		ao, bo := a.Blocked+a.Runnable+a.OffUnknown, b.Blocked+b.Runnable+b.OffUnknown
		if c := cmp.Compare(bo, ao); c != 0 {
			return c
		}
		if c := cmp.Compare(b.OffSamples, a.OffSamples); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, none
}
