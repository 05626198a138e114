package perfprofreceiver

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/perfprof/perfprof/receiver/perfprofreceiver/internal/metadata"
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
		id      component.ID
		want    *Config
		wantErr []string
	}{
		{
			id: component.NewID(metadata.Type),
			want: withDefaults(func(c *Config) {
				c.Targets.Executables = []string{"myapp"}
			}),
		},
		{
			id: component.NewIDWithName(metadata.Type, "custom"),
			want: withDefaults(func(c *Config) {
				c.Targets = TargetsConfig{Pids: []int{1234}, Executables: []string{"myapp", "worker"}}
				c.Scope = "system"
				c.Frequency = 999
				c.KernelStacks = true
				c.ReportInterval = 5 * time.Second
				c.DiscoveryInterval = 2 * time.Second
				c.RingPages = 128
				c.MaxSamplesPerReport = 50000
			}),
		},
		{
			id:      component.NewIDWithName(metadata.Type, "no_targets"),
			wantErr: []string{"name at least one process in targets.pids or targets.executables"},
		},
		{
			id: component.NewIDWithName(metadata.Type, "bad_values"),
			wantErr: []string{
				"targets.pids: -3 is not a process id",
				"targets.executables: empty name",
				`scope: "cluster" is not one of "process", "system"`,
				"frequency: 20000 Hz is outside 1..10000",
				"report_interval: 10ms is below the minimum of 100ms",
				"ring_pages: 100 is not a power of two",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.id.String(), func(t *testing.T) {
			cfg := NewFactory().CreateDefaultConfig()
			sub, err := cm.Sub(tt.id.String())
			require.NoError(t, err)
			require.NoError(t, sub.Unmarshal(cfg))
			err = confmap.Validate(cfg)
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

func TestDefaultConfigNeedsTargets(t *testing.T) {
	err := confmap.Validate(createDefaultConfig())
	require.ErrorContains(t, err, "targets")
}
