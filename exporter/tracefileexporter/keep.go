package tracefileexporter

import (
	"fmt"
	"os"

	"go.uber.org/zap"

	"github.com/perfprof/perfprof/exporter/tracefileexporter/internal/keep"
)

// startKeep makes the keeper of the keep rules, if any. Called with mu
// held, before the rotator is made.
func (e *traceFile) startKeep() error {
	c := e.cfg.Keep
	if len(c.Rules) == 0 {
		return nil
	}
	rules := make([]keep.Rule, len(c.Rules))
	for i, r := range c.Rules {
		rules[i] = keep.Rule{SpanName: r.SpanName, MinDuration: r.MinDuration, Percentile: r.Percentile}
	}
	k, err := keep.New(keep.Options{
		Dir:        e.cfg.Directory,
		FilePrefix: e.cfg.FilePrefix,
		Compressed: e.cfg.Compress,
		Rules:      rules,
		Lookback:   c.Lookback,
		Settle:     c.Settle,
		For:        c.For,
		MaxBytes:   int64(c.MaxSize),
		BootID:     bootID(),
		FileMode:   os.FileMode(e.cfg.FileMode),
		Now:        e.now,
		Counts:     e.counts,
		OnError:    func(err error) { e.logError("keep", err) },
	})
	if err != nil {
		return fmt.Errorf("tracefile: %w", err)
	}
	e.keeper = k
	return nil
}

func (e *traceFile) stopKeep() {
	if e.keeper == nil {
		return
	}
	if err := e.keeper.Close(); err != nil {
		e.logger.Warn("tracefile: closing the keep range log", zap.Error(err))
	}
	e.keeper = nil
}

// offerKeep offers the batch's spans to the keep rules, and notes the
// times of its events for the segment it goes into. Called with mu held,
// the batch sorted.
func (e *traceFile) offerKeep(b *batch) {
	clk := e.clk.Fixed()
	e.batchFrom, e.batchTo = 0, 0
	if n := len(b.evs); n > 0 {
		e.batchFrom, e.batchTo = int64(clk.Unix(b.evs[0].ts)), int64(clk.Unix(b.evs[n-1].ts))
	}
	for i := range b.spans {
		s := &b.spans[i]
		e.keeper.Offer(keep.Span{
			Name: s.name, Service: s.service,
			TraceID: s.trace, SpanID: s.span,
			Start: int64(clk.Unix(s.start)), End: int64(clk.Unix(s.end)),
		})
	}
}
