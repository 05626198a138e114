package htmlview

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
)

// pageData extracts and decodes the JSON the page's script reads.
func pageData(t *testing.T, html string) *page {
	t.Helper()
	const open = `<script type="application/json" id="perfprof-data">`
	_, rest, ok := strings.Cut(html, open)
	if !ok {
		t.Fatal("no data element")
	}
	data, _, ok := strings.Cut(rest, "</script>")
	if !ok {
		t.Fatal("data element not closed")
	}
	var p page
	if err := json.Unmarshal([]byte(data), &p); err != nil {
		t.Fatalf("page data: %v", err)
	}
	return &p
}

func write(t *testing.T, d *Data) string {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, d); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// The page must not be able to reach the network: no URL, no external
// resource, and a Content-Security-Policy that forbids loading anything.
func TestWriteSelfContained(t *testing.T) {
	html := write(t, genData(2000, 1))
	// The code and markup, without the data (whose names, such as
	// "app::http::handle_request", are only ever text).
	before, rest, _ := strings.Cut(html, `id="perfprof-data">`)
	_, after, _ := strings.Cut(rest, "</script>")
	html = before + after
	for _, re := range []string{
		`(?i)https?:`, `(?i)\bwss?:`, `(?i)\bftp:`, `//[a-z0-9.-]+\.[a-z]{2,}/`, // URLs
		`(?i)<(img|iframe|embed|object|audio|video|source)\b`, // elements that load
		`(?i)<script[^>]+src=`, `(?i)@import`, `(?i)url\(`, `(?i)@font-face`,
		`(?i)\b(fetch|XMLHttpRequest|WebSocket|EventSource|sendBeacon|importScripts)\b`,
	} {
		if m := regexp.MustCompile(re).FindString(html); m != "" {
			t.Errorf("page has %q (%s)", m, re)
		}
	}
	for _, link := range regexp.MustCompile(`(?i)<link[^>]*>`).FindAllString(html, -1) {
		if !strings.Contains(link, `href="data:`) {
			t.Errorf("page links to something: %s", link)
		}
	}
	if !strings.Contains(html, `content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"`) {
		t.Error("page lacks its Content-Security-Policy")
	}
	for _, mark := range []string{markTitle, markCSS, markData, markJS} {
		if strings.Contains(html, mark) {
			t.Errorf("marker %s left in the page", mark)
		}
	}
}

// Names come from the profiled program: none may end the script element,
// and the title is escaped.
func TestWriteEscapes(t *testing.T) {
	evil := `</script><script>alert(1)</script><!--`
	d := &Data{
		Title:   `<b>"x" & y</b>`,
		Frames:  []Frame{{evil, evil, 1}},
		Stacks:  [][]int32{{0}},
		Rows:    []Row{{evil}},
		Samples: []PageSample{{Stack: 0}},
		Bars:    []Bar{{Name: evil, Kind: evil, End: 1}},
	}
	html := write(t, d)
	if strings.Count(html, "</script>") != 2 {
		t.Errorf("%d </script> in the page, want 2 (data and code)", strings.Count(html, "</script>"))
	}
	if strings.Contains(html, "alert(1)</script>") || strings.Contains(html, "<b>") {
		t.Error("unescaped text in the page")
	}
	if !strings.Contains(html, "<title>&lt;b&gt;&#34;x&#34; &amp; y&lt;/b&gt;</title>") {
		t.Error("title not escaped")
	}
	p := pageData(t, html)
	if p.Funcs[0][0] != evil || p.Rows[0] != evil || p.Strings[0] != evil {
		t.Errorf("names changed on the way: %+v %+v %+v", p.Funcs, p.Rows, p.Strings)
	}
}

func TestWriteEmpty(t *testing.T) {
	for _, d := range []*Data{{}, {Rows: []Row{{"w"}}}, {Rows: []Row{{"w"}}, Bars: []Bar{{Start: 5, End: 9, Kind: "poll"}}}} {
		p := pageData(t, write(t, d))
		if p.On == nil || p.On.Total != 0 || len(p.On.Fn) != 1 || p.Off != nil || len(p.Marks) != len(d.Rows) || p.BucketNs < 1 {
			t.Errorf("%+v: page data %+v", d, p)
		}
	}
}

func TestWriteTimesRelative(t *testing.T) {
	d := &Data{
		Start: 1_000_000, Frames: []Frame{{"f", "", 0}}, Stacks: [][]int32{{0}}, Rows: []Row{{"w"}},
		Samples: []PageSample{{Time: 1_000_500, Stack: 0}, {Time: 1_002_000, Stack: 0}},
		Bars:    []Bar{{Start: 999_000, End: 1_003_000, Kind: "span", Name: "s"}},
	}
	p := pageData(t, write(t, d))
	if p.T0 != -1000 || p.T1 != 3000 || p.Bars.Start[0] != -1000 || p.Bars.End[0] != 3000 {
		t.Errorf("t0 %d t1 %d bar %d-%d", p.T0, p.T1, p.Bars.Start[0], p.Bars.End[0])
	}
	if b := (1_000_500 - d.Start - p.T0) / p.BucketNs; p.Marks[0][0] != b {
		t.Errorf("first mark in bucket %d, want %d", p.Marks[0][0], b)
	}
}

type failWriter struct{}

var errDisk = errors.New("disk full")

func (failWriter) Write([]byte) (int, error) { return 0, errDisk }

func TestWriteErrors(t *testing.T) {
	ok := func() *Data {
		return &Data{Frames: []Frame{{"f", "", 0}}, Stacks: [][]int32{{0}}, Rows: []Row{{"w"}},
			Samples: []PageSample{{Stack: 0}}, Bars: []Bar{{Start: 1, End: 2}}}
	}
	for _, tc := range []struct {
		name   string
		break_ func(*Data)
		want   string
	}{
		{"frame", func(d *Data) { d.Stacks[0][0] = 1 }, "stack 0, frame 0: index 1 out of range (1 frames)"},
		{"negative frame", func(d *Data) { d.Stacks[0][0] = -1 }, "stack 0, frame 0: index -1 out of range"},
		{"stack", func(d *Data) { d.Samples[0].Stack = 1 }, "sample 0: stack 1 out of range (1 stacks)"},
		{"row", func(d *Data) { d.Samples[0].Row = 2 }, "sample 0: row 2 out of range (1 rows)"},
		{"weight", func(d *Data) { d.Samples[0].Weight = -5 }, "sample 0: negative weight -5"},
		{"bar row", func(d *Data) { d.Bars[0].Row = -1 }, "bar 0: row -1 out of range"},
		{"bar end", func(d *Data) { d.Bars[0].End = 0 }, `bar 0 (""): ends at 0 before it starts at 1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := ok()
			tc.break_(d)
			var b bytes.Buffer
			err := Write(&b, d)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if b.Len() != 0 {
				t.Errorf("wrote %d bytes before failing", b.Len())
			}
		})
	}
	if err := Write(failWriter{}, ok()); !errors.Is(err, errDisk) {
		t.Errorf("write error: %v", err)
	}
	if err := Write(&bytes.Buffer{}, nil); err == nil {
		t.Error("nil Data accepted")
	}
}
