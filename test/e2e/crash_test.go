package e2e

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/perfprof/perfprof/internal/analysis"
	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/internal/wire"
)

const (
	crashKills      = 3
	crashPerRequest = 100 // spans per OTLP request: one batch of the exporter
	crashMaxFile    = 512 << 10
	crashMaxTotal   = 2 << 20 // small enough for retention to delete segments during the test
)

var crashSegName = regexp.MustCompile(`^trace\.(\d+)\.bin(\.active)?$`)

// TestCollectorCrashRestart runs the collector with the tracefile exporter
// (1 s rotation, 1 MiB retention, no queue, so that an acknowledged OTLP
// request is a batch on disk) under a steady stream of spans from the OTel
// Go SDK's OTLP exporter, SIGKILLs it three times while a request is in
// flight and starts it again on the same directory. It checks that each
// restart seals the interrupted segment readable and counts it, that
// numbering goes on, that retention deletes the oldest segments only, and
// that every acknowledged span is in the files once, with no more than one
// request's spans per kill that were not acknowledged.
func TestCollectorCrashRestart(t *testing.T) {
	dir := t.TempDir()
	otlpAddr := freeAddr(t)
	_, promPortS, _ := strings.Cut(freeAddr(t), ":")
	config := fmt.Sprintf(`
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
exporters:
  tracefile:
    directory: %s
    rotation_interval: 1s
    max_file_size: %d
    max_total_size: %d
    compress: false
service:
  telemetry:
    metrics:
      level: basic
      readers:
        - pull:
            exporter:
              prometheus: {host: 127.0.0.1, port: %s, without_scope_info: true, without_units: true, without_type_suffix: true}
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [tracefile]
`, otlpAddr, dir, crashMaxFile, crashMaxTotal, promPortS)
	start := func() *crashRun {
		// Numbering goes on after the highest number in dir.
		first := maxSegment(t, dir) + 1
		cmd, out := runCollector(t, config, nil)
		waitFor(t, out, "Everything is ready", 30*time.Second)
		return &crashRun{cmd: cmd, out: out, firstN: first}
	}

	rd := &segmentReader{dir: dir, ids: map[string]int{}}
	stopReader := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			rd.pass()
			select {
			case <-stopReader:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	stopReaderOnce := sync.OnceFunc(func() { close(stopReader); <-readerDone })
	t.Cleanup(stopReaderOnce)

	ctx := context.Background()
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(otlpAddr), otlptracegrpc.WithInsecure(),
		otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{Enabled: false}), otlptracegrpc.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Shutdown(ctx)
	snd := &spanSender{exp: exp, acked: map[string]bool{}, failed: map[string]bool{}}
	stopSender := make(chan struct{})
	senderDone := make(chan struct{})

	var emptyN []int // active segments deleted by recovery
	runs := []*crashRun{start()}
	go func() { defer close(senderDone); snd.run(t, stopSender) }()
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	for kill := range crashKills {
		r := runs[len(runs)-1]
		time.Sleep(1500*time.Millisecond + time.Duration(rng.Intn(1500))*time.Millisecond)
		r.spans = scrapeSpans(t, promPortS)
		r.ackedAtScrape = snd.ackedCount()
		// Kill while a request is in flight: in the receiver, the
		// exporter's encoding or its write.
		for !snd.sending.Load() {
			time.Sleep(100 * time.Microsecond)
		}
		time.Sleep(time.Duration(rng.Intn(2000)) * time.Microsecond)
		if err := r.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = r.cmd.Wait()
		r.ackedAtEnd = snd.ackedCount()

		var active []int
		for _, name := range listDir(t, dir) {
			if m := crashSegName.FindStringSubmatch(name); m != nil && m[2] != "" {
				n, _ := strconv.Atoi(m[1])
				active = append(active, n)
			}
		}
		if len(active) > 1 {
			t.Fatalf("kill %d: %d active segments: %v", kill+1, len(active), active)
		}
		next := start()
		runs = append(runs, next)
		// Recovery is done when the collector is ready.
		m := mustScrape(t, "http://127.0.0.1:"+promPortS+"/metrics")
		recovered := m.sum("otelcol_exporter_tracefile_segments", "outcome", "recovered")
		empty := m.sum("otelcol_exporter_tracefile_segments", "outcome", "recovered_empty")
		if empty > 0 {
			emptyN = append(emptyN, active...)
		}
		next.cutBytes = m.sum("otelcol_exporter_tracefile_recovered_cut_bytes")
		next.dropped = m.sum("otelcol_exporter_tracefile_recovered_dropped_events")
		t.Logf("kill %d after %d spans acknowledged: active %v; restart: recovered %d, recovered empty %d, %d bytes and %d whole events cut",
			kill+1, r.ackedAtEnd, active, recovered, empty, next.cutBytes, next.dropped)
		if int(recovered+empty) != len(active) {
			t.Errorf("kill %d: %d active segments left, the restarted collector recovered %d and deleted %d",
				kill+1, len(active), recovered, empty)
		}
		if next.dropped > crashPerRequest {
			t.Errorf("kill %d: recovery cut %d whole events, more than one batch of %d spans", kill+1, next.dropped, crashPerRequest)
		}
		for _, n := range active {
			if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("trace.%d.bin.active", n))); err == nil {
				t.Errorf("kill %d: trace.%d.bin.active is still active after the restart", kill+1, n)
			}
			p := filepath.Join(dir, fmt.Sprintf("trace.%d.bin", n))
			if _, err := os.Stat(p); err == nil {
				if _, err := countSpans(p); err != nil {
					t.Errorf("kill %d: recovered segment: %v", kill+1, err)
				}
			} else if empty == 0 {
				t.Errorf("kill %d: trace.%d.bin.active was neither sealed nor counted as empty", kill+1, n)
			}
		}
		// The new collector's first segment takes a new number.
		deadline := time.Now().Add(10 * time.Second)
		for {
			n, ok := activeSegment(t, dir)
			if ok {
				if n < next.firstN {
					t.Errorf("kill %d: the restarted collector writes trace.%d, a number at or below the %d already used", kill+1, n, next.firstN-1)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("kill %d: the restarted collector opened no segment in 10 s", kill+1)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	time.Sleep(1500 * time.Millisecond)
	close(stopSender)
	<-senderDone
	last := runs[len(runs)-1]
	last.spans = scrapeSpans(t, promPortS)
	if err := last.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := last.cmd.Wait(); err != nil {
		t.Fatalf("the last collector did not stop cleanly: %v", err)
	}
	stopReaderOnce()
	rd.pass()

	rd.mu.Lock()
	defer rd.mu.Unlock()
	snd.mu.Lock()
	defer snd.mu.Unlock()
	for _, e := range rd.errs {
		t.Error(e)
	}
	// Retention deleted the oldest segments, and only sealed ones the
	// reader had read.
	present := map[int]bool{}
	for _, name := range listDir(t, dir) {
		if m := crashSegName.FindStringSubmatch(name); m != nil {
			n, _ := strconv.Atoi(m[1])
			present[n] = true
			if m[2] != "" {
				t.Errorf("%s left active after a clean stop", name)
			}
		}
	}
	var deleted, kept []int
	for n := range rd.read {
		if present[n] {
			kept = append(kept, n)
		} else {
			deleted = append(deleted, n)
		}
	}
	slices.Sort(deleted)
	slices.Sort(kept)
	// The reader saw every number: no segment was deleted unread.
	top := slices.Max(slices.Concat(deleted, kept))
	for n := 0; n <= top; n++ {
		if _, ok := rd.read[n]; !ok && !slices.Contains(emptyN, n) {
			t.Errorf("trace.%d was never read: deleted by retention before the reader saw it, or never sealed", n)
		}
	}
	if len(deleted) == 0 {
		t.Errorf("retention deleted no segment (max_total_size %d, %d segments)", crashMaxTotal, len(kept))
	} else if len(kept) > 0 && deleted[len(deleted)-1] > kept[0] {
		t.Errorf("retention deleted trace.%d but kept the older trace.%d", deleted[len(deleted)-1], kept[0])
	}
	// Every acknowledged span is in the files, once; the others were in
	// flight at a kill.
	var lost, extra int
	for id := range snd.acked {
		if _, ok := rd.ids[id]; !ok {
			lost++
		}
	}
	for id := range rd.ids {
		if !snd.acked[id] {
			extra++
			if !snd.failed[id] {
				t.Errorf("span %s in the files was never sent", id)
			}
		}
	}
	t.Logf("%d spans acknowledged, %d failed (in flight at a kill or sent while the collector was down); %d read back from %d segments (%d deleted by retention, %d kept); %d duplicates; %d acknowledged lost; %d not acknowledged but written",
		len(snd.acked), len(snd.failed), len(rd.ids), len(rd.read), len(deleted), len(kept), rd.dups, lost, extra)
	if lost > 0 {
		t.Errorf("%d acknowledged spans are not in the files", lost)
	}
	if rd.dups > 0 {
		t.Errorf("%d spans are in the files more than once", rd.dups)
	}
	if extra > crashKills*crashPerRequest {
		t.Errorf("%d spans not acknowledged are in the files: more than one request per kill", extra)
	}
	// What each collector counted as written is in its segments: exactly
	// for the last one, stopped cleanly; for a killed one, at least what
	// it reported before the kill and at most what it was sent after.
	for i, r := range runs {
		hi := int(^uint(0) >> 1)
		if i+1 < len(runs) {
			hi = runs[i+1].firstN
		}
		var spans int64
		for n, c := range rd.read {
			if n >= r.firstN && n < hi {
				spans += int64(c)
			}
		}
		t.Logf("collector %d (segments %d..%d): %d spans reported written, %d in its segments", i+1, r.firstN, hi-1, r.spans, spans)
		if i == len(runs)-1 {
			if spans != r.spans {
				t.Errorf("collector %d: reported %d spans written, its segments hold %d", i+1, r.spans, spans)
			}
			continue
		}
		if max := r.spans + int64(r.ackedAtEnd-r.ackedAtScrape) + crashPerRequest; spans < r.spans || spans > max {
			t.Errorf("collector %d: its segments hold %d spans; it reported %d before the kill, and at most %d can have been written",
				i+1, spans, r.spans, max)
		}
	}
}

// crashRun is one run of the collector.
type crashRun struct {
	cmd                       *exec.Cmd
	out                       *syncBuffer
	firstN                    int   // number of its first segment
	spans                     int64 // spans it reported written (the last scrape)
	ackedAtScrape, ackedAtEnd int
	cutBytes, dropped         int64 // what its recovery cut at start
}

// spanSender sends requests of crashPerRequest spans with unique ids over
// OTLP/gRPC, one at a time, and records which were acknowledged.
type spanSender struct {
	exp     sdktrace.SpanExporter
	sending atomic.Bool
	mu      sync.Mutex
	acked   map[string]bool
	failed  map[string]bool
	nacked  int
}

func (s *spanSender) ackedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nacked
}

func (s *spanSender) run(t *testing.T, stop chan struct{}) {
	res := resource.NewSchemaless(attribute.String(convention.ServiceName, "crash"), attribute.Int(convention.ProcessPid, os.Getpid()))
	var seq uint64
	for {
		select {
		case <-stop:
			return
		default:
		}
		stubs := make(tracetest.SpanStubs, crashPerRequest)
		ids := make([]string, crashPerRequest)
		now := time.Now()
		for i := range stubs {
			seq++
			var tid trace.TraceID
			var sid trace.SpanID
			binary.BigEndian.PutUint64(tid[8:], seq/16+1)
			binary.BigEndian.PutUint64(sid[:], seq)
			stubs[i] = tracetest.SpanStub{
				Name:        "crash-span",
				SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}),
				StartTime:   now.Add(time.Duration(i) * time.Microsecond),
				EndTime:     now.Add(time.Duration(i+1) * time.Microsecond),
				Attributes:  []attribute.KeyValue{attribute.Int(convention.ThreadID, 1000+i%8)},
				Resource:    res,
			}
			ids[i] = sid.String()
		}
		s.sending.Store(true)
		err := s.exp.ExportSpans(context.Background(), stubs.Snapshots())
		s.sending.Store(false)
		s.mu.Lock()
		for _, id := range ids {
			if err == nil {
				s.acked[id] = true
			} else {
				s.failed[id] = true
			}
		}
		if err == nil {
			s.nacked += len(ids)
		}
		s.mu.Unlock()
		if err != nil {
			time.Sleep(20 * time.Millisecond) // the collector is down: wait for it
		} else {
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// segmentReader reads every sealed segment once, soon after it appears,
// before retention deletes it.
type segmentReader struct {
	dir  string
	mu   sync.Mutex
	read map[int]int    // segment number → spans in it
	ids  map[string]int // span id → segment number
	dups int
	errs []string
}

func (r *segmentReader) pass() {
	ents, err := os.ReadDir(r.dir)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errs = append(r.errs, err.Error())
		return
	}
	if r.read == nil {
		r.read = map[int]int{}
	}
	for _, e := range ents {
		m := crashSegName.FindStringSubmatch(e.Name())
		if m == nil || m[2] != "" {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		if _, ok := r.read[n]; ok {
			continue
		}
		var spans int
		info, err := analysis.Scan(filepath.Join(r.dir, e.Name()), func(ev *wire.Event) error {
			if id, _, ok := spanOf(ev); ok {
				if _, ok := r.ids[id]; ok {
					r.dups++
				}
				r.ids[id] = n
				spans++
			}
			return nil
		})
		if errors.Is(err, fs.ErrNotExist) {
			// Deleted by retention between the listing and the read.
			r.errs = append(r.errs, fmt.Sprintf("%s: deleted by retention before the test read it; raise crashMaxTotal", e.Name()))
			continue
		}
		if err == nil && info.Truncated != nil {
			err = info.Truncated
		}
		if err != nil {
			r.errs = append(r.errs, fmt.Sprintf("sealed segment does not read whole: %v", err))
		}
		r.read[n] = spans
	}
}

func countSpans(path string) (int, error) {
	n := 0
	info, err := analysis.Scan(path, func(ev *wire.Event) error {
		if _, _, ok := spanOf(ev); ok {
			n++
		}
		return nil
	})
	if err == nil && info.Truncated != nil {
		err = info.Truncated
	}
	return n, err
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// maxSegment returns the highest segment number in dir, -1 if none.
func maxSegment(t *testing.T, dir string) int {
	hi := -1
	for _, name := range listDir(t, dir) {
		if m := crashSegName.FindStringSubmatch(name); m != nil {
			n, _ := strconv.Atoi(m[1])
			hi = max(hi, n)
		}
	}
	return hi
}

func activeSegment(t *testing.T, dir string) (int, bool) {
	for _, name := range listDir(t, dir) {
		if m := crashSegName.FindStringSubmatch(name); m != nil && m[2] != "" {
			n, _ := strconv.Atoi(m[1])
			return n, true
		}
	}
	return 0, false
}

func scrapeSpans(t *testing.T, port string) int64 {
	return mustScrape(t, "http://127.0.0.1:"+port+"/metrics").sum("otelcol_exporter_tracefile_events", "kind", "span")
}
