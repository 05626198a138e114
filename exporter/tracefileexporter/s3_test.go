package tracefileexporter

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/perfprof/perfprof/exporter/tracefileexporter/internal/metadata"

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
				// boot= is the segments' boot_id: this process's one.
				require.Contains(t, *o.Key, "/boot="+bootID()+"/")
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

// metricValues returns the data points of an int sum by their attributes
// (attribute=value, "" without attributes).
func metricValues(t *testing.T, tt *componenttest.Telemetry, name string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	m, err := tt.GetMetric(name)
	if err != nil {
		return out
	}
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		k := ""
		for _, kv := range dp.Attributes.ToSlice() {
			k = string(kv.Key) + "=" + kv.Value.Emit()
		}
		out[k] = dp.Value
	}
	return out
}

// TestS3Outage: with the server down the exporter keeps writing, the
// sealed segments stay pending on disk and failed uploads are counted;
// once the server is back they are uploaded, each once, and the
// collector's metrics say so.
func TestS3Outage(t *testing.T) {
	awsTestEnv(t)
	srv := s3test.Start(t, "perfprof-exporter")
	srv.Stop(t)
	dir := t.TempDir()
	tt := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tt.Shutdown(context.Background()) })
	set := exportertest.NewNopSettings(metadata.Type)
	set.TelemetrySettings = tt.NewTelemetrySettings()
	e := startTestFile(t, dir, func(c *Config) {
		c.MaxFileSize = 64 << 10
		c.MaxTotalSize = 0
		s := defaultS3Config()
		s.Bucket = srv.Bucket
		s.Endpoint = srv.Endpoint
		s.PathStyle = true
		s.MaxBackoff = time.Second
		c.S3 = configoptional.Some(s)
	}, set)
	for range 6 {
		require.NoError(t, e.pushProfiles(t.Context(), benchProfiles(2000)))
	}
	require.Eventually(t, func() bool {
		return e.counts.Load(s3upload.CFailed) >= 2 && e.counts.Load(s3upload.CPending) >= 3
	}, 20*time.Second, 10*time.Millisecond)
	require.Zero(t, e.counts.Load(s3upload.CUploaded))
	// The collector's metrics follow within a tick.
	require.Eventually(t, func() bool {
		return metricValues(t, tt, "otelcol_exporter_tracefile_upload_pending")[""] >= 3 &&
			metricValues(t, tt, "otelcol_exporter_tracefile_uploads")["outcome=failed"] >= 2
	}, 5*time.Second, 10*time.Millisecond)
	// Writing went on meanwhile.
	require.NoError(t, e.pushProfiles(t.Context(), benchProfiles(2000)))

	srv.Restart(t)
	require.NoError(t, e.shutdown(t.Context()))
	files := segmentFiles(t, dir)
	n := int64(len(files))
	require.Equal(t, n, e.counts.Load(s3upload.CUploaded), "uploaded once the server is back")
	require.Zero(t, e.counts.Load(s3upload.CPending))
	out, err := srv.Client().ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(srv.Bucket)})
	require.NoError(t, err)
	require.Len(t, out.Contents, len(files), "one object per segment")
	var size int64
	for _, o := range out.Contents {
		size += *o.Size
	}
	up := metricValues(t, tt, "otelcol_exporter_tracefile_uploads")
	require.Equal(t, n, up["outcome=uploaded"])
	require.Equal(t, size, metricValues(t, tt, "otelcol_exporter_tracefile_uploaded_bytes")[""])
	require.Zero(t, metricValues(t, tt, "otelcol_exporter_tracefile_upload_pending")[""])
}
