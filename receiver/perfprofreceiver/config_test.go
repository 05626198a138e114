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
				c.Targets = TargetsConfig{Pids: []int{1234}, Executables: []string{"myapp", "worker"},
					Cgroups:      []string{"/kubepods.slice/kubepods-*.slice/kubepods-*-pod6b1f2c3d_*.slice"},
					ContainerIDs: []string{"3f4e5d6c7b8a"}}
				c.Scope = "system"
				c.Frequency = 999
				c.KernelStacks = true
				c.ReportInterval = 5 * time.Second
				c.DiscoveryInterval = 2 * time.Second
				c.RingPages = 128
				c.Unwind = "dwarf"
				c.UnwindStackBytes = 8192
				c.Symbolize = false
				c.RecoverLeafCaller = false
				c.JVM = JVMConfig{PerfMap: true, RefreshInterval: 30 * time.Second}
				c.EBPF = "off"
				c.Correlation.SpanIDLabel = "otel.span_id"
				c.Correlation.TraceIDLabel = "otel.trace_id"
				c.Correlation.Ambiguous = "latest"
				c.Protocols.GRPC.GetOrInsertDefault().NetAddr.Endpoint = "0.0.0.0:14317"
				c.Protocols.HTTP.GetOrInsertDefault().TracesURLPath = "/traces"
				on := true
				c.Sched = SchedConfig{Enabled: &on, OffCPUInterval: 5 * time.Millisecond, MinBlockTime: 50 * time.Microsecond,
					StackEvery: 4, StackMinGap: 2 * time.Millisecond, MaxRecordsPerSecond: 5000}
				c.Correlation.Window = 5 * time.Second
				c.Correlation.ThreadIDAttribute = "os.tid"
				c.Correlation.WorkerIDAttribute = "tokio.worker"
				c.Correlation.MaxBufferedSamples = 50000
				c.Correlation.MaxSpans = 2000
			}),
		},
		{
			id:      component.NewIDWithName(metadata.Type, "no_targets"),
			wantErr: []string{"name at least one process in targets.pids, targets.executables, targets.cgroups or targets.container_ids"},
		},
		{
			id: component.NewIDWithName(metadata.Type, "bad_values"),
			wantErr: []string{
				"targets.pids: -3 is not a process id",
				"targets.executables: empty name",
				`targets.cgroups: cgroup pattern "/kubepods/../etc": empty, "." or ".." component`,
				`targets.cgroups: cgroup pattern "/kubepods/[pod": syntax error in pattern`,
				`targets.container_ids: container id "3f4e": not a container id (want 64 hex digits, a prefix of at least 12`,
				`scope: "cluster" is not one of "process", "system"`,
				"frequency: 20000 Hz is outside 1..10000",
				"report_interval: 10ms is below the minimum of 100ms",
				"ring_pages: 100 is not a power of two",
				`unwind: "libunwind" is not auto, frame_pointer or dwarf`,
				"unwind_stack_bytes: 100 is not a multiple of 8 in 512..61440",
				"correlation.window: 1h0m0s is outside 0..10m",
				"sched.off_cpu_interval: 10µs is outside 100µs..1m",
				"sched.min_block_time: -1ms is outside 0..1m",
				"sched.stack_every: 0 is outside 1..1000000",
				"sched.stack_min_gap: 2m0s is outside 0..1m",
				"sched.max_records_per_second: -5 is negative",
				"jvm.refresh_interval: 10ms is below the minimum of 100ms",
				`ebpf: "sometimes" is not one of "auto", "required", "off"`,
				"correlation.thread_id_attribute: must name a span attribute",
				"correlation.max_spans: 0 must be at least 1",
				`correlation.ambiguous: "newest" is not one of "unlinked", "latest"`,
				`protocols.http.traces_url_path: "traces" must start with /`,
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
