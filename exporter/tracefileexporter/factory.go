package tracefileexporter

import (
	"context"
	"sync"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/exporter/exporterhelper/xexporterhelper"
	"go.opentelemetry.io/collector/exporter/xexporter"

	"github.com/perfprof/perfprof/exporter/tracefileexporter/internal/metadata"
)

// NewFactory returns the factory of the tracefile exporter.
func NewFactory() exporter.Factory {
	return xexporter.NewFactory(
		metadata.Type,
		func() component.Config { return createDefaultConfig() },
		xexporter.WithTraces(createTraces, metadata.TracesStability),
		xexporter.WithProfiles(createProfiles, metadata.ProfilesStability),
	)
}

// instances holds one traceFile per configuration, so that the profiles
// and traces signals of one component ID write into the same segments.
var (
	instancesMu sync.Mutex
	instances   = map[*Config]*sharedFile{}
)

type sharedFile struct {
	*traceFile     // its cfg is its key in instances
	users      int // signals created and not shut down
}

func getOrCreate(cfg *Config, set exporter.Settings) (*sharedFile, error) {
	instancesMu.Lock()
	defer instancesMu.Unlock()
	if s, ok := instances[cfg]; ok {
		s.users++
		return s, nil
	}
	tf, err := newTraceFile(cfg, set)
	if err != nil {
		return nil, err
	}
	s := &sharedFile{traceFile: tf, users: 1}
	instances[cfg] = s
	return s, nil
}

// release forgets the instance once every signal using it has shut down,
// so that a collector reload starts afresh.
func (s *sharedFile) release(ctx context.Context) error {
	err := s.shutdown(ctx)
	instancesMu.Lock()
	defer instancesMu.Unlock()
	s.users--
	if s.users <= 0 && instances[s.cfg] == s {
		delete(instances, s.cfg)
	}
	return err
}

func options(cfg *Config, s *sharedFile) []exporterhelper.Option {
	return []exporterhelper.Option{
		exporterhelper.WithCapabilities(consumer.Capabilities{MutatesData: false}),
		exporterhelper.WithStart(s.start),
		exporterhelper.WithShutdown(s.release),
		exporterhelper.WithTimeout(cfg.TimeoutConfig),
		exporterhelper.WithQueue(cfg.QueueConfig),
		exporterhelper.WithRetry(cfg.RetryConfig),
	}
}

func createTraces(ctx context.Context, set exporter.Settings, c component.Config) (exporter.Traces, error) {
	cfg := c.(*Config)
	s, err := getOrCreate(cfg, set)
	if err != nil {
		return nil, err
	}
	return exporterhelper.NewTraces(ctx, set, cfg, s.pushTraces, options(cfg, s)...)
}

func createProfiles(ctx context.Context, set exporter.Settings, c component.Config) (xexporter.Profiles, error) {
	cfg := c.(*Config)
	s, err := getOrCreate(cfg, set)
	if err != nil {
		return nil, err
	}
	return xexporterhelper.NewProfiles(ctx, set, cfg, s.pushProfiles, options(cfg, s)...)
}
