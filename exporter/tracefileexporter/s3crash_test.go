package tracefileexporter

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/config/configoptional"

	"github.com/perfprof/perfprof/exporter/tracefileexporter/internal/s3upload"
	"github.com/perfprof/perfprof/internal/s3test"
)

// s3Config is the s3 block of the crash test, for srv's bucket.
func s3Config(c *Config, endpoint, bucket string) {
	c.MaxFileSize = 32 << 10
	c.MaxTotalSize = 0
	s := defaultS3Config()
	s.Bucket = bucket
	s.Endpoint = endpoint
	s.PathStyle = true
	s.MaxBackoff = time.Second
	c.S3 = configoptional.Some(s)
}

// TestS3CrashChild is the collector that TestS3Crash kills: it writes
// until it is killed.
func TestS3CrashChild(t *testing.T) {
	dir := os.Getenv("PERFPROF_S3CRASH_DIR")
	if dir == "" {
		t.Skip("run by TestS3Crash")
	}
	e := newTestFile(t, dir, func(c *Config) {
		s3Config(c, os.Getenv("PERFPROF_S3CRASH_ENDPOINT"), os.Getenv("PERFPROF_S3CRASH_BUCKET"))
	})
	for {
		require.NoError(t, e.pushProfiles(t.Context(), benchProfiles(500)))
		time.Sleep(time.Millisecond)
	}
}

// TestS3Crash: a collector writing and uploading is killed with SIGKILL;
// another started on the same directory recovers its .active segment and
// uploads what was left. Every sealed segment is then in the bucket
// exactly once, byte-identical, whatever the kill interrupted (a put, a
// gzip, a write).
func TestS3Crash(t *testing.T) {
	awsTestEnv(t)
	srv := s3test.Start(t, "perfprof-crash")
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestS3CrashChild$", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), "PERFPROF_S3CRASH_DIR="+dir, "PERFPROF_S3CRASH_ENDPOINT="+srv.Endpoint,
		"PERFPROF_S3CRASH_BUCKET="+srv.Bucket)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	c := srv.Client()
	count := func() int {
		out, err := c.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(srv.Bucket)})
		if err != nil {
			return 0
		}
		return len(out.Contents)
	}
	require.Eventually(t, func() bool { return count() >= 5 }, time.Minute, 5*time.Millisecond, "uploads by the child")
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()

	e := newTestFile(t, dir, func(c *Config) { s3Config(c, srv.Endpoint, srv.Bucket) })
	require.NoError(t, e.shutdown(t.Context()))
	require.Zero(t, e.counts.Load(s3upload.CPending))
	t.Logf("after the restart: uploaded %d, already present %d", e.counts.Load(s3upload.CUploaded), e.counts.Load(s3upload.CAlreadyThere))

	files := segmentFiles(t, dir)
	out, err := c.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(srv.Bucket)})
	require.NoError(t, err)
	require.False(t, *out.IsTruncated)
	index := regexp.MustCompile(`/\d+-(\d+)\.bin\.gz$`)
	seen := map[string]int{}
	for _, o := range out.Contents {
		m := index.FindStringSubmatch(*o.Key)
		require.NotNil(t, m, *o.Key)
		seen[m[1]]++
		require.Equal(t, 1, seen[m[1]], "segment %s twice: %s", m[1], *o.Key)
		g, err := c.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(srv.Bucket), Key: o.Key})
		require.NoError(t, err)
		want, err := os.ReadFile(filepath.Join(dir, "trace."+m[1]+".bin.gz"))
		require.NoError(t, err, "object %s has no local segment", *o.Key)
		got, err := io.ReadAll(g.Body)
		g.Body.Close()
		require.NoError(t, err)
		require.True(t, bytes.Equal(got, want), "%s: %d bytes, the segment %d", *o.Key, len(got), len(want))
	}
	require.Len(t, out.Contents, len(files), "one object per sealed segment")
}
