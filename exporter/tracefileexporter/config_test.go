package tracefileexporter

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/perfprof/perfprof/exporter/tracefileexporter/internal/metadata"
)

func TestLoadConfig(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	require.NoError(t, err)
	withDefaults := func(f func(*Config)) *Config {
		c := createDefaultConfig()
		f(c)
		return c
	}
	tests := []struct {
		name    string
		want    *Config
		wantErr []string
	}{
		{name: "", want: createDefaultConfig()},
		{name: "custom", want: withDefaults(func(c *Config) {
			c.Directory = "/var/lib/perfprof/traces"
			c.FilePrefix = "api"
			c.Format = FormatTokioTRC
			c.MaxFileSize = 10 << 20
			c.RotationInterval = 5 * time.Minute
			c.MaxTotalSize = 200 << 20
			c.Compress = false
			c.FileMode = 0o640
			c.Correlation.ThreadIDAttribute = "os.tid"
			c.Correlation.WorkerIDAttribute = "tokio.worker"
		})},
		{name: "os_thread", want: withDefaults(func(c *Config) {
			c.Correlation.ThreadIDAttribute = "os.thread_id"
			c.Correlation.WorkerIDAttribute = ""
		})},
		{name: "file_mode_yaml_octal", want: withDefaults(func(c *Config) { c.FileMode = 0o750 })},
		{name: "file_mode_decimal", wantErr: []string{"file_mode 01200: only permission bits (at most 0777) may be set"}},
		{name: "file_mode_setuid", wantErr: []string{"file_mode 04700: only permission bits (at most 0777) may be set"}},
		{name: "file_mode_no_owner_write", wantErr: []string{"file_mode 0440: the owner must be able to read and write the segments (0600 at least)"}},
		{name: "file_mode_not_octal", wantErr: []string{`invalid file mode "rw-r-----"`}},
		{name: "no_thread_attribute", wantErr: []string{"correlation.thread_id_attribute: must name a span attribute"}},
		{name: "bad_format", wantErr: []string{`format "parquet": must be "trc" or "tokiotrc"`}},
		{name: "bad_size", wantErr: []string{`invalid size "10 furlongs"`}},
		{name: "small_total", wantErr: []string{"max_total_size (150MiB) must be at least twice max_file_size (100MiB)"}},
		{name: "bad_prefix", wantErr: []string{`file_prefix "a/b" must be a non-empty file name without slashes`}},
		{name: "short_interval", wantErr: []string{"rotation_interval 10ms: must be 0 (off) or at least 1s"}},
		{name: "s3", want: withDefaults(func(c *Config) {
			c.S3 = configoptional.Some(S3Config{
				Bucket: "perfprof-traces", Prefix: "fleet/prod", Region: "eu-west-1",
				Endpoint: "http://127.0.0.1:7070", PathStyle: true, DeleteAfterUpload: true,
				Service: "checkout", Instance: "node-7", PutTimeout: time.Minute, MaxBackoff: 5 * time.Minute,
			})
		})},
		{name: "s3_defaults", want: withDefaults(func(c *Config) {
			s := defaultS3Config()
			s.Bucket = "perfprof-traces"
			c.S3 = configoptional.Some(s)
		})},
		{name: "span_attributes", wantErr: []string{`span_attributes: "http.route" is empty or given twice`, `span_attributes: "" is empty or given twice`}},
		{name: "keep", want: withDefaults(func(c *Config) {
			c.Keep = KeepConfig{
				Rules: []KeepRule{
					{SpanName: "GET /checkout", MinDuration: 250 * time.Millisecond, Percentile: 99},
					{MinDuration: 2 * time.Second},
				},
				Lookback: 5 * time.Second, Settle: time.Minute, For: 72 * time.Hour, MaxSize: 4 << 30,
			}
		})},
		{name: "keep_bad", wantErr: []string{
			"keep.rules[0]: needs min_duration, percentile or both",
			"keep.rules[1]: a percentile needs a span_name",
			"keep.rules[2].percentile 100: must be above 0 and below 100",
			"keep.for 10s: must be at least 1m",
			"keep.lookback -1s: must not be negative",
		}},
		{name: "s3_no_bucket", wantErr: []string{"s3.bucket: must name the bucket"}},
		{name: "s3_bad", wantErr: []string{
			`s3.bucket "My_Bucket": must be 3 to 63 lower-case letters`,
			`s3.prefix "/fleet": must not start with a slash`,
			`s3.endpoint "127.0.0.1:7070": must be an http:// or https:// URL with a host`,
			"s3.put_timeout 10ms: must be at least 1s",
			"s3.max_backoff 0s: must be at least 1s",
		}},
	}
	for _, tt := range tests {
		id := component.NewIDWithName(metadata.Type, tt.name)
		t.Run(id.String(), func(t *testing.T) {
			cfg := NewFactory().CreateDefaultConfig()
			sub, err := cm.Sub(id.String())
			require.NoError(t, err)
			err = sub.Unmarshal(cfg)
			if err == nil {
				err = confmap.Validate(cfg)
			}
			if len(tt.wantErr) > 0 {
				require.Error(t, err)
				for _, w := range tt.wantErr {
					assert.ErrorContains(t, err, w)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, cfg)
		})
	}
}

func TestByteSize(t *testing.T) {
	for in, want := range map[string]ByteSize{"0": 0, "1000": 1000, "100MiB": 100 << 20, "1 GiB": 1 << 30,
		"10MB": 10e6, "512KiB": 512 << 10, "7B": 7} {
		var b ByteSize
		require.NoError(t, b.UnmarshalText([]byte(in)), in)
		assert.Equal(t, want, b, in)
	}
	for _, in := range []string{"", "-1MiB", "1.5GiB", "MiB", "99999999999TiB"} {
		var b ByteSize
		assert.Error(t, b.UnmarshalText([]byte(in)), in)
	}
	assert.Equal(t, "100MiB", ByteSize(100<<20).String())
	assert.Equal(t, "1000B", ByteSize(1000).String())
}

func TestFileModeText(t *testing.T) {
	for in, want := range map[string]FileMode{"0600": 0o600, "640": 0o640, "0o750": 0o750, " 0644 ": 0o644} {
		var m FileMode
		require.NoError(t, m.UnmarshalText([]byte(in)), in)
		assert.Equal(t, want, m, in)
	}
	for _, in := range []string{"", "0o", "0x1ff", "rw-------", "0689", "-0600"} {
		var m FileMode
		assert.Error(t, m.UnmarshalText([]byte(in)), in)
	}
	assert.Equal(t, "0640", FileMode(0o640).String())
}
