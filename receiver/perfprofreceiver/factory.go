package perfprofreceiver

import (
	"context"
	"sync"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/xreceiver"

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
// span index. The collector's sharedcomponent package is internal to it.
var (
	receiversMu sync.Mutex
	receivers   = map[*Config]*perfprofReceiver{}
)

func getOrCreate(cfg *Config, set receiver.Settings) (*perfprofReceiver, error) {
	receiversMu.Lock()
	defer receiversMu.Unlock()
	if r, ok := receivers[cfg]; ok {
		return r, nil
	}
	r, err := newReceiver(cfg, set, func() {
		receiversMu.Lock()
		delete(receivers, cfg)
		receiversMu.Unlock()
	})
	if err != nil {
		return nil, err
	}
	receivers[cfg] = r
	return r, nil
}

func createProfiles(_ context.Context, set receiver.Settings, cfg component.Config, next xconsumer.Profiles) (xreceiver.Profiles, error) {
	r, err := getOrCreate(cfg.(*Config), set)
	if err != nil {
		return nil, err
	}
	r.profiles = next
	return r, nil
}

func createTraces(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Traces) (receiver.Traces, error) {
	r, err := getOrCreate(cfg.(*Config), set)
	if err != nil {
		return nil, err
	}
	r.traces = next
	return r, nil
}
