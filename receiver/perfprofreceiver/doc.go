//go:generate go tool -modfile=../../internal/tools/go.mod mdatagen metadata.yaml

// Package perfprofreceiver is an OpenTelemetry Collector receiver that
// samples the CPU stacks of chosen processes with perf_event_open, joins the
// samples to the spans apps send it over OTLP, and emits OTLP profiles.
//
// The receiver is wiring: configuration (config.go: Config → the engine's
// options), lifecycle and the one instance its signals share (factory.go,
// receiver.go), OTLP span ingest (ingest.go: spans passed on to the traces
// pipeline, and turned into the engine's spans by internal/spanconv, which
// keeps their resources for the profiles), the conversion of the engine's
// snapshots to pdata profiles (internal/pdataprofiles) and the collector's
// telemetry.
// The work (sampling, per-process state, off-CPU accounting, the join and
// symbolization) is internal/profiler's.
package perfprofreceiver // import "github.com/perfprof/perfprof/receiver/perfprofreceiver"
