package htmlview

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"slices"
)

// The views scoped to a span, a span name, a poll or a time range need the
// samples one by one: which samples a selection has is only known when
// someone clicks. They travel as compact columns (the "detail"), gzipped
// and base64-encoded in the page; the page inflates them with the
// browser's DecompressionStream after its first draw, so the first draw
// does not wait for them.
//
// Layout, every number an unsigned LEB128 varint unless said otherwise
// (zigzag: a signed varint as encoding/binary writes it):
//
//	header:  version (1), rows, samples, spans, traces
//	per row: its number of samples; the samples are row-major, by time within a row
//	samples, one column after the other:
//	  time:   ns since the previous sample of the row (the first: since page.T0)
//	  node:   the node of page.All the sample's stack ends at
//	  span:   zigzag, 1 + page span index (0 none) less that of the previous sample
//	  flags:  one byte: 1 off-CPU, | state<<1
//	  weight: off-CPU samples only: their Sample.Weight
//	spans, one column after the other, ancestors before descendants:
//	  parent: 1 + page span index of the nearest kept ancestor, 0 none
//	  name:   index into page.SpanStrings
//	  trace:  index into the trace ids below
//	  start:  zigzag, ns relative to Data.Start less the previous span's
//	  dur:    ns
//	  then the Breakdown's OnSamples, OffSamples, Blocked, Runnable, OffUnknown, a column each
//	trace ids: length and bytes of each
//
// Row-major samples make runs: a row's times advance by the sample period
// and its span changes once per span, which gzip shrinks to almost nothing.

// detailVersion is the layout above; the page refuses another.
const detailVersion = 1

// maxSpans is the most spans the page keeps, the longest: past it the span
// table would outweigh the rest of the page.
const maxSpans = 100_000

// spanTable is the spans the page keeps and how Data's refer to them.
type spanTable struct {
	order     []int32 // page position -> Data.Spans index
	pageRef   []int32 // Data.Spans index -> 1 + page position, 0 when left out
	sampleRef []int32 // Data.Spans index -> 1 + page position of the nearest kept span at or above it, 0 none
	parent    []int32 // page position -> 1 + page position of the nearest kept span above it, 0 none
}

// keepSpans keeps the limit longest spans (ties: the earlier) and orders
// them so that a span comes after the spans above it. A sample linked to a
// span left out counts for the nearest kept span above that one, so that
// every kept span still has all of its samples.
func keepSpans(spans []Span, limit int) *spanTable {
	n := len(spans)
	st := &spanTable{pageRef: make([]int32, n), sampleRef: make([]int32, n)}
	kept := make([]bool, n)
	if n <= limit {
		for i := range kept {
			kept[i] = true
		}
	} else {
		byLen := make([]int32, n)
		for i := range byLen {
			byLen[i] = int32(i)
		}
		slices.SortStableFunc(byLen, func(a, b int32) int {
			sa, sb := &spans[a], &spans[b]
			return cmp.Or(cmp.Compare(sb.End-sb.Start, sa.End-sa.Start), cmp.Compare(sa.Start, sb.Start))
		})
		for _, i := range byLen[:limit] {
			kept[i] = true
		}
	}
	// nearest[i]: the nearest kept span at or above i, -1 none; -2 not
	// yet known. Validate has ruled out loops.
	nearest := make([]int32, n)
	for i := range nearest {
		nearest[i] = -2
	}
	var walk func(i int32) int32
	walk = func(i int32) int32 {
		var path []int32
		res := int32(-1)
		for j := i; j >= 0; j = int32(spans[j].Parent.Index()) {
			if nearest[j] != -2 {
				res = nearest[j]
				break
			}
			if kept[j] {
				res = j
				break
			}
			path = append(path, j)
		}
		for _, j := range path {
			nearest[j] = res
		}
		if kept[i] {
			nearest[i] = i
		}
		return nearest[i]
	}
	depth := make([]int32, n) // kept spans above, for kept spans
	for i := range n {
		if !kept[i] {
			continue
		}
		walk(int32(i))
		for p := parentKept(spans, walk, int32(i)); p >= 0; p = parentKept(spans, walk, p) {
			depth[i]++
		}
		st.order = append(st.order, int32(i))
	}
	slices.SortStableFunc(st.order, func(a, b int32) int {
		return cmp.Or(cmp.Compare(depth[a], depth[b]), cmp.Compare(spans[a].Start, spans[b].Start))
	})
	for pos, i := range st.order {
		st.pageRef[i] = int32(pos + 1)
	}
	st.parent = make([]int32, len(st.order))
	for pos, i := range st.order {
		if p := parentKept(spans, walk, i); p >= 0 {
			st.parent[pos] = st.pageRef[p]
		}
	}
	for i := range n {
		if k := walk(int32(i)); k >= 0 {
			st.sampleRef[i] = st.pageRef[k]
		}
	}
	return st
}

// parentKept is the nearest kept span strictly above i, -1 none.
func parentKept(spans []Span, walk func(int32) int32, i int32) int32 {
	p := int32(spans[i].Parent.Index())
	if p < 0 {
		return -1
	}
	return walk(p)
}

// spanStrings interns the kept spans' names.
func spanStrings(d *Data, st *spanTable) (names []string, id []int32) {
	ids := map[string]int32{}
	id = make([]int32, len(st.order))
	for pos, i := range st.order {
		name := d.Spans[i].Name
		k, ok := ids[name]
		if !ok {
			k = int32(len(names))
			names = append(names, name)
			ids[name] = k
		}
		id[pos] = k
	}
	if names == nil {
		names = []string{}
	}
	return names, id
}

// encodeDetail writes the columns described at the top of this file.
// leaf maps a stack to its node of page.All.
func encodeDetail(d *Data, p *page, st *spanTable, nameID []int32, leaf []int32) (string, error) {
	var hdr, times, nodes, spanCol, flags, weights []byte
	hdr = binary.AppendUvarint(hdr, detailVersion)
	hdr = binary.AppendUvarint(hdr, uint64(len(d.Rows)))
	hdr = binary.AppendUvarint(hdr, uint64(len(d.Samples)))
	hdr = binary.AppendUvarint(hdr, uint64(len(st.order)))

	order := make([]int32, len(d.Samples))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int {
		sa, sb := &d.Samples[a], &d.Samples[b]
		return cmp.Or(cmp.Compare(sa.Row, sb.Row), cmp.Compare(sa.Time, sb.Time))
	})
	perRow := make([]uint64, len(d.Rows))
	for _, s := range d.Samples {
		perRow[s.Row]++
	}
	row := int32(-1)
	var last int64
	var lastRef int64
	for _, i := range order {
		s := &d.Samples[i]
		t := s.Time - d.Start
		if s.Row != row {
			row, last = s.Row, p.T0
		}
		times = binary.AppendUvarint(times, uint64(t-last))
		last = t
		nodes = binary.AppendUvarint(nodes, uint64(leaf[s.Stack]))
		ref := int64(0)
		if s.Span != NoSpan {
			ref = int64(st.sampleRef[s.Span.Index()])
		}
		spanCol = binary.AppendVarint(spanCol, ref-lastRef)
		lastRef = ref
		f := byte(s.State) << 1
		if s.OffCPU {
			f |= 1
			weights = binary.AppendUvarint(weights, uint64(s.Weight))
		}
		flags = append(flags, f)
	}

	// Trace ids, interned.
	var traces []string
	traceID := map[string]int{}
	var parents, names, traceCol, starts, durs []byte
	bcols := make([][]byte, 5)
	var prevStart int64
	for pos, i := range st.order {
		sp := &d.Spans[i]
		k, ok := traceID[sp.TraceID]
		if !ok {
			k = len(traces)
			traces = append(traces, sp.TraceID)
			traceID[sp.TraceID] = k
		}
		parents = binary.AppendUvarint(parents, uint64(st.parent[pos]))
		names = binary.AppendUvarint(names, uint64(nameID[pos]))
		traceCol = binary.AppendUvarint(traceCol, uint64(k))
		start := sp.Start - d.Start
		starts = binary.AppendVarint(starts, start-prevStart)
		prevStart = start
		durs = binary.AppendUvarint(durs, uint64(sp.End-sp.Start))
		b := &sp.Breakdown
		for c, v := range []int64{b.OnSamples, b.OffSamples, b.Blocked, b.Runnable, b.OffUnknown} {
			bcols[c] = binary.AppendUvarint(bcols[c], uint64(max(v, 0)))
		}
	}
	hdr = binary.AppendUvarint(hdr, uint64(len(traces)))
	for _, n := range perRow {
		hdr = binary.AppendUvarint(hdr, n)
	}
	var tr []byte
	for _, id := range traces {
		tr = binary.AppendUvarint(tr, uint64(len(id)))
		tr = append(tr, id...)
	}

	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	for _, part := range [][]byte{hdr, times, nodes, spanCol, flags, weights, parents, names, traceCol, starts, durs,
		bcols[0], bcols[1], bcols[2], bcols[3], bcols[4], tr} {
		if _, err := zw.Write(part); err != nil {
			return "", fmt.Errorf("htmlview: compress sample detail: %w", err)
		}
	}
	if err := zw.Close(); err != nil {
		return "", fmt.Errorf("htmlview: compress sample detail: %w", err)
	}
	return base64.StdEncoding.EncodeToString(z.Bytes()), nil
}
