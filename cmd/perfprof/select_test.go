package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/perfprof/perfprof/internal/analysis/analysistest"
)

// requestsFile writes a trace of request spans with a known slow tail,
// 400 requests of analysistest.DefaultRequests changed by opts.
func requestsFile(t *testing.T, opts ...func(*analysistest.Requests)) (string, analysistest.Requests, analysistest.RequestsTruth) {
	t.Helper()
	q := analysistest.DefaultRequests()
	q.Requests = 400
	for _, o := range opts {
		o(&q)
	}
	path := filepath.Join(t.TempDir(), "requests.bin")
	truth, err := q.WriteFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, q, truth
}

// TestSelectFoldedPprof checks that folded and pprof with selectors hold
// the selection's samples and nothing else.
func TestSelectFoldedPprof(t *testing.T) {
	path, q, truth := requestsFile(t)
	var req, slowReq analysistest.SpanTruth
	var slow, uploads int
	for _, s := range truth.Spans {
		if s.Name == analysistest.ItemsSpan && req.SpanID == "" {
			req = s
		}
		if s.Slow {
			slow++
			if slowReq.SpanID == "" {
				slowReq = s
			}
		}
		if s.Name == analysistest.UploadSpan {
			uploads += s.OnCPU
		}
	}

	sum, _ := foldedSum(t, mustRun(t, "folded", "--span-id", slowReq.SpanID, path))
	if sum != uint64(slowReq.OnCPU) {
		t.Errorf("folded --span-id %s: %d samples, want %d", slowReq.SpanID, sum, slowReq.OnCPU)
	}
	sum, stacks := foldedSum(t, mustRun(t, "folded", "--source", "offcpu", "--by", "span", "--trace-id", req.TraceID, path))
	wantStack := "span " + analysistest.QuerySpan + ";" + analysistest.MainFunc + ";" + analysistest.WorkerFunc + ";app.serve;" +
		analysistest.QueryFunc + ";" + analysistest.KernelFunc
	if sum != req.BlockedNs || stacks[wantStack] != req.BlockedNs {
		t.Errorf("folded offcpu --trace-id %s: %v, want %d ns in %q", req.TraceID, stacks, req.BlockedNs, wantStack)
	}
	sum, stacks = foldedSum(t, mustRun(t, "folded", "--span", analysistest.UploadSpan, "--slowest", strconv.Itoa(slow), path))
	var compress uint64
	for k, v := range stacks {
		if strings.HasSuffix(k, ";"+analysistest.CompressFunc) {
			compress += v
		}
	}
	if sum != uint64(slow*(q.Typical+q.SlowExtra)) || compress != uint64(slow*q.SlowExtra) {
		t.Errorf("folded slowest uploads: %d samples, %d in %s; want %d, %d", sum, compress, analysistest.CompressFunc,
			slow*(q.Typical+q.SlowExtra), slow*q.SlowExtra)
	}

	out := filepath.Join(t.TempDir(), "req.pb.gz")
	mustRun(t, "pprof", "--trace-id", req.TraceID, "-o", out, path)
	p := readProfile(t, out)
	var on, off, offNs int64
	for _, s := range p.Sample {
		on += s.Value[vSamples]
		off += s.Value[vOffSamples]
		offNs += s.Value[vOffNs]
		if tr := s.Label["trace_id"]; !slices.Equal(tr, []string{req.TraceID}) {
			t.Errorf("pprof --trace-id %s: a sample of trace %v", req.TraceID, tr)
		}
	}
	if on != int64(req.OnCPU) || off != int64(req.OffCPU) || offNs != int64(req.BlockedNs) {
		t.Errorf("pprof --trace-id: on %d off %d (%d ns), want %d %d (%d ns)", on, off, offNs, req.OnCPU, req.OffCPU, req.BlockedNs)
	}
	if !slices.ContainsFunc(p.Comments, func(c string) bool { return strings.Contains(c, "selection --trace-id "+req.TraceID) }) {
		t.Errorf("pprof comments %q do not name the selection", p.Comments)
	}
	out = filepath.Join(t.TempDir(), "uploads.pb.gz")
	mustRun(t, "pprof", "-o", out, "--span", analysistest.UploadSpan, path)
	if got := pprofTotal(t, pprofTop(t, out)); got != uploads {
		t.Errorf("pprof --span %q: go tool pprof counts %d samples, want %d", analysistest.UploadSpan, got, uploads)
	}
}

// TestSelectErrors checks that selectors that are malformed or match
// nothing fail clearly, in every command that takes them.
func TestSelectErrors(t *testing.T) {
	path, _, truth := requestsFile(t)
	items := truth.Spans[1]
	if items.Name != analysistest.ItemsSpan {
		t.Fatalf("second span %q, want %q", items.Name, analysistest.ItemsSpan)
	}
	legacy, _ := synthFile(t, "legacy.bin", true)
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--trace-id", "a000", path}, 2, `--trace-id "a000": want 32 hex digits`},
		{[]string{"--span-id", strings.Repeat("g", 16), path}, 2, `want 16 hex digits`},
		{[]string{"--slowest", "-1", path}, 2, `--slowest -1: want a positive number`},
		{[]string{"--span", "PUT /nothing", path}, 1,
			`no span matches --span "PUT /nothing" (the trace has 800 spans named "POST /upload", "GET /items", "db.query")`},
		{[]string{"--span-id", "ffffffffffffffff", path}, 1, `no span matches --span-id ffffffffffffffff`},
		// Every selector given must match: this items request is no upload.
		{[]string{"--span", analysistest.UploadSpan, "--trace-id", items.TraceID, path}, 1, `no span matches --span "POST /upload" --trace-id`},
		{[]string{"--span", analysistest.UploadSpan, legacy}, 1, `the trace has no SpanEvent`},
	}
	for _, cmd := range []string{"folded", "pprof"} {
		for _, c := range cases {
			args := append([]string{cmd}, c.args...)
			var out string
			if cmd == "pprof" {
				out = filepath.Join(t.TempDir(), "out.pb.gz")
				args = append(args, "-o", out)
			}
			stdout, stderr, code := perfprof(t, args...)
			if code != c.code || !strings.Contains(stderr, c.msg) || !strings.HasPrefix(stderr, "perfprof "+cmd+": ") {
				t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", args, code, stderr, c.code, c.msg)
			}
			if c.code == 2 && !strings.Contains(stderr, "Usage: perfprof "+cmd) {
				t.Errorf("%v: usage error without the usage", args)
			}
			if stdout != "" {
				t.Errorf("%v: output on error: %q", args, stdout)
			}
			if out != "" {
				if _, err := os.Stat(out); err == nil {
					t.Errorf("%v: wrote %s on error", args, out)
				}
			}
		}
	}
}
