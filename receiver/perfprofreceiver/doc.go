//go:generate go tool -modfile=../../internal/tools/go.mod mdatagen metadata.yaml

// Package perfprofreceiver is an OpenTelemetry Collector receiver that
// samples the CPU stacks of chosen processes with perf_event_open,
// symbolizes them next to the binaries and emits OTLP profiles.
//
// The receiver is wiring: configuration, lifecycle, the collector's
// telemetry and the conversion to pdata profiles. Sampling lives in
// internal/perf, symbolization in internal/symbolize.
package perfprofreceiver // import "github.com/perfprof/perfprof/receiver/perfprofreceiver"
