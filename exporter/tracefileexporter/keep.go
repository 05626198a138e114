package tracefileexporter

import (
	"fmt"
	"os"
	"time"

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

// offerKeep offers the batch's spans to the keep rules, and notes when
// its events are (intervals joined across gaps under keepGap) for the
// segment it goes into. Called with mu held, the batch sorted.
func (e *traceFile) offerKeep(b *batch) {
	clk := e.clk.Fixed()
	ivs := e.batchTimes[:0]
	for _, ev := range b.evs {
		t := int64(clk.Unix(ev.ts))
		if n := len(ivs); n > 0 && t-ivs[n-1][1] <= int64(keepGap) {
			ivs[n-1][1] = max(ivs[n-1][1], t)
			continue
		}
		ivs = append(ivs, [2]int64{t, t})
	}
	e.batchTimes = ivs
	for i := range b.spans {
		s := &b.spans[i]
		e.keeper.Offer(keep.Span{
			Name: s.name, Service: s.service,
			TraceID: s.trace, SpanID: s.span,
			Start: int64(clk.Unix(s.start)), End: int64(clk.Unix(s.end)),
		})
	}
}

// keepGap: events of a batch closer than this are one interval of its
// segment's times.
const keepGap = 50 * time.Millisecond
