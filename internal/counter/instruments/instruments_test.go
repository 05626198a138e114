package instruments

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/perfprof/perfprof/internal/counter"
)

var (
	okOne   = counter.Define("instruments_ok_off_cpu_things", "reason", "one")
	okTwo   = counter.Define("instruments_ok_off_cpu_things", "reason", "two")
	okGauge = counter.Define("instruments_ok_level")
	_       = counter.Define("instruments_bad_missing")
)

// builder is shaped as mdatagen's TelemetryBuilder: one exported field per
// metric, named in camel case with initialisms upper-cased.
type builder struct {
	InstrumentsOkOffCPUThings metric.Int64Counter
	InstrumentsOkLevel        metric.Int64UpDownCounter
}

func TestBind(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	meter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test")
	var b builder
	var err error
	b.InstrumentsOkOffCPUThings, err = meter.Int64Counter("things")
	if err != nil {
		t.Fatal(err)
	}
	b.InstrumentsOkLevel, err = meter.Int64UpDownCounter("level")
	if err != nil {
		t.Fatal(err)
	}

	// A metric counted without an instrument fails the binding.
	if _, err := Bind(&b, "instruments_"); err == nil {
		t.Fatal("bound instruments_bad_missing to nothing")
	}
	bound, err := Bind(&b, "instruments_ok_")
	if err != nil {
		t.Fatal(err)
	}
	s := counter.NewSet()
	s.Add(okOne, 3)
	s.Add(okTwo, 4)
	s.Add(okGauge, 2)
	bound.Flush(context.Background(), s)
	s.Add(okOne, 1)
	s.Add(okGauge, -2)
	bound.Flush(context.Background(), s)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
			r, _ := dp.Attributes.Value(attribute.Key("reason"))
			got[m.Name+"/"+r.AsString()] = dp.Value
		}
	}
	want := map[string]int64{"things/one": 4, "things/two": 4, "level/": 0}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
}
