package analysis

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/perfprof/perfprof/internal/wire"
)

// LegacyName returns the TRC name of a legacy record code, the name Scan
// presents it under, so that counts and --kinds filters read the same for
// both formats.
func LegacyName(c wire.LegacyCode) string {
	if s, ok := legacySchemas[c]; ok {
		return s.Name
	}
	return c.String()
}

// legacyClock turns the u32 µs timestamps of a legacy file into ns,
// unwrapping the 71-minute wrap-around.
type legacyClock struct {
	last  uint32
	epoch uint64
	seen  bool
}

func (c *legacyClock) ns(us uint32) uint64 {
	if c.seen && us < c.last && c.last-us > 1<<31 {
		c.epoch += 1 << 32
	}
	if !c.seen || us > c.last || c.last-us > 1<<31 {
		c.last = us
	}
	c.seen = true
	return (c.epoch + uint64(us)) * 1000
}

// splitLoc splits a CallframeDef location "file:line" (line optional).
func splitLoc(loc string) (string, int) {
	if i := strings.LastIndexByte(loc, ':'); i > 0 {
		if n, err := strconv.Atoi(loc[i+1:]); err == nil {
			return loc[:i], n
		}
	}
	return loc, 0
}

// decodeLegacy reads a TOKIOTRC file into b.
func (b *builder) decodeLegacy(r io.Reader) error {
	lr, err := wire.NewLegacyReader(r)
	if err != nil {
		return err
	}
	b.info.Version = lr.Version()
	names := map[uint32]string{}
	locs := map[uint16]string{}
	var clk legacyClock
	var rec wire.LegacyRecord
	counts := map[wire.LegacyCode]int64{}
	defer func() {
		for c, n := range counts {
			b.t.Counts[LegacyName(c)] += n
			b.info.Events += n
		}
	}()
	for {
		err := lr.Read(&rec)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				b.info.Truncated = true
				b.t.Warnings = append(b.t.Warnings, fmt.Sprintf("%s: truncated (the records before it are kept): %v", b.info.Path, err))
				return nil
			}
			return err
		}
		counts[rec.Code]++
		switch rec.Code {
		case wire.LegacyPollStart:
			ts := clk.ns(rec.TsUs)
			b.time(ts)
			b.pollStart(ts, uint64(rec.Worker), uint64(rec.TaskID), locs[rec.SpawnLocID])
		case wire.LegacyPollEnd:
			ts := clk.ns(rec.TsUs)
			b.time(ts)
			b.pollEnd(ts, uint64(rec.Worker))
		case wire.LegacyWorkerPark:
			ts := clk.ns(rec.TsUs)
			b.time(ts)
			b.park(ts, uint64(rec.Worker), 0)
		case wire.LegacyWorkerUnpark:
			ts := clk.ns(rec.TsUs)
			b.time(ts)
			b.unpark(ts, uint64(rec.Worker), uint64(rec.SchedWaitUs)*1000, 0)
		case wire.LegacySpawnLocationDef:
			locs[rec.SpawnLocID] = rec.Name
		case wire.LegacyThreadNameDef:
			names[rec.Tid] = rec.Name
		case wire.LegacyCallframeDef:
			f := Frame{Func: rec.Symbol}
			if rec.HasLocation {
				f.File, f.Line = splitLoc(rec.Location)
			}
			b.symbol(rec.Addr, 0, f)
		case wire.LegacyCpuSample:
			ts := clk.ns(rec.TsUs)
			b.time(ts)
			s := Sample{Time: ts, Worker: uint32(rec.Worker), CPU: -1, Link: -1}
			if rec.Source == SourceOffCPU {
				s.Source = SourceOffCPU
			}
			s.Thread = b.thread(rec.Tid, 0, names[rec.Tid])
			s.Stack = b.internStack(rec.Frames)
			b.t.Samples = append(b.t.Samples, s)
		case wire.LegacySegmentMetadata:
			for _, kv := range rec.Metadata {
				b.info.Metadata = append(b.info.Metadata, KV{kv.Key, kv.Value})
				b.t.Metadata[kv.Key] = kv.Value
			}
		case wire.LegacyQueueSample, wire.LegacyWakeEvent:
			b.time(clk.ns(rec.TsUs))
		case wire.LegacyTaskSpawn, wire.LegacyTaskTerminate:
			if lr.Version() >= 15 {
				b.time(clk.ns(rec.TsUs))
			}
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
