package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/perfprof/perfprof/internal/htmlview/htmlviewtest"
	"github.com/perfprof/perfprof/internal/s3test"
	"github.com/perfprof/perfprof/internal/testchild"
)

// Bounds of TestCollectorKeepsSlowSpans.
const (
	keepRun       = 30 * time.Second
	keepSlowEvery = 3000                   // spans of a worker between two slow ones
	keepSlowBurn  = 150 * time.Millisecond // CPU a slow span burns
	keepFrequency = 999
	keepBucket    = "perfprof-keep"
)

// keepConfig: the receiver samples spangen and takes its spans; the
// tracefile exporter keeps 256 KiB of segments at most (a few seconds of
// this load), keeps the slow spans past it, and uploads to versitygw;
// tracefile/all keeps everything, to compare with.
const keepConfig = `receivers:
  perfprof:
    targets: {executables: [%[1]s]}
    frequency: %[2]d
    report_interval: 1s
    protocols:
      grpc: {endpoint: %[3]s}
    correlation: {window: 3s}
exporters:
  tracefile:
    directory: %[4]s
    rotation_interval: 1s
    max_file_size: 64KiB
    max_total_size: 256KiB
    keep:
      rules:
        - {span_name: request, min_duration: 50ms, percentile: 99}
      lookback: 200ms
      settle: 8s
      for: 1h
    s3:
      bucket: %[5]s
      prefix: fleet
      region: %[6]s
      endpoint: %[7]s
      path_style: true
      put_timeout: 5s
      max_backoff: 2s
  tracefile/all:
    directory: %[9]s
    rotation_interval: 0s
    max_total_size: 0
service:
  telemetry:
    metrics:
      level: basic
      readers:
        - pull:
            exporter:
              prometheus: {host: 127.0.0.1, port: %[8]s, without_scope_info: true, without_units: true, without_type_suffix: true}
  pipelines:
    traces: {receivers: [perfprof], exporters: [tracefile, tracefile/all]}
    profiles: {receivers: [perfprof], exporters: [tracefile, tracefile/all]}
`

// TestCollectorKeepsSlowSpans (issue 30, item 3): spangen ends 1 000
// spans a second on two threads, a few of them slow (150 ms of CPU where
// the others burn 100 µs, all named "request"), while the receiver samples
// it at 999 Hz; the exporter keeps 256 KiB of segments, far less than the
// run writes, under a keep rule of the name's running p99 and 50 ms. At
// the end every slow span, and no fast one, has a complete manifest whose
// files are on disk although retention deleted most of the run;
// `perfprof report --trace-id` over the manifest prints exactly what it
// prints over a second exporter's unbounded copy of the run, on-CPU
// samples included; and the manifest is in the bucket with the keys of
// its segments.
func TestCollectorKeepsSlowSpans(t *testing.T) {
	requirePerf(t)
	srv := s3test.Start(t, keepBucket)
	gen := testchild.Build(t, "spangen")
	dir, allDir := t.TempDir(), t.TempDir()
	spansAddr := freeAddr(t)
	_, promPort, _ := net.SplitHostPort(freeAddr(t))
	config := fmt.Sprintf(keepConfig, filepath.Base(gen), keepFrequency, spansAddr, dir,
		keepBucket, s3test.Region, srv.Endpoint, promPort, allDir)
	col, out := runCollector(t, config, nil,
		"AWS_ACCESS_KEY_ID="+s3test.AccessKey, "AWS_SECRET_ACCESS_KEY="+s3test.SecretKey,
		"AWS_REGION="+s3test.Region, "AWS_EC2_METADATA_DISABLED=true")
	waitFor(t, out, "Everything is ready", 30*time.Second)

	cmd, stdout, genErr := startSpangen(t, gen, "-threads", "2", "-rate", "1000", "-burn", "100us",
		"-slow-every", strconv.Itoa(keepSlowEvery), "-slow-burn", keepSlowBurn.String(),
		"-duration", keepRun.String(), "-endpoint", spansAddr)
	type slowSpan struct{ trace, span string }
	var mu sync.Mutex
	var slow []slowSpan
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "slow" {
				mu.Lock()
				slow = append(slow, slowSpan{f[1], f[2]})
				mu.Unlock()
			}
		}
	}()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("spangen: %v\n%s", err, genErr.String())
	}
	<-done
	// The last slow span's keep settles (8 s) and its segments are
	// sealed and uploaded.
	time.Sleep(12 * time.Second)
	m := mustScrape(t, "http://127.0.0.1:"+promPort+"/metrics")
	if err := col.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := col.Wait(); err != nil {
		t.Errorf("the collector did not stop cleanly: %v", err)
	}

	deleted := m.sum("otelcol_exporter_tracefile_segments", "outcome", "deleted")
	sealed := m.sum("otelcol_exporter_tracefile_segments", "outcome", "sealed")
	kept := m.sum("otelcol_exporter_tracefile_keeps", "outcome", "kept")
	t.Logf("%d slow spans; %d segments sealed, %d deleted by retention; keeps %d, %d MiB kept in %d segments, %d manifests uploaded",
		len(slow), sealed, deleted, kept, m.sum("otelcol_exporter_tracefile_kept_bytes")>>20,
		m.sum("otelcol_exporter_tracefile_kept_segments"), m.sum("otelcol_exporter_tracefile_uploaded_manifests"))
	if len(slow) < 4 {
		t.Fatalf("spangen ended %d slow spans, want a few", len(slow))
	}
	heldSegs := m.sum("otelcol_exporter_tracefile_kept_segments")
	if deleted == 0 || deleted < (sealed-heldSegs)/2 {
		t.Errorf("retention deleted %d of %d segments (%d held): the bound did not rotate the run away", deleted, sealed, heldSegs)
	}
	if kept != int64(len(slow)) {
		t.Errorf("keeps{outcome=kept} = %d, want the %d slow spans and no fast one", kept, len(slow))
	}

	mdir := filepath.Join(dir, "trace.kept")
	ents, err := os.ReadDir(mdir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != len(slow) {
		t.Errorf("%d manifests for %d slow spans", len(ents), len(slow))
	}
	cli := filepath.Join(root, "_build", "perfprof")
	c := srv.Client()
	wantCPU := keepSlowBurn.Seconds() * keepFrequency
	for _, s := range slow {
		id := "slow-" + s.trace + "-" + s.span
		path := filepath.Join(mdir, id+".json")
		var man struct {
			Files    []string          `json:"files"`
			Complete bool              `json:"complete"`
			Metadata map[string]string `json:"metadata"`
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("slow span %s/%s: no manifest: %v", s.trace, s.span, err)
			continue
		}
		if err := json.Unmarshal(b, &man); err != nil || !man.Complete || len(man.Files) == 0 {
			t.Errorf("%s: complete %v, files %v (%v)", id, man.Complete, man.Files, err)
			continue
		}
		for _, f := range man.Files {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				t.Errorf("%s names %s: %v", id, f, err)
			}
		}
		rep, err := exec.Command(cli, "report", "--trace-id", s.trace, path).CombinedOutput()
		if err != nil {
			t.Errorf("perfprof report --trace-id %s %s: %v\n%s", s.trace, path, err, rep)
			continue
		}
		// The same report over the unbounded copy: the kept files hold
		// every sample and span event of the span.
		all, err := exec.Command(cli, "report", "--trace-id", s.trace, allDir).CombinedOutput()
		if err != nil {
			t.Errorf("perfprof report --trace-id %s over the whole run: %v\n%s", s.trace, err, all)
			continue
		}
		if a, b := spanReport(string(all)), spanReport(string(rep)); a != b {
			t.Errorf("%s: report --trace-id over the kept files differs from the whole run's:\n--- whole run\n%s\n--- kept files\n%s", id, a, b)
		}
		br := htmlviewtest.ReportBreakdown(t, string(rep))
		var n, on, off int
		if _, err := fmt.Sscanf(br.Samples, "%d (on-CPU %d, off-CPU %d)", &n, &on, &off); err != nil {
			t.Fatalf("report samples %q: %v", br.Samples, err)
		}
		wall, _ := strconv.ParseFloat(strings.Fields(br.Shown[0])[1], 64)
		t.Logf("%s: %d files, wall %.1f ms, %d on-CPU samples (%.0f%% of its CPU), duration_ns %s",
			id, len(man.Files), wall, on, 100*float64(on)/wantCPU, man.Metadata["duration_ns"])
		if wall < keepSlowBurn.Seconds()*1000 || on == 0 {
			t.Errorf("%s: report over the kept files: wall %.1f ms, %d on-CPU samples; want ≥ %v and some",
				id, wall, on, keepSlowBurn)
		}

		// The manifest in the bucket, with the keys of its segments.
		obj := getObjectFrom(t, c, keepBucket, "fleet/dumps/"+id+".json")
		var up struct {
			DumpID   string   `json:"dump_id"`
			Segments []string `json:"segments"`
		}
		if err := json.Unmarshal(obj, &up); err != nil || up.DumpID != id || len(up.Segments) != len(man.Files) {
			t.Errorf("%s in the bucket: %s (%v)", id, obj, err)
			continue
		}
		for _, k := range up.Segments {
			if _, err := c.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String(keepBucket), Key: aws.String(k)}); err != nil {
				t.Errorf("%s names %s, not in the bucket: %v", id, k, err)
			}
		}
	}
}

// spanReport is what `perfprof report --trace-id` says of the selected
// span: its breakdown and samples, and its on-CPU functions. The rest
// (the header, what the files hold in all) differs between inputs.
func spanReport(out string) string {
	section := func(from, to string) string {
		i := strings.Index(out, from)
		if i < 0 {
			return ""
		}
		rest := out[i:]
		if j := strings.Index(rest[len(from):], to); j >= 0 {
			rest = rest[:len(from)+j]
		}
		return rest
	}
	return section("Breakdown: ", "\n==") + section("== On-CPU functions (selected spans) ==", "\n==")
}
