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

// Sample is one CPU sample.
type Sample struct {
	Time   int64 // ns, any epoch (monotonic); the view shows times relative to Data.Start
	Row    int32 // index into Data.Rows (a worker or a thread)
	Stack  int32 // index into Data.Stacks
	OffCPU bool  // off-CPU (blocked/runnable) sample
	Weight int64 // 1 for on-CPU; off-CPU nanoseconds for off-CPU samples (0 treated as 1)
}

// Bar is an interval drawn on a row of the timeline.
type Bar struct {
	Row        int32  // index into Data.Rows
	Start, End int64  // ns, same epoch as Sample.Time; End >= Start
	Name       string // shown on hover
	Kind       string // "poll", "span", "park"; others are drawn like spans in grey
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
	Samples []Sample
	Bars    []Bar
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
	payload, err := json.Marshal(build(d))
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
		{markJS, pageJS + flameJS + timelineJS},
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
	}
	return nil
}
