package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// countingClient counts the HTTP requests the SDK sends (one per attempt).
type countingClient struct {
	n  atomic.Int64
	hc *http.Client
}

func (c *countingClient) Do(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.hc.Do(r)
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func getObject(t *testing.T, ctx context.Context, c *s3.Client, bucket, key string) []byte {
	t.Helper()
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("GetObject %s: %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func listKeys(t *testing.T, ctx context.Context, c *s3.Client, bucket, prefix, delim string) (keys, prefixes []string) {
	t.Helper()
	in := &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix), MaxKeys: aws.Int32(2)}
	if delim != "" {
		in.Delimiter = aws.String(delim)
	}
	p := s3.NewListObjectsV2Paginator(c, in) // MaxKeys 2: pages through continuation tokens
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("ListObjectsV2 %q: %v", prefix, err)
		}
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
		for _, cp := range page.CommonPrefixes {
			prefixes = append(prefixes, aws.ToString(cp.Prefix))
		}
	}
	sort.Strings(keys)
	sort.Strings(prefixes)
	return keys, prefixes
}

// TestVersityGW checks what an uploader of sealed segments needs against a real
// versitygw: put (single, from a file, multipart), list by prefix, get, head, and
// the server going away and coming back on the same port and root.
func TestVersityGW(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs versitygw")
	}
	srv := Start(t, "segments")
	t.Logf("versitygw answered %v after start", srv.StartupTime)
	hc := &countingClient{hc: &http.Client{}}
	c := srv.Client(func(o *s3.Options) { o.HTTPClient = hc })
	ctx := context.Background()
	b := srv.Bucket

	// Single PutObject from memory and from an *os.File (what an uploader sends).
	seg := randomBytes(t, 256<<10)
	prefix := "perfprof/version=1/date=2026-11-28/service=svc/time=0012/instance=i-1/boot=abcd-1234/"
	keys := []string{prefix + "1764288000-0.bin.gz", prefix + "1764288000-1.bin.gz", prefix + "1764288000-2.bin.gz"}
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &b, Key: &keys[0], Body: bytes.NewReader(seg)}); err != nil {
		t.Fatalf("PutObject: %v", err)
	}
	path := filepath.Join(t.TempDir(), "seg.bin.gz")
	if err := os.WriteFile(path, seg, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: &b, Key: &keys[1], Body: f, ContentLength: aws.Int64(int64(len(seg)))})
	f.Close()
	if err != nil {
		t.Fatalf("PutObject from a file: %v", err)
	}
	// Conditional put (If-None-Match: *): a second upload of a key fails with 412.
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: &b, Key: &keys[1], Body: bytes.NewReader(seg), IfNoneMatch: aws.String("*")})
	t.Logf("conditional re-put of an existing key: %v", err)

	// Multipart: two parts of 5 MiB and one of 1 KiB.
	mpKey := keys[2]
	big := randomBytes(t, 10<<20+1024)
	cm, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &b, Key: &mpKey})
	if err != nil {
		t.Fatalf("CreateMultipartUpload: %v", err)
	}
	var parts []types.CompletedPart
	for i, off := int32(1), 0; off < len(big); i, off = i+1, off+5<<20 {
		end := min(off+5<<20, len(big))
		up, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: &b, Key: &mpKey, UploadId: cm.UploadId, PartNumber: aws.Int32(i), Body: bytes.NewReader(big[off:end])})
		if err != nil {
			t.Fatalf("UploadPart %d: %v", i, err)
		}
		parts = append(parts, types.CompletedPart{PartNumber: aws.Int32(i), ETag: up.ETag, ChecksumCRC32: up.ChecksumCRC32})
	}
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &b, Key: &mpKey, UploadId: cm.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}); err != nil {
		t.Fatalf("CompleteMultipartUpload: %v", err)
	}

	// Get: byte-identical.
	for i, want := range [][]byte{seg, seg, big} {
		if got := getObject(t, ctx, c, b, keys[i]); !bytes.Equal(got, want) {
			t.Fatalf("GetObject %s: %d bytes, want %d identical", keys[i], len(got), len(want))
		}
	}
	// Head: size; a missing key is a typed NotFound.
	h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b, Key: &keys[2]})
	if err != nil {
		t.Fatalf("HeadObject: %v", err)
	}
	if aws.ToInt64(h.ContentLength) != int64(len(big)) {
		t.Fatalf("HeadObject size %d, want %d", aws.ToInt64(h.ContentLength), len(big))
	}
	t.Logf("multipart ETag %s", aws.ToString(h.ETag))
	_, err = c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b, Key: aws.String(prefix + "missing")})
	var nf *types.NotFound
	if !errors.As(err, &nf) {
		t.Fatalf("HeadObject of a missing key: %v, want *types.NotFound", err)
	}

	// ListObjectsV2: by prefix, paginated, and with a delimiter.
	got, _ := listKeys(t, ctx, c, b, prefix, "")
	if len(got) != 3 || got[0] != keys[0] || got[2] != keys[2] {
		t.Fatalf("list %q: %v", prefix, got)
	}
	_, cps := listKeys(t, ctx, c, b, "perfprof/version=1/date=2026-11-28/", "/")
	if len(cps) != 1 || cps[0] != "perfprof/version=1/date=2026-11-28/service=svc/" {
		t.Fatalf("list with delimiter: common prefixes %v", cps)
	}
	if got, _ := listKeys(t, ctx, c, b, "perfprof/version=1/date=2026-11-29/", ""); len(got) != 0 {
		t.Fatalf("list of an empty prefix: %v", got)
	}

	// Stop: a put fails, after the retryer's attempts.
	srv.Stop(t)
	n0 := hc.n.Load()
	start := time.Now()
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: &b, Key: aws.String(prefix + "down"), Body: bytes.NewReader(seg)})
	took := time.Since(start)
	if err == nil {
		t.Fatal("PutObject succeeded with the server stopped")
	}
	t.Logf("put while stopped: %d attempts in %v: %v", hc.n.Load()-n0, took.Round(time.Millisecond), err)

	// A context bounds it; so does MaxAttempts.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	start = time.Now()
	_, err = c.PutObject(cctx, &s3.PutObjectInput{Bucket: &b, Key: aws.String(prefix + "down"), Body: bytes.NewReader(seg)})
	cancel()
	t.Logf("put while stopped, 20 ms context: %v: %v", time.Since(start).Round(time.Millisecond), err)
	n0 = hc.n.Load()
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: &b, Key: aws.String(prefix + "down"), Body: bytes.NewReader(seg)},
		func(o *s3.Options) { o.RetryMaxAttempts = 1 })
	t.Logf("put while stopped, RetryMaxAttempts 1: %d attempts: %v", hc.n.Load()-n0, err)

	// The retry quota: 500 tokens, 14 per retry; once spent, no retries until successes refill it.
	n0 = hc.n.Load()
	var quotaAt int
	for i := range 40 {
		_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: &b, Key: aws.String(prefix + "down"), Body: bytes.NewReader(seg)})
		var qe ratelimit.QuotaExceededError
		if errors.As(err, &qe) {
			quotaAt = i + 1
			t.Logf("retry quota spent at failed put %d (%d attempts so far): %v", quotaAt, hc.n.Load()-n0, err)
			break
		}
	}
	if quotaAt == 0 {
		t.Logf("retry quota not spent after 40 failed puts (%d attempts)", hc.n.Load()-n0)
	}

	// Restart on the same port and root: the objects are there, the same client puts again.
	srv.Restart(t)
	t.Logf("versitygw answered %v after restart", srv.StartupTime)
	if got := getObject(t, ctx, c, b, keys[0]); !bytes.Equal(got, seg) {
		t.Fatal("object lost over the restart")
	}
	for i := range 3 {
		n0 = hc.n.Load()
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &b, Key: aws.String(prefix + "after-restart"), Body: bytes.NewReader(seg)}); err != nil {
			t.Fatalf("PutObject %d after restart: %v", i, err)
		}
		t.Logf("put %d after restart: %d attempts", i, hc.n.Load()-n0)
	}
}

// TestSDKEnvCredentials: the default config chain with AWS_* environment variables,
// BaseEndpoint and UsePathStyle set in code, or the endpoint from AWS_ENDPOINT_URL_S3.
func TestSDKEnvCredentials(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs versitygw")
	}
	srv := Start(t, "envbucket")
	t.Setenv("AWS_ACCESS_KEY_ID", AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", SecretKey)
	t.Setenv("AWS_REGION", Region)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true") // no instance metadata lookups, ever
	t.Setenv("AWS_PROFILE", "")
	ctx := context.Background()

	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := cfg.Credentials.Retrieve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("credentials from %s, region %s", creds.Source, cfg.Region)
	c := s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(srv.Endpoint)
		o.UsePathStyle = true
	})
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String("a/b"), Body: bytes.NewReader([]byte("x"))}); err != nil {
		t.Fatalf("PutObject with env credentials: %v", err)
	}

	// The endpoint from the environment (AWS_ENDPOINT_URL_S3), path style from code.
	t.Setenv("AWS_ENDPOINT_URL_S3", srv.Endpoint)
	cfg2, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c2 := s3.NewFromConfig(cfg2, func(o *s3.Options) { o.UsePathStyle = true })
	if keys, _ := listKeys(t, ctx, c2, srv.Bucket, "a/", ""); len(keys) != 1 {
		t.Fatalf("list through AWS_ENDPOINT_URL_S3: %v", keys)
	}

	// A wrong secret: SignatureDoesNotMatch, not retried.
	hc := &countingClient{hc: &http.Client{}}
	bad := s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(srv.Endpoint)
		o.UsePathStyle = true
		o.HTTPClient = hc
		o.Credentials = aws.NewCredentialsCache(aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: AccessKey, SecretAccessKey: "wrong"}, nil
		}))
	})
	_, err = bad.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String("a/c"), Body: bytes.NewReader([]byte("x"))})
	t.Logf("wrong secret: %d attempts: %v", hc.n.Load(), err)
	if err == nil {
		t.Fatal("PutObject with a wrong secret succeeded")
	}
	// A missing bucket: NoSuchBucket.
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("nobucket"), Key: aws.String("k"), Body: bytes.NewReader([]byte("x"))})
	t.Logf("missing bucket: %v", err)
}
