// Package tidmap is the index behind the join: it holds span intervals per
// OS thread and answers "which span was running on thread tid at time t".
//
// The answer is the innermost span covering t: of the spans added for tid
// with Start <= t < End, the one with the latest Start. Among spans with the
// same Start the shorter one is innermost (it ends first, so it can only be
// nested in the longer one); spans with the same Start and End are ordered by
// (TraceID, SpanID), the greater one innermost. The choice never depends on
// the order in which spans were added.
//
// Spans arrive late and out of order (SDKs batch for seconds and end children
// before their parents), and samples are joined in batches once a watermark
// has passed them. So [Map.Add] only appends to an unsorted buffer per
// thread, and the first [Map.Lookup] on a thread after changes rebuilds that
// thread's sorted view: spans ordered by Start and, for each, the position of
// its enclosing span (the innermost span that covers its Start). A lookup is
// a binary search for the last span with Start <= t and a walk up the
// enclosing chain to the first span that has not ended by t. Any span that
// covers t and starts no later than span i also covers Start_i, so that chain
// enumerates, innermost first, exactly the candidates. Lookups do not
// allocate.
//
// Times are CLOCK_MONOTONIC nanoseconds, the clock perf samples carry; the
// caller converts span times from Unix time. Keying by (tid, time) copes with
// the kernel reusing tids, since spans are bounded in time; [Map.Forget]
// drops spans behind the watermark, and with them the state of threads that
// hold no spans any more.
//
// The map also answers [Map.LocalRoot] (the local root of a span, through
// the spans held on any thread) and [Map.Worker] (the runtime worker id
// last seen on a thread).
//
// This package knows nothing of OTLP or the collector, and does not convert
// clocks. A Map is not safe for concurrent use: the receiver serializes calls
// under its own mutex.
package tidmap
