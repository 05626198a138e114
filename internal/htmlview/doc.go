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
//     [Sample.Weight] nanoseconds). Frames merge by function (name and file);
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
// For tests the page publishes its state in the global window.perfprofView
// (ready, timings, zoomed frame, search matches, hovered mark, and helpers
// that locate frames and marks on the canvases); element ids are stable:
// #search, #search-result, #reset, #mode-on, #mode-off, #flame, #zoom-path,
// #timeline, #tooltip. test/browser/check.mjs drives the page in headless
// Chromium.
//
// The package is not a trace reader: the caller (cmd/perfprof) decodes trace
// files, symbolizes and fills [Data].
package htmlview
