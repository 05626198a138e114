package htmlview

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/binary"
	"io"
	"slices"
	"testing"
)

// detail is the decoded sample and span columns (the page's view of them).
type detail struct {
	rows, samples, spans, traces int
	perRow                       []int
	time                         []int64 // relative to Data.Start
	node, span                   []int64
	flags                        []byte
	weight                       []int64
	parent, name, trace          []int64
	start, dur                   []int64
	b                            [5][]int64
	traceIDs                     []string
}

// decodeDetail reads page.Detail as the page does.
func decodeDetail(t *testing.T, p *page) *detail {
	t.Helper()
	z, err := base64.StdEncoding.DecodeString(p.Detail)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(z))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	r := bytes.NewReader(raw)
	u := func() int64 {
		v, err := binary.ReadUvarint(r)
		if err != nil {
			t.Fatalf("detail at offset %d: %v", len(raw)-r.Len(), err)
		}
		return int64(v)
	}
	z64 := func() int64 {
		v, err := binary.ReadVarint(r)
		if err != nil {
			t.Fatalf("detail at offset %d: %v", len(raw)-r.Len(), err)
		}
		return v
	}
	if v := u(); v != detailVersion {
		t.Fatalf("detail version %d", v)
	}
	d := &detail{rows: int(u()), samples: int(u()), spans: int(u()), traces: int(u())}
	for range d.rows {
		d.perRow = append(d.perRow, int(u()))
	}
	off := 0
	row, last := 0, p.T0
	seen := 0
	for range d.samples {
		for row < d.rows && seen == d.perRow[row] {
			row, seen, last = row+1, 0, p.T0
		}
		last += u()
		d.time = append(d.time, last)
		seen++
	}
	for range d.samples {
		d.node = append(d.node, u())
	}
	var ref int64
	for range d.samples {
		ref += z64()
		d.span = append(d.span, ref)
	}
	for range d.samples {
		f, _ := r.ReadByte()
		d.flags = append(d.flags, f)
		if f&1 != 0 {
			off++
		}
	}
	for range off {
		d.weight = append(d.weight, u())
	}
	for range d.spans {
		d.parent = append(d.parent, u())
	}
	for range d.spans {
		d.name = append(d.name, u())
	}
	for range d.spans {
		d.trace = append(d.trace, u())
	}
	var st int64
	for range d.spans {
		st += z64()
		d.start = append(d.start, st)
	}
	for range d.spans {
		d.dur = append(d.dur, u())
	}
	for c := range d.b {
		for range d.spans {
			d.b[c] = append(d.b[c], u())
		}
	}
	for range d.traces {
		b := make([]byte, u())
		io.ReadFull(r, b)
		d.traceIDs = append(d.traceIDs, string(b))
	}
	if r.Len() != 0 {
		t.Fatalf("%d bytes left after the detail", r.Len())
	}
	return d
}

// spanData: two traces; request 0 has a child and a grandchild, request 1
// a child. Samples on two rows, out of time order.
func spanData() *Data {
	d := &Data{Start: 1000, Period: 10,
		Frames: []Frame{{"main", "m.go", 1}, {"a", "a.go", 2}, {"b", "b.go", 3}},
		Stacks: [][]int32{{0, 1}, {0, 2}, {0}},
		Rows:   []Row{{"w0"}, {"w1"}},
		Spans: []Span{
			{Name: "req", TraceID: "t0", Start: 1000, End: 2000, Breakdown: Breakdown{Spans: 1, Wall: 1000, OnSamples: 3, OffSamples: 1, Blocked: 500}},
			{Name: "db", TraceID: "t0", Parent: SpanAt(0), Start: 1100, End: 1200},
			{Name: "row", TraceID: "t0", Parent: SpanAt(1), Start: 1110, End: 1115},
			{Name: "req", TraceID: "t1", Start: 3000, End: 3500},
			{Name: "db", TraceID: "t1", Parent: SpanAt(3), Start: 3100, End: 3400},
		},
	}
	d.Samples = []PageSample{
		{Time: 1500, Row: 1, Stack: 0, Weight: 1, Span: SpanAt(0)},
		{Time: 1120, Row: 0, Stack: 1, Weight: 1, Span: SpanAt(2)},
		{Time: 1150, Row: 0, Stack: 1, OffCPU: true, State: StateBlocked, Weight: 500, Span: SpanAt(1)},
		{Time: 1010, Row: 0, Stack: 2, Weight: 1, Span: SpanAt(0)},
		{Time: 3200, Row: 1, Stack: 0, OffCPU: true, State: StateRunnable, Weight: 70, Span: SpanAt(4)},
		{Time: 5000, Row: 1, Stack: 0, Weight: 1},
	}
	d.Bars = []Bar{{Row: 0, Start: 1000, End: 2000, Kind: "span", Name: "req", Span: SpanAt(0)},
		{Row: 0, Start: 1110, End: 1115, Kind: "span", Name: "row", Span: SpanAt(2)}}
	return d
}

func TestDetail(t *testing.T) {
	d := spanData()
	p := mustBuild(t, d)
	dt := decodeDetail(t, p)
	if dt.rows != 2 || dt.samples != 6 || dt.spans != 5 || dt.traces != 2 || !slices.Equal(dt.perRow, []int{3, 3}) {
		t.Fatalf("header: %+v", dt)
	}
	// Row-major, by time in a row.
	if want := []int64{10, 120, 150, 500, 2200, 4000}; !slices.Equal(dt.time, want) {
		t.Errorf("times %v, want %v", dt.time, want)
	}
	if want := []byte{0, 0, 1 | 1<<1, 0, 1 | 2<<1, 0}; !slices.Equal(dt.flags, want) {
		t.Errorf("flags %v, want %v", dt.flags, want)
	}
	if !slices.Equal(dt.weight, []int64{500, 70}) {
		t.Errorf("weights %v", dt.weight)
	}
	// Spans: ancestors first (depth, then start).
	var names []string
	for _, n := range dt.name {
		names = append(names, p.SpanStrings[n])
	}
	if want := []string{"req", "req", "db", "db", "row"}; !slices.Equal(names, want) {
		t.Errorf("span order %v, want %v", names, want)
	}
	if want := []int64{0, 0, 1, 2, 3}; !slices.Equal(dt.parent, want) {
		t.Errorf("parents %v, want %v", dt.parent, want)
	}
	if want := []int64{0, 2000, 100, 2100, 110}; !slices.Equal(dt.start, want) {
		t.Errorf("starts %v, want %v", dt.start, want)
	}
	if want := []int64{1000, 500, 100, 300, 5}; !slices.Equal(dt.dur, want) {
		t.Errorf("durations %v, want %v", dt.dur, want)
	}
	if dt.b[0][0] != 3 || dt.b[1][0] != 1 || dt.b[2][0] != 500 || !slices.Equal(dt.traceIDs, []string{"t0", "t1"}) {
		t.Errorf("breakdown columns %v, traces %v", dt.b, dt.traceIDs)
	}
	// Samples point at page spans: row 0 holds the samples of req t0 (page
	// 1), row t0's (page 5) and db t0's (page 3).
	if want := []int64{1, 5, 3, 1, 4, 0}; !slices.Equal(dt.span, want) {
		t.Errorf("sample spans %v, want %v", dt.span, want)
	}
	// Every sample's node is a node of the tree of all samples whose
	// function is its stack's leaf.
	leafFn := []string{"main", "b", "b", "a", "a", "a"}
	for i, n := range dt.node {
		if got := p.Funcs[p.All.Fn[n]][0]; got != leafFn[i] {
			t.Errorf("sample %d ends at node %d (%s), want %s", i, n, got, leafFn[i])
		}
	}
	if p.All.Total != 6 || p.Bars.Span[0] != 1 || p.Bars.Span[1] != 5 || p.SpansOmitted != 0 || p.Period != 10 {
		t.Errorf("all %d, bar spans %v, omitted %d, period %d", p.All.Total, p.Bars.Span, p.SpansOmitted, p.Period)
	}
}

// Past the limit the longest spans stay; a sample of a span left out
// counts for its nearest kept ancestor, a bar of one says so (-1).
func TestKeepSpans(t *testing.T) {
	d := spanData()
	st := keepSpans(d.Spans, 3) // req t0 (1000), req t1 (500), db t1 (300)
	var kept []string
	for _, i := range st.order {
		kept = append(kept, d.Spans[i].Name+"/"+d.Spans[i].TraceID)
	}
	if want := []string{"req/t0", "req/t1", "db/t1"}; !slices.Equal(kept, want) {
		t.Fatalf("kept %v, want %v", kept, want)
	}
	if want := []int32{1, 1, 1, 2, 3}; !slices.Equal(st.sampleRef, want) {
		t.Errorf("sample refs %v, want %v", st.sampleRef, want)
	}
	if want := []int32{1, 0, 0, 2, 3}; !slices.Equal(st.pageRef, want) {
		t.Errorf("page refs %v, want %v", st.pageRef, want)
	}
	if want := []int32{0, 0, 2}; !slices.Equal(st.parent, want) {
		t.Errorf("parents %v, want %v", st.parent, want)
	}
	_, bs, _ := barTable(d, st)
	if !slices.Equal(bs.Span, []int32{1, -1}) {
		t.Errorf("bar spans %v, want [1 -1]", bs.Span)
	}
}

func TestSpanErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(*Data)
		want   string
	}{
		{"sample span", func(d *Data) { d.Samples[0].Span = SpanAt(9) }, "sample 0: span 9 out of range (5 spans)"},
		{"bar span", func(d *Data) { d.Bars[0].Span = SpanAt(5) }, `bar 0 ("req"): span 5 out of range`},
		{"parent", func(d *Data) { d.Spans[1].Parent = SpanAt(1) }, `span 1 ("db"): parent 1 out of range or itself`},
		{"loop", func(d *Data) { d.Spans[0].Parent = SpanAt(2) }, "its parents loop"},
		{"end", func(d *Data) { d.Spans[3].End = 0 }, `span 3 ("req"): ends at 0 before it starts at 3000`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := spanData()
			tc.break_(d)
			err := Write(io.Discard, d)
			if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}
