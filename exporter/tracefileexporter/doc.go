//go:generate go tool -modfile=../../internal/tools/go.mod mdatagen metadata.yaml

// Package tracefileexporter is an OpenTelemetry Collector exporter that
// writes profiles and worker spans into rotating dial9 trace files, so that
// a run can be kept, shipped and opened later by the perfprof CLI and the
// dial9 viewer. How OTLP data maps onto the file format is in
// docs/trace-conventions.md.
//
// The exporter is wiring: configuration, lifecycle, the collector's
// telemetry and the mapping of pdata to trace events. Encoding lives in
// internal/wire, rotation in internal/segment.
package tracefileexporter // import "github.com/perfprof/perfprof/exporter/tracefileexporter"
