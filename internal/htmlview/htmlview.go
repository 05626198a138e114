package htmlview

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"strings"
)

// Frame is one symbolized frame.
type Frame struct {
	Name string // function
	File string // source file, "" when unknown ("kernel" for kernel frames)
	Line int    // source line, 0 when unknown
}

// PageSample is one CPU sample as the page draws it.
type PageSample struct {
	Time   int64   // ns, any epoch (monotonic); the view shows times relative to Data.Start
	Row    int32   // index into Data.Rows (a worker or a thread)
	Stack  int32   // index into Data.Stacks
	OffCPU bool    // off-CPU (blocked/runnable) sample
	Weight int64   // 1 for on-CPU; off-CPU nanoseconds for off-CPU samples (0 treated as 1 in the flamegraph, as 0 in a breakdown)
	State  State   // thread state of an off-CPU sample
	Span   SpanRef // the span the sample is linked to
}

// State is the thread state of an off-CPU sample.
type State uint8

// Thread states; the values are those of the trace files.
const (
	StateUnknown  State = 0
	StateBlocked  State = 1
	StateRunnable State = 2
)

// SpanRef refers to a span of Data.Spans: its index plus one, so that the
// zero value of a Sample, Bar or Span refers to none.
type SpanRef int32

// NoSpan refers to no span.
const NoSpan SpanRef = 0

// SpanAt refers to Data.Spans[i].
func SpanAt(i int) SpanRef { return SpanRef(i + 1) }

// Index is the index into Data.Spans, -1 for NoSpan.
func (r SpanRef) Index() int { return int(r) - 1 }

// Bar is an interval drawn on a row of the timeline.
type Bar struct {
	Row        int32   // index into Data.Rows
	Start, End int64   // ns, same epoch as Sample.Time; End >= Start
	Name       string  // shown on hover
	Kind       string  // "poll", "span", "park"; others are drawn like spans in grey
	Span       SpanRef // for a "span" bar, the span: clicking the bar scopes the flamegraph to it
}

// Span is a span of the trace, for the views scoped to one. A span's
// samples are those linked to it or to a span below it (Sample.Span,
// Span.Parent), as internal/analysis defines them.
type Span struct {
	Name       string
	TraceID    string
	Parent     SpanRef // NoSpan for a root, or a parent that is not in Data.Spans
	Start, End int64   // ns, same epoch as Sample.Time
	// Breakdown of the span and the spans below it, over all of the
	// trace's samples (computed by the caller, so that the page shows
	// what the CLI prints).
	Breakdown Breakdown
}

// Breakdown is where the wall time of spans went, from their samples (see
// internal/analysis.Breakdown, which it mirrors). The page derives on-CPU
// time (OnSamples × Data.Period) and the time not observed (Wall less the
// rest, at least 0) as analysis does.
type Breakdown struct {
	Spans                         int   // spans whose durations make up Wall
	Wall                          int64 // ns
	OnSamples, OffSamples         int64
	Blocked, Runnable, OffUnknown int64 // off-CPU ns by thread state
}

// SpanName is what the spans of one name did (internal/analysis.NameStat).
type SpanName struct {
	Name               string
	Count              int
	P50, P95, P99, Max int64 // durations, ns
	Breakdown          Breakdown
}

// Row is one lane of the timeline.
type Row struct {
	Name string // "worker 0", "tid 1234 (name)"
}

// Data is everything one page shows.
type Data struct {
	Title   string
	Start   int64 // ns; time origin of the timeline
	Frames  []Frame
	Stacks  [][]int32 // each stack root-first, indices into Frames
	Rows    []Row
	Samples []PageSample
	Bars    []Bar

	// Spans and their statistics, for the span-scoped views. The page
	// keeps at most maxSpans spans (the longest); a sample linked to one
	// it leaves out counts for that span's nearest ancestor that it keeps.
	Spans     []Span
	SpanNames []SpanName // the largest total wall time first
	Period    int64      // ns of CPU time an on-CPU sample stands for; 0 if unknown
}

//go:embed page.html
var pageHTML string

//go:embed page.css
var pageCSS string

// The script is split by concern (page.js starts the page and holds what
// the views share; one file per view) and put together, in this order, into
// the page's one <script>.
var (
	//go:embed page.js
	pageJS string
	//go:embed flame.js
	flameJS string
	//go:embed timeline.js
	timelineJS string
	//go:embed scope.js
	scopeJS string
)

// The page is page.html with these markers replaced.
const (
	markTitle = "{{TITLE}}"
	markCSS   = "/*{{CSS}}*/"
	markData  = "{{DATA}}"
	markJS    = "/*{{JS}}*/"
)

// Write writes d as one self-contained HTML page. It returns an error,
// before writing anything, when d refers to a frame, stack or row that does
// not exist or has a bar that ends before it starts.
func Write(w io.Writer, d *Data) error {
	if err := d.validate(); err != nil {
		return err
	}
	p, err := build(d)
	if err != nil {
		return err
	}
	payload, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("htmlview: encode page data: %w", err)
	}
	// json.Marshal escapes <, > and & in strings, so no frame name can end
	// the <script> element the data sits in.
	title := d.Title
	if title == "" {
		title = "perfprof"
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	rest := pageHTML
	for _, part := range []struct {
		mark string
		text string
	}{
		{markTitle, html.EscapeString(title)}, // <title>
		{markCSS, pageCSS},
		{markTitle, html.EscapeString(title)}, // <h1>
		{markData, string(payload)},
		{markJS, pageJS + flameJS + timelineJS + scopeJS},
	} {
		before, after, ok := strings.Cut(rest, part.mark)
		if !ok {
			return fmt.Errorf("htmlview: page template lacks %s", part.mark)
		}
		bw.WriteString(before)
		bw.WriteString(part.text)
		rest = after
	}
	bw.WriteString(rest)
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("htmlview: write page: %w", err)
	}
	return nil
}

// validate says precisely what in d is out of range.
func (d *Data) validate() error {
	if d == nil {
		return fmt.Errorf("htmlview: nil Data")
	}
	for i, s := range d.Stacks {
		for j, f := range s {
			if f < 0 || int(f) >= len(d.Frames) {
				return fmt.Errorf("htmlview: stack %d, frame %d: index %d out of range (%d frames)", i, j, f, len(d.Frames))
			}
		}
	}
	for i, s := range d.Samples {
		if s.Stack < 0 || int(s.Stack) >= len(d.Stacks) {
			return fmt.Errorf("htmlview: sample %d: stack %d out of range (%d stacks)", i, s.Stack, len(d.Stacks))
		}
		if s.Row < 0 || int(s.Row) >= len(d.Rows) {
			return fmt.Errorf("htmlview: sample %d: row %d out of range (%d rows)", i, s.Row, len(d.Rows))
		}
		if s.Weight < 0 {
			return fmt.Errorf("htmlview: sample %d: negative weight %d", i, s.Weight)
		}
	}
	for i, b := range d.Bars {
		if b.Row < 0 || int(b.Row) >= len(d.Rows) {
			return fmt.Errorf("htmlview: bar %d: row %d out of range (%d rows)", i, b.Row, len(d.Rows))
		}
		if b.End < b.Start {
			return fmt.Errorf("htmlview: bar %d (%q): ends at %d before it starts at %d", i, b.Name, b.End, b.Start)
		}
		if b.Span < 0 || int(b.Span) > len(d.Spans) {
			return fmt.Errorf("htmlview: bar %d (%q): span %d out of range (%d spans)", i, b.Name, b.Span.Index(), len(d.Spans))
		}
	}
	for i, s := range d.Samples {
		if s.Span < 0 || int(s.Span) > len(d.Spans) {
			return fmt.Errorf("htmlview: sample %d: span %d out of range (%d spans)", i, s.Span.Index(), len(d.Spans))
		}
	}
	for i, sp := range d.Spans {
		if sp.Parent < 0 || int(sp.Parent) > len(d.Spans) || sp.Parent.Index() == i {
			return fmt.Errorf("htmlview: span %d (%q): parent %d out of range or itself (%d spans)", i, sp.Name, sp.Parent.Index(), len(d.Spans))
		}
		if sp.End < sp.Start {
			return fmt.Errorf("htmlview: span %d (%q): ends at %d before it starts at %d", i, sp.Name, sp.End, sp.Start)
		}
	}
	// Parents must not loop: the page walks them.
	state := make([]uint8, len(d.Spans)) // 0 not seen, 1 on the current path, 2 done
	for i := range d.Spans {
		var path []int
		j := i
		for j >= 0 && state[j] == 0 {
			state[j] = 1
			path = append(path, j)
			j = d.Spans[j].Parent.Index()
		}
		if j >= 0 && state[j] == 1 {
			return fmt.Errorf("htmlview: span %d (%q): its parents loop", j, d.Spans[j].Name)
		}
		for _, k := range path {
			state[k] = 2
		}
	}
	return nil
}
