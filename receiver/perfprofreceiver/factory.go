package perfprofreceiver

import (
	"context"
	"errors"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/xreceiver"

	"github.com/perfprof/perfprof/internal/shared"
	"github.com/perfprof/perfprof/receiver/perfprofreceiver/internal/metadata"
)

// NewFactory returns the factory of the perfprof receiver.
func NewFactory() receiver.Factory {
	return xreceiver.NewFactory(
		metadata.Type,
		func() component.Config { return createDefaultConfig() },
		xreceiver.WithProfiles(createProfiles, metadata.ProfilesStability),
		xreceiver.WithTraces(createTraces, metadata.TracesStability),
	)
}

// receivers holds one instance per configuration, so that the signals of
// one component ID (profiles and traces) share one perf session and one
// span index.
var receivers shared.Map[*Config, *perfprofReceiver]

// signal is one signal's handle on the shared receiver.
type signal struct {
	*shared.User[*Config, *perfprofReceiver]
	profiles bool // the profiles signal; else traces
}

func (s signal) Start(ctx context.Context, host component.Host) error {
	r := s.Value()
	return s.User.Start(func() error { return r.start(ctx, host) })
}

// Shutdown finishes this signal's part while its pipeline's exporters still
// run (see perfprofReceiver.flush), and the rest with the last signal.
func (s signal) Shutdown(ctx context.Context) error {
	r := s.Value()
	var err error
	if s.Started() {
		if s.profiles {
			err = r.flush(ctx)
		} else {
			r.stopSpans(ctx)
		}
	}
	return errors.Join(err, s.Stop(func(started bool) error { return r.shutdown(ctx, started) }))
}

func acquire(cfg *Config, set receiver.Settings) (signal, error) {
	u, err := receivers.Acquire(cfg, func() (*perfprofReceiver, error) { return newReceiver(cfg, set) })
	return signal{User: u}, err
}

func createProfiles(_ context.Context, set receiver.Settings, cfg component.Config, next xconsumer.Profiles) (xreceiver.Profiles, error) {
	s, err := acquire(cfg.(*Config), set)
	if err != nil {
		return nil, err
	}
	s.Value().profiles = next
	s.profiles = true
	return s, nil
}

func createTraces(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Traces) (receiver.Traces, error) {
	s, err := acquire(cfg.(*Config), set)
	if err != nil {
		return nil, err
	}
	s.Value().traces = next
	return s, nil
}
