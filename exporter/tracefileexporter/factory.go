package tracefileexporter

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/exporter/exporterhelper/xexporterhelper"
	"go.opentelemetry.io/collector/exporter/xexporter"

	"github.com/perfprof/perfprof/exporter/tracefileexporter/internal/metadata"
	"github.com/perfprof/perfprof/internal/shared"
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

// instances holds one traceFile per configuration: the collector hands
// every signal of one component ID the same *Config, so the profiles and
// traces signals write into the same segments. The last signal to shut
// down seals them, and the instance is forgotten, so that a rebuilt
// pipeline starts afresh.
var instances shared.Map[*Config, *traceFile]

type user = shared.User[*Config, *traceFile]

// release stops u; the last signal of the instance seals its segments,
// unless the instance never started.
func release(ctx context.Context, u *user) error {
	return u.Stop(func(started bool) error {
		if !started {
			return nil
		}
		return u.Value().shutdown(ctx)
	})
}

func options(cfg *Config, u *user) []exporterhelper.Option {
	return []exporterhelper.Option{
		exporterhelper.WithCapabilities(consumer.Capabilities{MutatesData: false}),
		exporterhelper.WithStart(func(ctx context.Context, host component.Host) error {
			return u.Start(func() error { return u.Value().start(ctx, host) })
		}),
		exporterhelper.WithShutdown(func(ctx context.Context) error { return release(ctx, u) }),
		exporterhelper.WithTimeout(cfg.TimeoutConfig),
		exporterhelper.WithQueue(cfg.QueueConfig),
		exporterhelper.WithRetry(cfg.RetryConfig),
	}
}

func createTraces(ctx context.Context, set exporter.Settings, c component.Config) (exporter.Traces, error) {
	return create(ctx, set, c, func(cfg *Config, tf *traceFile, opts []exporterhelper.Option) (exporter.Traces, error) {
		return exporterhelper.NewTraces(ctx, set, cfg, tf.pushTraces, opts...)
	})
}

func createProfiles(ctx context.Context, set exporter.Settings, c component.Config) (xexporter.Profiles, error) {
	return create(ctx, set, c, func(cfg *Config, tf *traceFile, opts []exporterhelper.Option) (xexporter.Profiles, error) {
		return xexporterhelper.NewProfiles(ctx, set, cfg, tf.pushProfiles, opts...)
	})
}

// create makes one signal's exporter on the shared instance of its config.
func create[E any](ctx context.Context, set exporter.Settings, c component.Config,
	build func(*Config, *traceFile, []exporterhelper.Option) (E, error)) (E, error) {
	cfg := c.(*Config)
	var none E
	u, err := instances.Acquire(cfg, func() (*traceFile, error) { return newTraceFile(cfg, set) })
	if err != nil {
		return none, err
	}
	exp, err := build(cfg, u.Value(), options(cfg, u))
	if err != nil {
		// No Shutdown will come for an exporter that was not made.
		_ = release(ctx, u)
		return none, err
	}
	return exp, nil
}
