// Package spanlabels puts the OpenTelemetry span a goroutine is running on
// that goroutine as runtime/pprof labels, so that a profiler that reads a
// goroutine's labels when it takes a sample knows which span the sample
// belongs to, whichever OS thread the goroutine happens to run on.
//
// It is for Go services profiled by perfprof (or by any profiler that reads
// pprof labels: Go's own CPU profiler records them too). It exports nothing
// and samples nothing: it only sets labels. Wrap the SDK's provider once and
// use the wrapper wherever a TracerProvider is taken:
//
//	sdk := sdktrace.NewTracerProvider(...)
//	otel.SetTracerProvider(spanlabels.NewTracerProvider(sdk))
//	defer sdk.Shutdown(ctx) // the wrapper has no Shutdown of its own
//
// # The contract
//
// When a tracer of the wrapper starts a span that will be exported (it is
// recording and sampled), Start returns a context that carries the labels of
// the context it was given plus span_id (16 lower-case hex digits) and
// trace_id (32), and sets the calling goroutine's labels to that context's
// (pprof.SetGoroutineLabels). The key names are options; an empty name
// leaves that label out.
//
//   - Labels follow the context returned by Start. Labels added to it (say
//     with pprof.WithLabels and pprof.Do) keep the span's; a child span
//     started from it carries the parent's other labels and its own ids.
//   - End sets the labels of the goroutine that calls End to those of the
//     context given to Start: the parent span's labels, or none for a span
//     started from a context without labels. This is pprof.Do's rule. The
//     runtime lets no one read a goroutine's labels, so labels a goroutine
//     carries that are not in that context (set from another context, or
//     inherited at creation) are replaced, not restored.
//   - Labels are set after the span has started and restored before it
//     ends, so a sample labelled with a span on the goroutine that started
//     it lies within the span's [start, end).
//   - Go copies a goroutine's labels to each goroutine it creates, at the
//     go statement. A goroutine started while a span is current on its
//     creator carries that span's labels for as long as it runs or until it
//     sets labels of its own, even after the span has ended: its work is
//     attributed to the span that caused it. A goroutine created elsewhere
//     (a pool worker, the net/http server's connection goroutines) does not
//     inherit anything: start a span in it, or call pprof.SetGoroutineLabels
//     with the span's context.
//   - End called on another goroutine than Start's sets the ending
//     goroutine's labels to the parent's (overwriting what it had), and the
//     starting goroutine keeps the span's labels until it changes them
//     itself: samples of that goroutine are attributed to an ended span.
//     End a span on the goroutine that started it; a span whose end is
//     decided elsewhere (a callback, a stream) should be ended there by a
//     signal, or started on the goroutine that will end it.
//   - A second End changes no labels (it would undo a later span's).
//   - A span that will not be exported (not recording, such as the spans of
//     a no-op or never-sampling provider, or recording but not sampled)
//     changes no labels: a profiler could not find its id among the spans
//     it receives. Its work stays attributed to the nearest exported span
//     above it in the context, whose labels the goroutine keeps.
//
// The span in the returned context is the wrapper's, so that ending it
// through trace.SpanFromContext restores labels too, and its TracerProvider
// is the wrapper, so that instrumentation that starts child spans from the
// span in a context (as otelhttp does) labels them. The consequences: a
// type assertion of a span from Start or from a context to an SDK type
// (sdktrace.ReadWriteSpan) fails, and the SDK, not finding its own span as
// the parent in the context, does not count the child in the parent's
// ChildSpanCount (which OTLP does not export).
//
// Cost: a span start allocates the wrapper, the hex ids, the label set and
// two context values, and calls into the runtime twice: BenchmarkStartEnd
// measured about 0.4 µs and 6 allocations per span over the SDK's own
// 0.8 µs and 2 (AMD EPYC, no span processor).
//
// This is what Pyroscope's otel-profiling-go does for Go's own profiler,
// with these differences: every span is labelled, not only local roots,
// since a sampling profiler that reads labels at sample time wants the
// innermost span; labels hold the span and trace ids, not the span name;
// the wrapper span is the one in the context; and a second End is harmless.
package spanlabels
