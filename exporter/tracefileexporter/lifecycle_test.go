package tracefileexporter

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/exporter/xexporter"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/perfprof/perfprof/exporter/tracefileexporter/internal/metadata"
	"github.com/perfprof/perfprof/exporter/tracefileexporter/tracefiletest"
	"github.com/perfprof/perfprof/internal/testchild"
	"github.com/perfprof/perfprof/internal/wire"
)

// TestLifecycleSharedInstance: the traces and profiles exporters of one
// component ID write into the same segments, which are sealed only when
// both have shut down.
func TestLifecycleSharedInstance(t *testing.T) {
	dir := t.TempDir()
	cfg := createDefaultConfig()
	cfg.Directory = dir
	te, pe := newSignals(t, cfg)
	host := componenttest.NewNopHost()
	require.NoError(t, te.Start(t.Context(), host))
	require.NoError(t, pe.Start(t.Context(), host))

	b, tr, _ := buildTestData()
	require.NoError(t, pe.ConsumeProfiles(t.Context(), b.Profiles))
	require.NoError(t, te.ConsumeTraces(t.Context(), tr))
	require.NoError(t, te.Shutdown(t.Context()))
	assert.Empty(t, segmentFiles(t, dir), "sealed while the profiles exporter still runs")
	require.NoError(t, pe.Shutdown(t.Context()))

	segs := segmentFiles(t, dir)
	require.Len(t, segs, 1)
	kinds := map[string]int{}
	for _, ev := range readTRC(t, segs[0]) {
		kinds[ev.Name()]++
	}
	assert.Equal(t, 7, kinds["CpuSampleEvent"])
	assert.Equal(t, 3, kinds[wire.NameSpanCloseOTel])
	assert.Zero(t, instances.Len(), "instance kept after shutdown")
}

// TestStartUnwritableDirectory: a directory that cannot be created or
// written fails the start with an error naming it.
func TestStartUnwritableDirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "plainfile")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	f := NewFactory()
	cfg := f.CreateDefaultConfig().(*Config)
	cfg.Directory = filepath.Join(file, "traces")
	te, err := f.CreateTraces(t.Context(), exportertest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	err = te.Start(t.Context(), componenttest.NewNopHost())
	require.Error(t, err)
	assert.Contains(t, err.Error(), cfg.Directory)
	require.NoError(t, te.Shutdown(t.Context()))
}

// TestRotation writes many segments by size and by time through the
// exporter: retention keeps the directory under max_total_size, and every
// sealed segment reads back completely with its own clock sync, metadata
// and symbols.
func TestRotation(t *testing.T) {
	for _, format := range []string{FormatTRC, FormatTokioTRC} {
		t.Run(format, func(t *testing.T) {
			dir := t.TempDir()
			const maxTotal = 96 << 10
			// The segments' wall clock, moved by the test: the time
			// phase below spans seconds of it in no time.
			var wall atomic.Int64
			wall.Store(time.Now().UnixNano())
			now := func() time.Time { return time.Unix(0, wall.Load()) }
			e := startTestFileClock(t, dir, func(c *Config) {
				c.Format = format
				c.MaxFileSize = 8 << 10
				c.MaxTotalSize = maxTotal
				c.RotationInterval = time.Second
			}, exportertest.NewNopSettings(metadata.Type), now)
			b := tracefiletest.NewProfBuilder()
			var stacks []int32
			for i := range 20 {
				var locs []int32
				for j := range 16 {
					locs = append(locs, b.Location(uint64(0x400000+i*0x100+j), tracefiletest.F(fmt.Sprintf("f%d_%d", i, j), "/x.c", int64(j+1))))
				}
				stacks = append(stacks, b.Stack(locs...))
			}
			thread := []int32{b.Attr("thread.id", 7), b.Attr("thread.name", "w")}
			push := func(n int) {
				pd := pprofile.NewProfiles()
				b.Profiles.CopyTo(pd)
				p := pd.ResourceProfiles().AppendEmpty().ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
				p.SampleType().SetTypeStrindex(b.Str("samples"))
				now := uint64(wall.Load())
				for i := range n {
					s := p.Samples().AppendEmpty()
					s.SetStackIndex(stacks[i%len(stacks)])
					s.AttributeIndices().FromRaw(thread)
					s.TimestampsUnixNano().Append(now + uint64(i))
					s.Values().Append(1)
				}
				require.NoError(t, e.pushProfiles(t.Context(), pd))
			}
			// By size: 60 batches of 40 samples.
			for range 60 {
				push(40)
			}
			// By time: small batches across three wall-clock seconds.
			for range 31 {
				push(1)
				wall.Add(int64(100 * time.Millisecond))
			}
			require.NoError(t, e.shutdown(t.Context()))

			segs := segmentFiles(t, dir)
			sealed, deleted := e.counts.Load(cSealed), e.counts.Load(cDeleted)
			t.Logf("%s: %d sealed, %d deleted by retention, %d kept", format, sealed, deleted, len(segs))
			assert.Greater(t, sealed, int64(15))
			assert.Positive(t, deleted)
			var total int64
			small := 0
			for _, path := range segs {
				if format == FormatTRC {
					total += rawSize(t, path)
					evs := readTRC(t, path)
					syms := symbolTable(evs)
					require.Equal(t, "ClockSyncEvent", evs[0].Name(), "%s starts with a clock sync", path)
					hasMeta := false
					samples := 0
					for _, ev := range evs {
						switch ev.Name() {
						case "SegmentMetadataEvent":
							hasMeta = true
						case "CpuSampleEvent":
							samples++
							for _, a := range ev.Field("callchain").Frames {
								require.NotEmpty(t, syms[a], "%s: address %#x has no symbol in the segment", path, a)
							}
						}
					}
					assert.True(t, hasMeta, path)
					if samples < 40 {
						small++
					}
				} else {
					recs := readLegacy(t, path)
					total += rawSize(t, path)
					defs, threads := map[uint64]bool{}, map[uint32]bool{}
					samples := 0
					for _, r := range recs {
						switch r.Code {
						case wire.LegacyCallframeDef:
							defs[r.Addr] = true
						case wire.LegacyThreadNameDef:
							threads[r.Tid] = true
						case wire.LegacyCpuSample:
							samples++
							require.True(t, threads[r.Tid], "%s: thread %d used before its ThreadNameDef", path, r.Tid)
							for _, a := range r.Frames {
								require.True(t, defs[a], "%s: address %#x used before its CallframeDef", path, a)
							}
						}
					}
					if samples < 40 {
						small++
					}
				}
			}
			assert.LessOrEqual(t, total, int64(maxTotal), "retention bound")
			assert.GreaterOrEqual(t, small, 2, "segments sealed by time, holding less than a batch of the size phase")
		})
	}
}

// rawSize is the uncompressed size of a segment, the measure of max_total_size.
func rawSize(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		require.NoError(t, err)
		r = zr
	}
	n, err := io.Copy(io.Discard, r)
	require.NoError(t, err)
	return n
}

// TestDiskFull fills a small tmpfs: writes fail with ENOSPC and the error
// reaches the pipeline, sealed segments stay intact, and writing resumes
// once space is freed, with nothing of the failed batches in any file.
func TestDiskFull(t *testing.T) {
	testchild.NeedRoot(t, "mounting a tmpfs")
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", mnt).Run() })
	dir := filepath.Join(mnt, "traces")

	// The whole exporter, without retry or queue, so that the error of a
	// push comes back from ConsumeProfiles.
	f := NewFactory()
	cfg := f.CreateDefaultConfig().(*Config)
	cfg.Directory = dir
	cfg.MaxFileSize = 32 << 10
	cfg.MaxTotalSize = 0
	cfg.Compress = false
	require.False(t, cfg.RetryConfig.Enabled, "retry is off by default")
	require.False(t, cfg.QueueConfig.HasValue(), "the queue is off by default")
	pe, err := f.(xexporter.Factory).CreateProfiles(t.Context(), exportertest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	require.NoError(t, pe.Start(t.Context(), componenttest.NewNopHost()))

	b := tracefiletest.NewProfBuilder()
	var locs []int32
	for j := range 16 {
		locs = append(locs, b.Location(uint64(0x400000+j*16), tracefiletest.F(fmt.Sprintf("g%d", j), "/g.c", 1)))
	}
	stack := b.Stack(locs...)
	attrs := []int32{b.Attr("thread.id", 9)}
	seq := uint64(0)
	batch := func() pprofile.Profiles {
		pd := pprofile.NewProfiles()
		b.Profiles.CopyTo(pd)
		p := pd.ResourceProfiles().AppendEmpty().ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
		s := p.Samples().AppendEmpty()
		s.SetStackIndex(stack)
		s.AttributeIndices().FromRaw(attrs)
		base := uint64(time.Now().UnixNano())
		for range 200 {
			s.TimestampsUnixNano().Append(base + seq)
			s.Values().Append(1)
			seq++
		}
		return pd
	}
	written := 0
	var fullErr error
	for range 1000 {
		if err := pe.ConsumeProfiles(t.Context(), batch()); err != nil {
			fullErr = err
			break
		}
		written += 200
	}
	require.Error(t, fullErr, "the disk never filled")
	require.True(t, errors.Is(fullErr, syscall.ENOSPC), "error %v is not ENOSPC", fullErr)
	t.Logf("disk full after %d samples: %v", written, fullErr)
	// More failures while full, then free space by removing sealed segments.
	for range 3 {
		require.Error(t, pe.ConsumeProfiles(t.Context(), batch()))
	}
	sealed := segmentFiles(t, dir)
	require.NotEmpty(t, sealed)
	kept := 0
	for _, p := range sealed {
		for _, ev := range readTRC(t, p) {
			if ev.Name() == "CpuSampleEvent" {
				kept++
			}
		}
	}
	for _, p := range sealed[:len(sealed)/2+1] {
		require.NoError(t, os.Remove(p))
	}
	// Writing resumes.
	for range 3 {
		require.NoError(t, pe.ConsumeProfiles(t.Context(), batch()))
	}
	require.NoError(t, pe.Shutdown(t.Context()))

	total := 0
	for _, p := range segmentFiles(t, dir) {
		for _, ev := range readTRC(t, p) {
			if ev.Name() == "CpuSampleEvent" {
				total++
			}
		}
	}
	// Every file left reads completely (readTRC fails otherwise), and the
	// samples in it are whole batches: the failed ones left nothing.
	assert.Zero(t, total%200, "a partial batch in the files: %d samples", total)
	assert.Positive(t, kept)
	assert.GreaterOrEqual(t, total, 600, "the batches written after space was freed")
}

// TestPushBeforeStart: data that arrives before start is refused, not lost silently.
func TestPushBeforeStart(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.Directory = t.TempDir()
	e, err := newTraceFile(cfg, exportertest.NewNopSettings(metadata.Type))
	require.NoError(t, err)
	b, tr, _ := buildTestData()
	require.ErrorIs(t, e.pushProfiles(t.Context(), b.Profiles), errNotStarted)
	require.ErrorIs(t, e.pushTraces(t.Context(), tr), errNotStarted)
}
