package profiler

import (
	"errors"
	"fmt"
	"time"

	"github.com/perfprof/perfprof/internal/limits"
	"github.com/perfprof/perfprof/internal/otelctx"
)

// processContextInterval is how often a process's published context is
// read again: SDKs publish it at start and seldom change it.
const processContextInterval = 10 * time.Second

// processContext returns the resource attributes the process publishes
// (OTEP 4719), nil when none, read again at most every
// processContextInterval; a process that is gone keeps what was read, or
// is read once if it never was (the profiler's Close marks live processes
// gone, and a process that runs little may have had no samples before).
// A read that fails for another reason than "not published" (the process
// updating it, a read error) is tried again at the next report.
// announce is true when a new publication names a thread-context schema:
// OTEP 4947 asks readers to look for the thread-local variable again then
// (it may be in a library loaded since the process was attached). A
// process whose data reaches a bound (a memory map too long to read) is
// counted in rec, and read as one that publishes nothing.
func (st *procState) processContext(gone bool, rec *limits.Recorder) (attrs map[string]any, announce bool) {
	st.pctxMu.Lock()
	defer st.pctxMu.Unlock()
	if (gone && !st.pctxRead.IsZero()) || time.Since(st.pctxRead) < processContextInterval {
		return st.pctx, false
	}
	r, err := otelctx.ProcessContext(st.info.Pid)
	bound := rec.Record(fmt.Sprintf("pid %d", st.info.Pid), err)
	if err == nil || bound || errors.Is(err, otelctx.ErrNotPublished) {
		st.pctxRead = time.Now()
	}
	switch {
	case err == nil:
		st.pctx = r.Attributes
		announce = r.PublishedAt != st.pctxAt && r.SchemaVersion() != ""
		st.pctxAt = r.PublishedAt
	case bound || errors.Is(err, otelctx.ErrNotPublished):
		st.pctx = nil
	}
	// Other errors (the process exited, a context being updated) keep
	// what was read.
	return st.pctx, announce
}
