package tracefileexporter

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
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
			c.Correlation.ThreadIDAttribute = "os.tid"
			c.Correlation.WorkerIDAttribute = "tokio.worker"
		})},
		{name: "os_thread", want: withDefaults(func(c *Config) {
			c.Correlation.ThreadIDAttribute = "os.thread_id"
			c.Correlation.WorkerIDAttribute = ""
		})},
		{name: "no_thread_attribute", wantErr: []string{"correlation.thread_id_attribute: must name a span attribute"}},
		{name: "bad_format", wantErr: []string{`format "parquet": must be "trc" or "tokiotrc"`}},
		{name: "bad_size", wantErr: []string{`invalid size "10 furlongs"`}},
		{name: "small_total", wantErr: []string{"max_total_size (150MiB) must be at least twice max_file_size (100MiB)"}},
		{name: "bad_prefix", wantErr: []string{`file_prefix "a/b" must be a non-empty file name without slashes`}},
		{name: "short_interval", wantErr: []string{"rotation_interval 10ms: must be 0 (off) or at least 1s"}},
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
