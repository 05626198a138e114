package analysis_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/perfprof/perfprof/internal/analysis"
	"github.com/perfprof/perfprof/internal/analysis/analysistest"
	"github.com/perfprof/perfprof/internal/wire"
)

func load(t *testing.T, paths ...string) *analysis.Trace {
	t.Helper()
	tr, err := analysis.Load(paths, analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestDemoTrace(t *testing.T) {
	tr := load(t, analysistest.Shared(t, analysistest.DemoTrace))
	if len(tr.Files) != 1 {
		t.Fatalf("files %d", len(tr.Files))
	}
	f := tr.Files[0]
	if f.Format != analysis.FormatTRC || !f.Gzip || f.Bytes != analysistest.DemoRawBytes || f.Streams != analysistest.DemoHeaders ||
		f.Events != analysistest.DemoEvents || f.Truncated {
		t.Errorf("file info %+v", f)
	}
	c := tr.Counts
	if c["CpuSampleEvent"] != analysistest.DemoCpuSamples || c["PollStartEvent"] != analysistest.DemoPolls ||
		c["PollEndEvent"] != analysistest.DemoPolls || c["SymbolTableEntry"] != analysistest.DemoSymbolEntries ||
		c["WorkerParkEvent"] != analysistest.DemoParks {
		t.Errorf("counts %v", c)
	}
	if len(tr.Samples) != analysistest.DemoCpuSamples {
		t.Errorf("samples %d", len(tr.Samples))
	}
	// Every poll pairs: the demo trace passes dial9's integrity check.
	if len(tr.Polls) != analysistest.DemoPolls {
		t.Errorf("polls %d, want %d; warnings %v", len(tr.Polls), analysistest.DemoPolls, tr.Warnings)
	}
	workers := map[uint64]bool{}
	for _, p := range tr.Polls {
		workers[p.Worker] = true
		if p.End < p.Start {
			t.Fatalf("poll ends before it starts: %+v", p)
		}
	}
	if len(workers) != analysistest.DemoWorkers {
		t.Errorf("workers %v", workers)
	}
	if len(tr.Parks) < analysistest.DemoParks-analysistest.DemoWorkers {
		t.Errorf("parks %d", len(tr.Parks))
	}
	if len(tr.Unparks) != analysistest.DemoParks {
		t.Errorf("unparks %d", len(tr.Unparks))
	}
	on, off := 0, 0
	for _, s := range tr.Samples {
		if s.Source == analysis.SourceOffCPU {
			off++
		} else {
			on++
		}
	}
	if on == 0 || off == 0 {
		t.Errorf("on-CPU %d, off-CPU %d: the demo has both", on, off)
	}
	// Clock sync: the demo ran in May 2026.
	w, ok := tr.Wall(tr.Start)
	if !ok || w.Year() != 2026 || w.Month() != 5 {
		t.Errorf("wall clock of the start: %v %v", w, ok)
	}
	// Symbolization: kernel frames resolve (schedule is in the demo's table);
	// most user frames are symbolized.
	known, total := 0, 0
	for _, l := range tr.Locations {
		total++
		if l.Known {
			known++
		}
	}
	if known == 0 || known < total/2 {
		t.Errorf("symbolized locations %d of %d", known, total)
	}
	a := tr.Aggregate(analysis.OnCPU, analysis.Count)
	if a.Samples != int64(on) {
		t.Errorf("aggregate %d", a.Samples)
	}
	fs := tr.Funcs(a)
	if len(fs) == 0 || fs[0].Self == 0 {
		t.Fatalf("function table %v", fs[:min(3, len(fs))])
	}
	for _, f := range fs {
		if f.Self > f.Cum || f.Cum > uint64(on) {
			t.Fatalf("function %+v: self > cum or cum > samples %d", f, on)
		}
	}
	sd := tr.SchedDelays()
	if sd.From != "WorkerUnpark sched_wait_ns" || sd.N != analysistest.DemoParks {
		t.Errorf("sched delays %+v", sd)
	}
}

func writeSynth(t *testing.T, s analysistest.Synth, name string, legacy bool) (string, analysistest.Truth) {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	tr, err := s.WriteFile(p, legacy)
	if err != nil {
		t.Fatal(err)
	}
	return p, tr
}

func pct(n, d uint64) float64 { return 100 * float64(n) / float64(d) }

func checkSynth(t *testing.T, tr *analysis.Trace, truth analysistest.Truth, s analysistest.Synth, legacy bool) {
	t.Helper()
	a := tr.Aggregate(analysis.OnCPU, analysis.Count)
	if a.Samples != int64(truth.OnCPU) {
		t.Fatalf("on-CPU samples %d, want %d", a.Samples, truth.OnCPU)
	}
	// The files' event counts are what the counts by kind add up to, in
	// either layout (a legacy file once reported 0).
	var counted, events int64
	for _, n := range tr.Counts {
		counted += n
	}
	for _, f := range tr.Files {
		events += f.Events
	}
	if events != counted || counted == 0 {
		t.Errorf("files hold %d events, counts by kind add up to %d", events, counted)
	}
	fs := tr.Funcs(a)
	var hot, handle, main analysis.FuncStat
	for _, f := range fs {
		switch f.Name {
		case analysistest.HotFunc:
			hot = f
		case analysistest.HandleFunc:
			handle = f
		case analysistest.MainFunc:
			main = f
		}
	}
	wantHot := 100 * float64(truth.Hot) / float64(truth.OnCPU)
	if got := pct(hot.Self, a.Total); math.Abs(got-wantHot) > 2 {
		t.Errorf("%s SELF%% %.2f, want %.2f ± 2", analysistest.HotFunc, got, wantHot)
	}
	if hot.Cum != hot.Self {
		t.Errorf("hot cum %d self %d", hot.Cum, hot.Self)
	}
	if handle.Self != 0 || handle.Cum != uint64(truth.Hot+truth.Cold) {
		t.Errorf("handle %+v, want cum %d", handle, truth.Hot+truth.Cold)
	}
	if main.Cum != uint64(truth.OnCPU) {
		t.Errorf("main cum %d, want every sample %d", main.Cum, truth.OnCPU)
	}
	folded := tr.Folded(a, "")
	var sum uint64
	for k, v := range folded {
		sum += v
		if !strings.HasPrefix(k, analysistest.MainFunc+";") {
			t.Errorf("folded stack not rooted at main: %q", k)
		}
	}
	if sum != uint64(truth.OnCPU) {
		t.Errorf("folded total %d, want %d", sum, truth.OnCPU)
	}
	hotStack := "main;runtime.worker;app.handle;app.compute;app.hot"
	if legacy {
		hotStack = "main;runtime.worker;app.handle;app.hot"
	}
	if folded[hotStack] != uint64(truth.Hot) {
		t.Errorf("folded %q = %d, want %d (have %v)", hotStack, folded[hotStack], truth.Hot, folded)
	}
	if folded["main;runtime.worker;app.handle;0xdead0;app.cold"] != uint64(truth.Cold) {
		t.Errorf("unknown address not shown in hex: %v", folded)
	}
	if len(tr.Polls) != truth.Polls {
		t.Errorf("polls %d, want %d (warnings %v)", len(tr.Polls), truth.Polls, tr.Warnings)
	}
	lps := tr.LongPolls(1_000_000)
	if len(lps) != 1 {
		t.Fatalf("long polls %d, want 1", len(lps))
	}
	lp := lps[0]
	p := tr.Polls[lp.Poll]
	if p.Worker != truth.LongPoll.Worker || lp.OnCPU.Samples != int64(truth.LongPoll.OnCPU) {
		t.Errorf("long poll %+v on-CPU %d, want %+v", p, lp.OnCPU.Samples, truth.LongPoll)
	}
	if !legacy && lp.OffCPU.Samples != int64(truth.LongPoll.OffCPU) {
		t.Errorf("long poll off-CPU %d, want %d", lp.OffCPU.Samples, truth.LongPoll.OffCPU)
	}
	groups, _ := tr.AggregateBy(analysis.OnCPU, analysis.Count, tr.ByWorker())
	for _, g := range groups {
		if strings.HasPrefix(g.Name, "worker ") {
			var w uint32
			for id, n := range truth.PerWorker {
				if g.Name == "worker "+string(rune('0'+id)) {
					w = id
					if g.Samples != int64(n) {
						t.Errorf("%s: %d samples, want %d", g.Name, g.Samples, n)
					}
				}
			}
			_ = w
		}
	}
	if legacy {
		return
	}
	// Spans: every hot sample is in GET /hot, where app.hot is 100% self.
	spans, none := tr.AggregateBy(analysis.OnCPU, analysis.Count, tr.BySpan())
	if none.Samples != int64(truth.Other) {
		t.Errorf("unlinked on-CPU samples %d, want %d", none.Samples, truth.Other)
	}
	for _, g := range spans {
		if g.Name == analysistest.HotSpan {
			if g.Samples != int64(truth.Hot) {
				t.Errorf("hot span samples %d, want %d", g.Samples, truth.Hot)
			}
			if f := tr.Funcs(g.Agg); f[0].Name != analysistest.HotFunc || f[0].Self != g.Total {
				t.Errorf("hot span table %v", f)
			}
		}
	}
	blk, weighted := tr.Blocking()
	if !weighted || blk.Samples != int64(truth.Blocked) || blk.Total != truth.BlockedNs {
		t.Errorf("blocking %d samples %d ns weighted %v, want %d %d", blk.Samples, blk.Total, weighted, truth.Blocked, truth.BlockedNs)
	}
	sd := tr.SchedDelays()
	if sd.From != "thread_state runnable value_ns" || sd.N != len(truth.RunnableNs) ||
		sd.P50 != analysis.Percentile(truth.RunnableNs, 50) || sd.P99 != analysis.Percentile(truth.RunnableNs, 99) {
		t.Errorf("sched delays %+v", sd)
	}
	if sd.P50 != 50_000 || sd.P99 != 99_000 {
		t.Errorf("sched delay p50 %d p99 %d, want 50000 99000", sd.P50, sd.P99)
	}
	if _, ok := tr.Wall(tr.Start); !ok {
		t.Error("no clock sync")
	}
}

func TestSynthTRC(t *testing.T) {
	s := analysistest.DefaultSynth()
	p, truth := writeSynth(t, s, "synth.bin", false)
	checkSynth(t, load(t, p), truth, s, false)
}

func TestSynthGzip(t *testing.T) {
	s := analysistest.DefaultSynth()
	p, truth := writeSynth(t, s, "synth.bin.gz", false)
	tr := load(t, p)
	if !tr.Files[0].Gzip {
		t.Error("not detected as gzip")
	}
	checkSynth(t, tr, truth, s, false)
}

func TestSynthLegacy(t *testing.T) {
	s := analysistest.DefaultSynth()
	s.Blocked, s.Runnable = 0, 0
	for _, name := range []string{"legacy.bin", "legacy.bin.gz"} {
		p, truth := writeSynth(t, s, name, true)
		tr := load(t, p)
		if tr.Files[0].Format != analysis.FormatTokioTRC || tr.Files[0].Version != 13 {
			t.Errorf("file %+v", tr.Files[0])
		}
		checkSynth(t, tr, truth, s, true)
	}
}

func TestShares(t *testing.T) {
	for _, share := range []float64{0.05, 0.5, 0.93} {
		s := analysistest.DefaultSynth()
		s.HotShare = share
		s.OnCPU = 3000
		p, truth := writeSynth(t, s, "s.bin", false)
		tr := load(t, p)
		a := tr.Aggregate(analysis.OnCPU, analysis.Count)
		for _, f := range tr.Funcs(a) {
			if f.Name == analysistest.HotFunc {
				// The truth counts worker samples; the table includes the
				// flush thread's.
				want := share * float64(s.OnCPU) / float64(truth.OnCPU) * 100
				if got := pct(f.Self, a.Total); math.Abs(got-want) > 2 {
					t.Errorf("share %.2f: SELF%% %.2f, want %.2f", share, got, want)
				}
			}
		}
	}
}

// truncate writes the first n bytes of src to a new file.
func truncate(t *testing.T, src string, n int) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "cut.bin")
	if err := os.WriteFile(p, b[:n], 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTruncated(t *testing.T) {
	s := analysistest.DefaultSynth()
	for _, legacy := range []bool{false, true} {
		p, truth := writeSynth(t, s, "full.bin", legacy)
		st, _ := os.Stat(p)
		cut := truncate(t, p, int(st.Size()*2/3)+1)
		tr := load(t, cut)
		if !tr.Files[0].Truncated || len(tr.Warnings) == 0 || !strings.Contains(tr.Warnings[0], "truncated") {
			t.Errorf("legacy %v: truncation not reported: %+v %v", legacy, tr.Files[0], tr.Warnings)
		}
		n := len(tr.Samples)
		if n == 0 || n >= truth.OnCPU+truth.OffCPU {
			t.Errorf("legacy %v: %d samples kept of %d", legacy, n, truth.OnCPU+truth.OffCPU)
		}
	}
}

func TestCorruptNamesOffset(t *testing.T) {
	s := analysistest.DefaultSynth()
	p, _ := writeSynth(t, s, "full.bin", false)
	b, _ := os.ReadFile(p)
	// An unknown frame tag in the middle: find a frame boundary by
	// decoding, then overwrite a tag.
	rd := wire.NewReader(bytes.NewReader(b))
	var ev wire.Event
	for range 100 {
		if err := rd.ReadEvent(&ev); err != nil {
			t.Fatal(err)
		}
	}
	off := rd.Stats().Bytes
	b[off] = 0x7f
	bad := filepath.Join(t.TempDir(), "bad.bin")
	os.WriteFile(bad, b, 0o644)
	_, err := analysis.Load([]string{bad}, analysis.Options{})
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "offset "+itoa(off)) {
		t.Fatalf("error %v, want file and offset %d", err, off)
	}
	// Not a trace at all.
	junk := filepath.Join(t.TempDir(), "junk.bin")
	os.WriteFile(junk, []byte("hello world"), 0o644)
	if _, err := analysis.Load([]string{junk}, analysis.Options{}); err == nil || !strings.Contains(err.Error(), "offset 0") {
		t.Fatalf("junk: %v", err)
	}
}

func itoa(n int64) string {
	var b []byte
	if n == 0 {
		return "0"
	}
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// TestSegments splits a synthetic trace over rotated segments, some gzipped,
// the last one .active and cut short, in a directory with unrelated files.
func TestSegments(t *testing.T) {
	s := analysistest.DefaultSynth()
	var buf bytes.Buffer
	truth, err := s.WriteTRC(&buf)
	if err != nil {
		t.Fatal(err)
	}
	whole := buf.Bytes()
	// Split at stream granularity: re-encode every event into segments.
	evs, err := wire.ReadAll(bytes.NewReader(whole))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	nseg := 4
	per := (len(evs) + nseg - 1) / nseg
	for i := range nseg {
		var seg bytes.Buffer
		w := wire.NewWriter(&seg)
		for _, ev := range evs[i*per : min((i+1)*per, len(evs))] {
			if err := w.Write(ev.Schema, ev.Timestamp, ev.Values...); err != nil {
				t.Fatal(err)
			}
		}
		// Symbols and spans are in the first segment only in the original;
		// a segment must be readable alone, so repeat them.
		if i > 0 {
			for _, ev := range evs[:13] {
				if ev.Name() == wire.NameSymbolTableEntry || ev.Name() == wire.NameSpan {
					w.Write(ev.Schema, ev.Timestamp, ev.Values...)
				}
			}
		}
		w.Flush()
		name := filepath.Join(dir, "trace."+itoa(int64(i))+".bin")
		data := seg.Bytes()
		switch i {
		case 1:
			var z bytes.Buffer
			zw := gzip.NewWriter(&z)
			zw.Write(data)
			zw.Close()
			name += ".gz"
			data = z.Bytes()
		case nseg - 1:
			name += ".active"
		}
		if err := os.WriteFile(name, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "README"), []byte("not a segment"), 0o644)
	files, err := analysis.Expand([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"trace.0.bin", "trace.1.bin.gz", "trace.2.bin", "trace.3.bin.active"}
	if len(files) != len(want) {
		t.Fatalf("files %v", files)
	}
	for i := range want {
		if filepath.Base(files[i]) != want[i] {
			t.Fatalf("files %v, want %v", files, want)
		}
	}
	for _, par := range []int{1, 2, 4} {
		tr, err := analysis.Load([]string{dir}, analysis.Options{Parallel: par})
		if err != nil {
			t.Fatal(err)
		}
		// Spans repeated per segment count more than once, but samples and
		// polls (which cross segment boundaries) do not.
		checkSynth(t, tr, truth, s, false)
	}
}

// A keep manifest stands for the segment files it lists, in its parent
// directory; one not complete, or naming a path, is refused.
func TestExpandManifest(t *testing.T) {
	dir := t.TempDir()
	mdir := filepath.Join(dir, "trace.kept")
	if err := os.Mkdir(mdir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"trace.3.bin.gz", "trace.4.bin.gz"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, body string) string {
		p := filepath.Join(mdir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	files, err := analysis.Expand([]string{write("slow-a.json", `{"dump_id":"slow-a","complete":true,"files":["trace.3.bin.gz","trace.4.bin.gz"]}`)})
	if err != nil || len(files) != 2 || files[0] != filepath.Join(dir, "trace.3.bin.gz") || files[1] != filepath.Join(dir, "trace.4.bin.gz") {
		t.Errorf("Expand(manifest) = %v, %v", files, err)
	}
	for body, want := range map[string]string{
		`{"dump_id":"slow-b","complete":false,"files":["trace.3.bin.gz"]}`: "is not complete yet",
		`{"dump_id":"slow-c","complete":true,"files":["../x.bin"]}`:        "want a name in the manifest's parent directory",
		`{"complete":true}`: "not a keep manifest",
	} {
		if _, err := analysis.Expand([]string{write("m.json", body)}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Expand(%s): %v, want %q", body, err, want)
		}
	}
}

func TestProgress(t *testing.T) {
	s := analysistest.DefaultSynth()
	p, _ := writeSynth(t, s, "synth.bin", false)
	st, _ := os.Stat(p)
	var last, total int64
	_, err := analysis.Load([]string{p}, analysis.Options{Progress: func(d, tot int64) { last, total = d, tot }})
	if err != nil {
		t.Fatal(err)
	}
	if total != st.Size() || last != st.Size() {
		t.Errorf("progress %d/%d, want %d", last, total, st.Size())
	}
}

func TestScanLegacy(t *testing.T) {
	s := analysistest.DefaultSynth()
	p, truth := writeSynth(t, s, "legacy.bin", true)
	n := 0
	info, err := analysis.Scan(p, func(ev *wire.Event) error {
		if l := wire.LayoutOf(ev.Schema); l.Kind == wire.KindCpuSample {
			n++
			var e wire.CpuSampleEvent
			if l.CpuSample(ev, &e, new(wire.CpuSampleExt)); len(e.Callchain) == 0 {
				t.Fatal("no frames")
			}
		}
		return nil
	})
	if err != nil || info.Format != analysis.FormatTokioTRC {
		t.Fatal(err, info)
	}
	if n != truth.OnCPU+truth.OffCPU {
		t.Errorf("samples %d", n)
	}
	syms, err := analysis.Symbols(p)
	if err != nil || len(syms) == 0 {
		t.Fatal(err, syms)
	}
	_ = io.EOF
}

// A bucket downloaded with its keys: the segments below the directory,
// named EPOCH-N.bin.gz in their partitions, are read by time then index,
// wherever they are; other files are not.
func TestExpandBucketTree(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{
		"fleet/version=1/date=2026-08-14/service=api/time=1937/instance=a/boot=abcd-1/1786736221-10.bin.gz",
		"fleet/version=1/date=2026-08-14/service=api/time=1937/instance=a/boot=abcd-1/1786736221-9.bin.gz",
		"fleet/version=1/date=2026-08-14/service=api/time=1936/instance=b/boot=efgh-2/1786736170-3.bin.gz",
		"fleet/dumps/slow-x.json",
		"fleet/version=1/notes.txt",
	} {
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, err := analysis.Expand([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range files {
		got = append(got, filepath.Base(f))
	}
	if want := []string{"1786736170-3.bin.gz", "1786736221-9.bin.gz", "1786736221-10.bin.gz"}; !slices.Equal(got, want) {
		t.Errorf("Expand(bucket tree) = %v, want %v", got, want)
	}
}
