// Package htmlview writes a profile as one self-contained HTML file: an
// interactive flamegraph and a per-row (worker or thread) timeline, drawn on
// <canvas> by inline JavaScript. The file loads nothing from the network (no
// CDN, no fonts; a Content-Security-Policy in the page forbids it), so it can
// be mailed, attached to an issue and opened offline.
//
// [Write] aggregates in Go before it serializes, so that a million samples
// become a page of a few megabytes that draws in well under a second:
//
//   - The flamegraph is a pre-merged call tree, one for on-CPU samples (by
//     count) and, when there are off-CPU samples, one for off-CPU time (by
//     [PageSample.Weight] nanoseconds). Frames merge by function (name and file);
//     a node keeps the line that has most of its samples and says how many
//     other lines were merged into it.
//   - The timeline's sample marks are bucketed: per row, per on/off-CPU and
//     per time bucket (the time span divided into at most [maxBuckets]), a
//     count, the weight and one representative stack (the bucket's most
//     frequent one). Bars are kept as given unless there are more than
//     [maxBars], in which case close bars of one row and kind are merged.
//
// The page: clicking a flamegraph frame zooms into it (clicking an ancestor
// or the root, or the reset button, zooms out); the search box highlights
// functions whose name contains the text (case-insensitive) and shows the
// share of samples under them; hovering shows the function, file:line,
// samples and share. The timeline draws one lane per [Row] with its bars and
// its sample marks; hovering a mark shows the bucket's representative stack,
// leaf first (innermost frame on top, like a debugger's backtrace). The mouse
// wheel zooms the timeline, dragging pans it and a double click resets it.
//
// Scoped views. Clicking a span bar scopes the flamegraph to that span's
// samples: those linked to it or to a span below it, as internal/analysis
// defines them; clicking a poll bar, or dragging over a lane with Shift
// held, scopes it to that lane's samples with start <= time < end. The on/off
// switch applies. A header above the flamegraph names the span (trace id,
// duration, samples) and gives its wall-time breakdown: on-CPU, off-CPU
// blocked, off-CPU runnable and not observed, in ms with 3 decimals and %
// of the wall time. A span's breakdown is the caller's ([Span.Breakdown],
// from analysis, so that the page shows what `perfprof report` prints);
// for a poll or a range the page computes it the same way (wall = end −
// start). Esc, the "whole trace" button or a click on the root frame go
// back to the whole trace. The spans panel lists [Data.SpanNames] (count,
// p50/p95/p99/max, total wall time and its breakdown); clicking a name
// shows the flamegraph of all spans of the name (with the name's
// breakdown) and lists its 10 slowest spans, each a click away; "slow vs
// typical" draws the slowest 10% (rounded up) of the name's spans against
// the rest: widths are the slow spans' samples, and a frame is red when
// its share of the slow spans' samples is larger than its share of the
// typical spans', blue when smaller (hover shows both).
//
// Scoped trees need the samples one by one, so the page also carries
// compact columns (scope.go: per sample its lane, time, the node of the
// tree of all samples its stack ends at, span, on/off-CPU and state,
// off-CPU ns; per span its parent, name, trace, times and breakdown),
// gzipped and base64-encoded, which the page inflates with the browser's
// DecompressionStream after its first draw. A scoped tree is cut from the
// tree of all samples, so it has the Go trees' shape and the flamegraph's
// drawing code draws it (its lines are those of the tree of all samples).
// The page keeps the [maxSpans] longest spans; a sample of a span left out
// counts for the nearest kept span above it, the page says how many it
// left out, and a bar of one says so when clicked. A million samples in
// 20 000 request spans make a 2.8 MB page whose selections redraw within
// about 25 ms (cmd/perfprof's TestHTMLSpans1M).
//
// For tests the page publishes its state in the global window.perfprofView
// (ready, timings, zoomed frame, search matches, hovered mark, and helpers
// that locate frames and marks on the canvases); element ids are stable:
// #search, #search-result, #reset, #mode-on, #mode-off, #flame, #zoom-path,
// #timeline, #tooltip, #scope, #scope-back, #spans-table (rows
// tr.span-name[data-name] with td[data-col] cells and a .diff-btn; the
// slowest spans as .slow-span[data-span] buttons). For the scoped views:
// detailReady and detailMs (the columns inflated), scope (what the
// flamegraph shows: kind span/name/range/diff, name, traceId, samples,
// onSamples, offSamples, breakdown in ns, header text, and selectMs, from
// the click's event time to the flamegraph drawn), selections (a count),
// diff (the differential view's frames by difference of shares),
// findSpan, findBar, barPoint, barInfo, spanBars, lanePoint, showRange,
// fullRange, and selectSpan, selectName, selectDiff, selectRange, unscope
// to select without the mouse. test/browser/check.mjs drives the page in
// headless Chromium.
//
// The package is not a trace reader: internal/analysis decodes trace files
// and symbolizes, and [FromTrace] turns its Trace into [Data] (timeline rows,
// bars, samples, spans and their breakdowns); cmd/perfprof only wires them.
package htmlview
