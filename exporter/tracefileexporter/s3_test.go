package tracefileexporter

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/config/configoptional"

	"github.com/perfprof/perfprof/exporter/tracefileexporter/internal/s3upload"
	"github.com/perfprof/perfprof/internal/s3test"
)

// awsTestEnv gives the AWS SDK's default chain the test server's key and
// nothing else: no shared files or profile, and never the instance
// metadata address.
func awsTestEnv(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", s3test.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3test.SecretKey)
	t.Setenv("AWS_REGION", s3test.Region)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "missing"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "missing"))
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
}

// TestS3Upload: the exporter with an s3 block, credentials from the
// environment, writes segments and, by its shutdown, has every sealed
// segment in the bucket, byte-identical, under a layout v1 key; with
// delete_after_upload the directory keeps none of them.
func TestS3Upload(t *testing.T) {
	for _, del := range []bool{false, true} {
		t.Run(map[bool]string{false: "keep", true: "delete_after_upload"}[del], func(t *testing.T) {
			awsTestEnv(t)
			srv := s3test.Start(t, "perfprof-exporter")
			dir := t.TempDir()
			e := newTestFile(t, dir, func(c *Config) {
				c.MaxFileSize = 64 << 10
				c.MaxTotalSize = 0
				s := defaultS3Config()
				s.Bucket = srv.Bucket
				s.Prefix = "fleet"
				s.Endpoint = srv.Endpoint
				s.PathStyle = true
				s.Service = "svc"
				s.DeleteAfterUpload = del
				c.S3 = configoptional.Some(s)
			})
			for range 8 {
				require.NoError(t, e.pushProfiles(t.Context(), benchProfiles(2000)))
			}
			require.NoError(t, e.shutdown(t.Context()))
			n := e.counts.Load(s3upload.CUploaded)
			require.Greater(t, n, int64(2), "segments uploaded")
			require.Zero(t, e.counts.Load(s3upload.CFailed))
			require.Zero(t, e.counts.Load(s3upload.CPending))

			ctx := context.Background()
			c := srv.Client()
			out, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(srv.Bucket)})
			require.NoError(t, err)
			require.Len(t, out.Contents, int(n))
			keyRE := regexp.MustCompile(`^fleet/version=1/date=\d{4}-\d\d-\d\d/service=svc/time=\d{4}/instance=[^/]+/boot=[a-z]{4}-\d+/\d+-(\d+)\.bin\.gz$`)
			files := segmentFiles(t, dir)
			if del {
				require.Empty(t, files, "delete_after_upload")
				return
			}
			require.Len(t, files, int(n))
			for _, o := range out.Contents {
				m := keyRE.FindStringSubmatch(*o.Key)
				require.NotNil(t, m, "key %s", *o.Key)
				g, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(srv.Bucket), Key: o.Key})
				require.NoError(t, err)
				got, err := io.ReadAll(g.Body)
				g.Body.Close()
				require.NoError(t, err)
				want, err := os.ReadFile(filepath.Join(dir, "trace."+m[1]+".bin.gz"))
				require.NoError(t, err)
				require.True(t, bytes.Equal(got, want), "%s differs from trace.%s.bin.gz", *o.Key, m[1])
			}
		})
	}
}
