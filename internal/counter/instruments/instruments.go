// Package instruments binds the series of package counter to a
// component's OpenTelemetry instruments: the fields of the
// TelemetryBuilder that mdatagen generates from its metadata.yaml, found
// by the metric's name.
package instruments

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/perfprof/perfprof/internal/counter"
)

// adder is what a counter and an up-down counter of int64 have in common.
type adder interface {
	Add(ctx context.Context, incr int64, options ...metric.AddOption)
}

type bound struct {
	inst  adder
	attrs metric.AddOption
}

// Bound adds counter deltas to the instruments of one component.
type Bound struct {
	by map[*counter.Def]bound
}

// Bind binds every series whose metric name starts with prefix to the
// field of builder (a pointer to an mdatagen TelemetryBuilder) that
// mdatagen named after the metric. A series with no such instrument is an
// error: a metric counted but missing from metadata.yaml (or misspelled)
// fails the component's start and its tests, rather than going nowhere.
func Bind(builder any, prefix string) (*Bound, error) {
	v := reflect.ValueOf(builder)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("bind instruments: %T is not a pointer to a struct", builder)
	}
	v = v.Elem()
	fields := map[string]adder{}
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		if a, ok := v.Field(i).Interface().(adder); ok && a != nil {
			// mdatagen's field names are the metric names in camel
			// case with initialisms upper-cased (OffCPU, JIT).
			fields[strings.ToLower(f.Name)] = a
		}
	}
	b := &Bound{by: map[*counter.Def]bound{}}
	for _, d := range counter.Defs() {
		if !strings.HasPrefix(d.Metric, prefix) {
			continue
		}
		inst, ok := fields[strings.ReplaceAll(d.Metric, "_", "")]
		if !ok {
			return nil, fmt.Errorf("bind instruments: metric %s is counted but has no instrument (is it in metadata.yaml?)", d.Metric)
		}
		kv := make([]attribute.KeyValue, 0, len(d.Attrs)/2)
		for i := 0; i+1 < len(d.Attrs); i += 2 {
			kv = append(kv, attribute.String(d.Attrs[i], d.Attrs[i+1]))
		}
		b.by[d] = bound{inst, metric.WithAttributeSet(attribute.NewSet(kv...))}
	}
	return b, nil
}

// Add adds n to the instrument of series d; a series of another component
// (not bound) is ignored.
func (b *Bound) Add(ctx context.Context, d *counter.Def, n int64) {
	if x, ok := b.by[d]; ok {
		x.inst.Add(ctx, n, x.attrs)
	}
}

// Flush moves what s counted since its last flush into the instruments.
func (b *Bound) Flush(ctx context.Context, s *counter.Set) {
	s.Flush(func(d *counter.Def, n int64) { b.Add(ctx, d, n) })
}
