package s3upload

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/perfprof/perfprof/internal/counter"
	"github.com/perfprof/perfprof/internal/s3test"
	"github.com/perfprof/perfprof/internal/segment"
	"github.com/perfprof/perfprof/internal/wire"
)

const bucket = "perfprof-segments"

// start0 is the first segment's start: 2026-08-14 19:37:00 UTC.
var start0 = time.Unix(1786736220, 0)

// writeSegments seals n gzipped segments in dir with a real rotator, one a
// minute from start0 plus after; numbering continues after those in dir.
func writeSegments(t *testing.T, dir string, n int, after time.Duration) {
	t.Helper()
	now := start0.Add(after)
	rot, err := segment.New(segment.Options{
		Dir: dir, Prefix: "trace", Compress: true,
		Metadata: map[string]string{"service": "payments/api", "host": "us-east-1/i-0abc123", "boot_id": "boot%=1"},
		Now:      func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		err := rot.WriteSegmentBatch(func(w *wire.Writer, _ bool) error {
			for j := range 1000 {
				if err := w.WritePollEnd(wire.PollEndEvent{Timestamp: uint64(1e9 + j), WorkerID: uint64(i)}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := rot.Rotate(); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Minute)
	}
	if err := rot.Close(); err != nil {
		t.Fatal(err)
	}
}

func newUploader(t *testing.T, srv *s3test.Server, dir string, set *counter.Set) *Uploader {
	t.Helper()
	u, err := New(Options{
		Client: srv.Client(), Bucket: bucket, Prefix: "company/date=archive/%25",
		Dir: dir, FilePrefix: "trace", GzipOnly: true, Counts: set,
		ScanInterval: 20 * time.Millisecond, MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		PutTimeout: 5 * time.Second,
		OnError:    func(err error) { t.Logf("upload error: %v", err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// objects returns every object of the bucket, key to bytes.
func objects(t *testing.T, srv *s3test.Server) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	c := srv.Client()
	out := map[string][]byte{}
	p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Contents {
			g, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: o.Key})
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(g.Body)
			g.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			out[*o.Key] = b
		}
	}
	return out
}

// wantKey is the key of segment n written by writeSegments.
func wantKey(n int, after time.Duration) string {
	start := start0.Add(after + time.Duration(n)*time.Minute)
	return fmt.Sprintf("company/date=archive/%%25/version=1/date=%s/service=payments%%2Fapi/time=%s/instance=us-east-1%%2Fi-0abc123/boot=boot%%25%%3D1/%d-%d.bin.gz",
		start.UTC().Format("2006-01-02"), start.UTC().Format("1504"), start.Unix(), n)
}

// checkBucket: the bucket holds exactly the segments of dir (or those
// deleted after upload, given as want), byte-identical, under their keys.
func checkBucket(t *testing.T, srv *s3test.Server, want map[string][]byte) {
	t.Helper()
	got := objects(t, srv)
	var gk, wk []string
	for k := range got {
		gk = append(gk, k)
	}
	for k := range want {
		wk = append(wk, k)
	}
	sort.Strings(gk)
	sort.Strings(wk)
	if strings.Join(gk, "\n") != strings.Join(wk, "\n") {
		t.Fatalf("bucket keys\n%s\nwant\n%s", strings.Join(gk, "\n"), strings.Join(wk, "\n"))
	}
	for k, b := range want {
		if !bytes.Equal(got[k], b) {
			t.Errorf("%s: %d bytes in the bucket, %d on disk, or different", k, len(got[k]), len(b))
		}
	}
}

// local returns the sealed segments of dir by their expected keys.
func local(t *testing.T, dir string, n int, after time.Duration) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for i := range n {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("trace.%d.bin.gz", i)))
		if err != nil {
			t.Fatal(err)
		}
		out[wantKey(i, after)] = b
	}
	return out
}

func closeUploader(t *testing.T, u *Uploader) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := u.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestUpload: sealed segments end up byte-identical in the bucket under
// dial9's layout v1 keys, each once; nothing is pending after.
func TestUpload(t *testing.T) {
	srv := s3test.Start(t, bucket)
	dir := t.TempDir()
	writeSegments(t, dir, 3, 0)
	set := counter.NewSet()
	u := newUploader(t, srv, dir, set)
	waitFor(t, "3 uploads", func() bool { return set.Load(CUploaded) == 3 })
	closeUploader(t, u)
	checkBucket(t, srv, local(t, dir, 3, 0))
	var size int64
	for _, b := range local(t, dir, 3, 0) {
		size += int64(len(b))
	}
	if got := set.Load(CUploadedBytes); got != size {
		t.Errorf("uploaded bytes %d, want %d", got, size)
	}
	if p, f, a := set.Load(CPending), set.Load(CFailed), set.Load(CAlreadyThere); p != 0 || f != 0 || a != 0 {
		t.Errorf("pending %d failed %d already_present %d, want 0", p, f, a)
	}
}

// TestServerDown: with the server stopped, segments stay pending on disk
// and puts fail with backoff; once it is back, each is uploaded once.
func TestServerDown(t *testing.T) {
	srv := s3test.Start(t, bucket)
	srv.Stop(t)
	dir := t.TempDir()
	writeSegments(t, dir, 4, 0)
	set := counter.NewSet()
	u := newUploader(t, srv, dir, set)
	waitFor(t, "failed puts", func() bool { return set.Load(CFailed) >= 3 })
	if n, p := set.Load(CUploaded), set.Load(CPending); n != 0 || p != 4 {
		t.Fatalf("server down: uploaded %d pending %d, want 0 and 4", n, p)
	}
	srv.Restart(t)
	waitFor(t, "4 uploads", func() bool { return set.Load(CUploaded) == 4 })
	closeUploader(t, u)
	checkBucket(t, srv, local(t, dir, 4, 0))
	if p := set.Load(CPending); p != 0 {
		t.Errorf("pending %d after upload", p)
	}
}

// TestRestart: an uploader started again finds the segments its
// predecessor left: those uploaded are not put again, the one put but not
// recorded (a crash between the put and its done record) is found in the
// bucket, the rest are uploaded; each segment is one object. With
// delete_after_upload the directory is emptied.
func TestRestart(t *testing.T) {
	srv := s3test.Start(t, bucket)
	dir := t.TempDir()
	writeSegments(t, dir, 2, 0)
	set1 := counter.NewSet()
	u1 := newUploader(t, srv, dir, set1)
	waitFor(t, "2 uploads", func() bool { return set1.Load(CUploaded) == 2 })
	closeUploader(t, u1)

	// More segments, by a later process (numbering continues).
	writeSegments(t, dir, 3, 10*time.Minute)
	want := local(t, dir, 2, 0)
	for i := 2; i < 5; i++ {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("trace.%d.bin.gz", i)))
		if err != nil {
			t.Fatal(err)
		}
		want[wantKey(i, 10*time.Minute-2*time.Minute)] = b
	}
	// The crash: segment 2 put, with its intent recorded, but no done record.
	st, err := openState(dir, "trace", 0o600)
	if err != nil {
		t.Fatal(err)
	}
	k2 := wantKey(2, 8*time.Minute)
	info, err := os.Stat(filepath.Join(dir, "trace.2.bin.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.intend(segID{"trace.2.bin.gz", info.Size()}, k2); err != nil {
		t.Fatal(err)
	}
	st.close()
	if _, err := srv.Client().PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(k2), Body: bytes.NewReader(want[k2]),
	}); err != nil {
		t.Fatal(err)
	}

	set2 := counter.NewSet()
	u2, err := New(Options{
		Client: srv.Client(), Bucket: bucket, Prefix: "company/date=archive/%25",
		Dir: dir, FilePrefix: "trace", GzipOnly: true, Counts: set2, DeleteAfterUpload: true,
		ScanInterval: 20 * time.Millisecond, MinBackoff: 50 * time.Millisecond,
		OnError: func(err error) { t.Logf("upload error: %v", err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the rest", func() bool { return set2.Load(CUploaded)+set2.Load(CAlreadyThere) == 3 })
	closeUploader(t, u2)
	if n, a := set2.Load(CUploaded), set2.Load(CAlreadyThere); n != 2 || a != 1 {
		t.Errorf("after restart: uploaded %d already_present %d, want 2 and 1", n, a)
	}
	checkBucket(t, srv, want)
	left, _ := filepath.Glob(filepath.Join(dir, "trace.[234].bin.gz"))
	if len(left) != 0 {
		t.Errorf("delete_after_upload left %v", left)
	}
	if _, err := os.Stat(filepath.Join(dir, "trace.0.bin.gz")); err != nil {
		t.Errorf("segment uploaded before delete_after_upload was on: %v", err)
	}
}

// TestCompressing: a .bin.gz next to its .bin is being written by the
// rotator's compression and is not uploaded until the .bin is gone.
func TestCompressing(t *testing.T) {
	srv := s3test.Start(t, bucket)
	dir := t.TempDir()
	writeSegments(t, dir, 1, 0)
	gz := filepath.Join(dir, "trace.0.bin.gz")
	whole, err := os.ReadFile(gz)
	if err != nil {
		t.Fatal(err)
	}
	// Half written, its .bin still there.
	if err := os.WriteFile(gz, whole[:len(whole)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "trace.0.bin"), []byte("raw"), 0o600); err != nil {
		t.Fatal(err)
	}
	set := counter.NewSet()
	u := newUploader(t, srv, dir, set)
	time.Sleep(200 * time.Millisecond) // ten scans
	if n := set.Load(CUploaded); n != 0 {
		t.Fatalf("uploaded %d segments being compressed", n)
	}
	if err := os.WriteFile(gz, whole, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "trace.0.bin")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the upload", func() bool { return set.Load(CUploaded) == 1 })
	closeUploader(t, u)
	checkBucket(t, srv, local(t, dir, 1, 0))
	if f := set.Load(CFailed); f != 0 {
		t.Errorf("failed %d", f)
	}
}
