package s3upload

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/perfprof/perfprof/exporter/tracefileexporter/internal/keep"
	"github.com/perfprof/perfprof/internal/counter"
	"github.com/perfprof/perfprof/internal/s3test"
)

// TestManifestUpload: a complete keep manifest goes to
// {prefix}/dumps/{dump_id}.json once its segments are in the bucket, with
// their keys, once; one not complete stays home. With delete_after_upload
// the held segments stay on disk, the others go, and so do the held ones
// once let go.
func TestManifestUpload(t *testing.T) {
	srv := s3test.Start(t, bucket)
	dir := t.TempDir()
	writeSegments(t, dir, 4, 0)
	mdir := keep.ManifestDir(dir, "trace")
	if err := os.MkdirAll(mdir, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(id string, complete bool, files ...string) {
		b, _ := json.Marshal(keep.Manifest{DumpID: id, Complete: complete, Files: files, Metadata: map[string]string{"trace_id": "ab"}})
		if err := os.WriteFile(filepath.Join(mdir, id+".json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("slow-a", true, "trace.1.bin.gz", "trace.2.bin.gz")
	write("slow-b", false)
	var heldMu sync.Mutex
	held := map[int]bool{1: true, 2: true}
	isHeld := func(n int) bool {
		heldMu.Lock()
		defer heldMu.Unlock()
		return held[n]
	}
	set := counter.NewSet()
	u, err := New(Options{
		Client: srv.Client(), Bucket: bucket, Prefix: "company/date=archive/%25",
		Dir: dir, FilePrefix: "trace", GzipOnly: true, Counts: set,
		ScanInterval: 20 * time.Millisecond, MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		PutTimeout: 5 * time.Second, DeleteAfterUpload: true, Held: isHeld, ManifestDir: mdir,
		OnError: func(err error) { t.Logf("upload error: %v", err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the manifest", func() bool { return set.Load(CManifests) == 1 })
	objs := objects(t, srv)
	key := "company/date=archive/%25/dumps/slow-a.json"
	var m keep.Manifest
	if err := json.Unmarshal(objs[key], &m); err != nil {
		t.Fatalf("%s: %v (bucket %d objects)", key, err, len(objs))
	}
	if want := []string{wantKey(1, 0), wantKey(2, 0)}; !slices.Equal(m.Segments, want) || m.DumpID != "slow-a" {
		t.Errorf("manifest in the bucket: %+v, want segments %v", m, want)
	}
	for _, k := range m.Segments {
		if objs[k] == nil {
			t.Errorf("%s not in the bucket", k)
		}
	}
	if objs["company/date=archive/%25/dumps/slow-b.json"] != nil {
		t.Error("a manifest not complete was uploaded")
	}
	for n, want := range []bool{false, true, true, false} {
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("trace.%d.bin.gz", n))); (err == nil) != want {
			t.Errorf("segment %d on disk: %v, want %v (held segments stay)", n, err == nil, want)
		}
	}
	// slow-b settles: read again once changed, and put.
	write("slow-b", true, "trace.2.bin.gz")
	waitFor(t, "the second manifest", func() bool { return set.Load(CManifests) == 2 })
	if b := objects(t, srv)["company/date=archive/%25/dumps/slow-b.json"]; b == nil {
		t.Error("slow-b not in the bucket once complete")
	}
	// Let go: deleted at the next scan. The manifests are not put again.
	heldMu.Lock()
	clear(held)
	heldMu.Unlock()
	waitFor(t, "the held segments deleted", func() bool {
		_, err := os.Stat(filepath.Join(dir, "trace.1.bin.gz"))
		return os.IsNotExist(err)
	})
	closeUploader(t, u)
	if n := set.Load(CManifests); n != 2 {
		t.Errorf("%d manifests put, want 2", n)
	}
}

// A bucket that does not exist and credentials the store refuses are told
// apart from an outage (the server down), which is not a configuration
// problem.
func TestConfigProblem(t *testing.T) {
	srv := s3test.Start(t, bucket)
	ctx := t.Context()
	head := func(c *s3.Client, b string) error {
		_, err := c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(b)})
		return err
	}
	put := func(c *s3.Client, b string) error {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(b), Key: aws.String("k"), Body: strings.NewReader("x")})
		return err
	}
	wrongKey := srv.Client(func(o *s3.Options) {
		o.Credentials = credentials.NewStaticCredentialsProvider(s3test.AccessKey, "not-the-secret", "")
	})
	for name, tc := range map[string]struct {
		err  error
		want string
	}{
		"head, no bucket":       {head(srv.Client(), "no-such-bucket"), "the bucket does not exist"},
		"put, no bucket":        {put(srv.Client(), "no-such-bucket"), "the bucket does not exist"},
		"head, wrong secret":    {head(wrongKey, bucket), "access to the bucket is denied"},
		"put, wrong secret":     {put(wrongKey, bucket), "the store refuses the credentials"},
		"head, the bucket here": {head(srv.Client(), bucket), ""},
	} {
		if got := ConfigProblem(tc.err); !strings.HasPrefix(got, tc.want) || (tc.want == "" && got != "") {
			t.Errorf("%s: ConfigProblem(%v) = %q, want %q", name, tc.err, got, tc.want)
		}
	}
	srv.Stop(t)
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err := srv.Client(func(o *s3.Options) { o.RetryMaxAttempts = 1 }).HeadBucket(cctx, &s3.HeadBucketInput{Bucket: aws.String(bucket)})
	if err == nil || ConfigProblem(err) != "" {
		t.Errorf("server down: %v is told as %q", err, ConfigProblem(err))
	}
}
