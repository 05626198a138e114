package spanlabels_test

import (
	"context"
	"fmt"
	"runtime/pprof"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/perfprof/perfprof/pkg/spanlabels"
)

func Example() {
	sdk := sdktrace.NewTracerProvider() // with the app's exporter and resource
	defer sdk.Shutdown(context.Background())
	otel.SetTracerProvider(spanlabels.NewTracerProvider(sdk))

	ctx, span := otel.Tracer("example").Start(context.Background(), "work")
	// The goroutine now carries the labels of ctx; so does every goroutine
	// it starts from here on.
	id, _ := pprof.Label(ctx, spanlabels.DefaultSpanIDKey)
	fmt.Println(id == span.SpanContext().SpanID().String())
	span.End() // the goroutine's labels are those of context.Background() again
	// Output: true
}
