package e2e

// The spans here are OTLP spans only (spanSender of crash_test.go);
// TestCollectorKeepsSlowSpans uploads the receiver's profiles of a real
// process too.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"

	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/s3test"
)

const (
	s3Outage      = 20 * time.Second
	s3KillInto    = 8 * time.Second // the SIGKILL, this long into the outage
	s3BucketName  = "perfprof-e2e"
	s3Prefix      = "fleet"
	s3DrainWithin = 90 * time.Second
)

// s3KeyRE is dial9's layout v1 under s3Prefix; m[1] the boot, m[2] the
// segment's number.
var s3KeyRE = regexp.MustCompile(`^` + s3Prefix + `/version=1/date=\d{4}-\d\d-\d\d/service=[^/]+/time=\d{4}/instance=[^/]+/boot=([a-z]{4}-\d+)/\d+-(\d+)\.bin\.gz$`)

var sealedGz = regexp.MustCompile(`^trace\.(\d+)\.bin\.gz$`)

// TestCollectorS3Upload (issue 30): the built collector writes spans with
// the tracefile exporter (1 s rotation, gzip) and uploads sealed segments
// to versitygw on loopback; the server is stopped for 20 s mid-run and the
// collector is SIGKILLed once during the outage and started again on the
// same directory. At the end every sealed segment is in the bucket exactly
// once under the layout, byte-identical to the local copy, with the boot=
// of the segment's metadata, and `perfprof report` over the downloaded
// objects equals the report over the local directory.
func TestCollectorS3Upload(t *testing.T) {
	srv := s3test.Start(t, s3BucketName)
	dir := t.TempDir()
	otlpAddr := freeAddr(t)
	_, promPortS, _ := strings.Cut(freeAddr(t), ":")
	config := fmt.Sprintf(`
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
exporters:
  tracefile:
    directory: %s
    rotation_interval: 1s
    compress: true
    s3:
      bucket: %s
      prefix: %s
      region: %s
      endpoint: %s
      path_style: true
      put_timeout: 5s
      max_backoff: 2s
service:
  telemetry:
    metrics:
      level: basic
      readers:
        - pull:
            exporter:
              prometheus: {host: 127.0.0.1, port: %s, without_scope_info: true, without_units: true, without_type_suffix: true}
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [tracefile]
`, otlpAddr, dir, s3BucketName, s3Prefix, s3test.Region, srv.Endpoint, promPortS)
	env := []string{
		"AWS_ACCESS_KEY_ID=" + s3test.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + s3test.SecretKey,
		"AWS_REGION=" + s3test.Region,
		"AWS_EC2_METADATA_DISABLED=true",
	}
	start := func() (*exec.Cmd, *syncBuffer) {
		cmd, out := runCollector(t, config, nil, env...)
		waitFor(t, out, "Everything is ready", 30*time.Second)
		return cmd, out
	}

	ctx := context.Background()
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(otlpAddr), otlptracegrpc.WithInsecure(),
		otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{Enabled: false}), otlptracegrpc.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Shutdown(ctx)
	snd := &spanSender{exp: exp, acked: map[string]bool{}, failed: map[string]bool{}}
	stopSender := make(chan struct{})
	senderDone := make(chan struct{})

	cmd, _ := start()
	go func() { defer close(senderDone); snd.run(t, stopSender) }()
	time.Sleep(4 * time.Second)

	// The outage: segments go on being sealed and stay pending.
	srv.Stop(t)
	outageStart := time.Now()
	time.Sleep(s3KillInto)
	m := mustScrape(t, "http://127.0.0.1:"+promPortS+"/metrics")
	t.Logf("%v into the outage: %d pending, %d failed uploads", s3KillInto,
		m.sum("otelcol_exporter_tracefile_upload_pending"),
		m.sum("otelcol_exporter_tracefile_uploads", "outcome", "failed"))
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	cmd, _ = start() // same directory: recovers the active segment
	time.Sleep(time.Until(outageStart.Add(s3Outage)))
	srv.Restart(t)
	time.Sleep(4 * time.Second)

	close(stopSender)
	<-senderDone
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the collector did not stop cleanly: %v", err)
	}

	// Drain: a collector on the same directory with no traffic uploads
	// what is left; wait until every sealed segment is in the bucket.
	local := sealedSegments(t, dir)
	if len(local) < 10 {
		t.Fatalf("only %d sealed segments: rotation did not run as configured", len(local))
	}
	cmd, _ = start()
	c := srv.Client()
	deadline := time.Now().Add(s3DrainWithin)
	var objs map[string]string // key → segment number
	for {
		objs = listSegments(t, c)
		if len(objs) >= len(local) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d sealed segments in the bucket after %v", len(objs), len(local), s3DrainWithin)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	local = sealedSegments(t, dir)
	objs = listSegments(t, c)

	// Exactly once, byte-identical, boot= from the segment's metadata.
	byN := map[string][]string{}
	for key, n := range objs {
		byN[n] = append(byN[n], key)
	}
	down := t.TempDir()
	boots := map[string]bool{}
	for n, path := range local {
		keys := byN[n]
		if len(keys) != 1 {
			t.Errorf("trace.%s.bin.gz is in the bucket %d times: %v", n, len(keys), keys)
			continue
		}
		got := getObject(t, c, keys[0])
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from trace.%s.bin.gz (%d bytes, %d local)", keys[0], n, len(got), len(want))
		}
		boot := s3KeyRE.FindStringSubmatch(keys[0])[1]
		boots[boot] = true
		if md := segmentMeta(t, path); md[convention.MetaBootID] != boot {
			t.Errorf("%s: boot=%s, the segment's metadata says boot_id %q", keys[0], boot, md[convention.MetaBootID])
		}
		// Downloaded under its key, as `aws s3 sync` does: perfprof
		// reads the partitions' tree.
		p := filepath.Join(down, filepath.FromSlash(keys[0]))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for n, keys := range byN {
		if _, ok := local[n]; !ok {
			t.Errorf("%v in the bucket: no sealed segment %s on disk", keys, n)
		}
	}
	if len(boots) < 2 {
		t.Errorf("segments of %d collector runs in the bucket (boot= %v), want at least 2", len(boots), boots)
	}
	t.Logf("%d segments, each once in the bucket; boots %v; %d spans acknowledged", len(local), boots, snd.ackedCount())

	// perfprof report over the bucket's objects equals the one over the
	// local directory.
	cli := filepath.Join(root, "_build", "perfprof")
	report := func(d string) string {
		out, err := exec.Command(cli, "report", d).CombinedOutput()
		if err != nil {
			t.Fatalf("perfprof report %s: %v\n%s", d, err, out)
		}
		return strings.ReplaceAll(string(out), d, "DIR")
	}
	// The local directory may hold the drain run's own (empty) segments
	// too; compare over the sealed ones only.
	localOnly := t.TempDir()
	for n, path := range local {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(localOnly, "trace."+n+".bin.gz"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := report(localOnly), report(down); a != b {
		t.Errorf("perfprof report differs over the bucket's objects:\n--- local\n%s\n--- bucket\n%s", a, b)
	}
}

// sealedSegments returns the sealed gzip segments of dir by number.
func sealedSegments(t *testing.T, dir string) map[string]string {
	out := map[string]string{}
	for _, name := range listDir(t, dir) {
		if m := sealedGz.FindStringSubmatch(name); m != nil {
			out[m[1]] = filepath.Join(dir, name)
		}
	}
	return out
}

// listSegments lists the bucket: key → segment number. A key off the
// layout fails the test.
func listSegments(t *testing.T, c *s3.Client) map[string]string {
	out := map[string]string{}
	p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: aws.String(s3BucketName)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatalf("listing the bucket: %v", err)
		}
		for _, o := range page.Contents {
			m := s3KeyRE.FindStringSubmatch(*o.Key)
			if m == nil {
				t.Fatalf("key %s is not under the layout", *o.Key)
			}
			out[*o.Key] = m[2]
		}
	}
	return out
}

func getObject(t *testing.T, c *s3.Client, key string) []byte {
	return getObjectFrom(t, c, s3BucketName, key)
}

func getObjectFrom(t *testing.T, c *s3.Client, bucket, key string) []byte {
	g, err := c.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer g.Body.Close()
	b, err := io.ReadAll(g.Body)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return b
}

// segmentMeta is the last SegmentMetadataEvent of a segment.
func segmentMeta(t *testing.T, path string) map[string]string {
	evs, err := readTrace(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string]string{}
	for _, ev := range evs {
		if ev.Name() == "SegmentMetadataEvent" {
			for _, p := range ev.Field("entries").Map {
				out[p.Key] = p.Value
			}
		}
	}
	return out
}
