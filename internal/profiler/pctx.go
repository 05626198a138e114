package profiler

import (
	"errors"
	"time"

	"github.com/perfprof/perfprof/internal/otelctx"
)

// processContextInterval is how often a process's published context is
// read again: SDKs publish it at start and seldom change it.
const processContextInterval = 10 * time.Second

// processContext returns the resource attributes the process publishes
// (OTEP 4719), nil when none, read again at most every
// processContextInterval; a process that is gone keeps what was read.
func (st *procState) processContext(gone bool) map[string]any {
	st.pctxMu.Lock()
	defer st.pctxMu.Unlock()
	if gone || time.Since(st.pctxRead) < processContextInterval {
		return st.pctx
	}
	st.pctxRead = time.Now()
	r, err := otelctx.ProcessContext(st.info.Pid)
	switch {
	case err == nil:
		st.pctx = r.Attributes
	case errors.Is(err, otelctx.ErrNotPublished):
		st.pctx = nil
	}
	// Other errors (the process exited, a context being updated) keep
	// what was read.
	return st.pctx
}
