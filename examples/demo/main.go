// Command perfprof-demo is the workload `make run` profiles: a small
// instrumented service. Three worker goroutines, each locked to its own OS
// thread, handle synthetic requests in a loop and trace them with the
// OpenTelemetry Go SDK, so that perfprof can join its CPU samples to the
// spans. The CPU goes to functions with telling names, so that a profile of
// it reads like one of a real program:
//
//	parseRequests   tokenizes synthetic request lines         (~40% of its busy time)
//	checksumBlocks  runs CRC-32 and FNV-1a over data blocks   (~35%)
//	sortBatches     sorts batches of records                  (~25%)
//
// Each request is a root span (kind server) named after its endpoint, with
// one child span per step, each step calling only its function:
//
//	GET /items     parse 4 ms, sort 3 ms
//	POST /upload   parse 3 ms, checksum 5 ms
//	GET /report    parse 1 ms, checksum 2 ms, sort 2 ms
//
// Every worker takes the endpoints in turn and, after each request, sleeps
// so that it works 30% of the time: the three together keep about 0.9 CPU
// busy. The tracer provider is wrapped with pkg/spanlabels, so each worker
// goroutine carries its running span as pprof labels (span_id, trace_id),
// which perfprof's eBPF program reads at every sample. Every span also
// carries the int64 attributes thread.id (gettid of its worker's thread)
// and worker.id (0, 1, 2), which perfprof joins on without eBPF; root
// spans also carry http.request.method and http.route. The resource has
// service.name perfprof-demo and process.pid.
//
// Spans go over OTLP/gRPC (insecure) to localhost:4317, or to the host:port
// of OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT, or of
// -endpoint, every second. Without a listener the demo keeps running and
// the SDK drops the spans (the first export error and then one a minute go
// to stderr).
//
// It runs until SIGINT or SIGTERM, or for -duration, then flushes the spans
// (waiting at most 3 s) and exits 0.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"hash/crc32"
	"math/rand"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/pkg/spanlabels"
)

// tokenize counts the fields of a request line. It iterates over them
// rather than building a slice, so that the demo does not spend its time
// in the garbage collector.
//
//go:noinline
func tokenize(line []byte) int {
	n := 0
	for range bytes.FieldsSeq(line) {
		n++
	}
	return n
}

//go:noinline
func parseRequests(lines [][]byte) int {
	n := 0
	for _, l := range lines {
		n += tokenize(l)
	}
	return n
}

//go:noinline
func crcBlock(b []byte) uint32 { return crc32.ChecksumIEEE(b) }

//go:noinline
func fnvBlock(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

//go:noinline
func checksumBlocks(blocks [][]byte) int {
	n := 0
	for _, b := range blocks {
		n += int(crcBlock(b)) + int(fnvBlock(b))
	}
	return n
}

type record struct {
	key   uint64
	value string
}

//go:noinline
func sortBatches(rng *rand.Rand, n int) int {
	batch := make([]record, n)
	for i := range batch {
		batch[i] = record{key: rng.Uint64(), value: "v"}
	}
	sort.Slice(batch, func(i, j int) bool { return batch[i].key < batch[j].key })
	return int(batch[0].key & 1)
}

// A step of a request: a child span that runs one function for a while.
type step struct {
	name   string
	budget time.Duration
}

type endpoint struct {
	method, route string
	steps         []step
}

// The endpoints and their steps. Over one request of each, parse gets 8 ms,
// checksum 7 ms and sort 5 ms: 40%, 35% and 25%.
var endpoints = []endpoint{
	{"GET", "/items", []step{{"parse", 4 * time.Millisecond}, {"sort", 3 * time.Millisecond}}},
	{"POST", "/upload", []step{{"parse", 3 * time.Millisecond}, {"checksum", 5 * time.Millisecond}}},
	{"GET", "/report", []step{{"parse", 1 * time.Millisecond}, {"checksum", 2 * time.Millisecond}, {"sort", 2 * time.Millisecond}}},
}

// duty is the share of its time a worker works; three workers make 0.9 CPU.
const duty = 0.3

type data struct {
	lines  [][]byte
	blocks [][]byte
}

var sinks [3]atomic.Int64

// worker handles requests on its own OS thread until stop is closed.
func worker(tr trace.Tracer, d *data, index int, stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := syscall.Gettid()
	ids := trace.WithAttributes(
		attribute.Int64(convention.ThreadID, int64(tid)),
		attribute.Int64(convention.WorkerID, int64(index)),
	)
	rng := rand.New(rand.NewSource(int64(2 + index)))
	// debt carries each step's overrun (a function call runs to its end)
	// into its next budget, so that the shares hold over time.
	var debt [3][3]time.Duration
	acc := 0
	run := func(name string) {
		switch name {
		case "parse":
			acc += parseRequests(d.lines)
		case "checksum":
			acc += checksumBlocks(d.blocks)
		case "sort":
			acc += sortBatches(rng, 2048)
		}
	}
	bg := context.Background()
	for n := index; ; n++ {
		select {
		case <-stop:
			sinks[index].Store(int64(acc))
			return
		default:
		}
		e := n % len(endpoints)
		ep := endpoints[e]
		start := time.Now()
		ctx, root := tr.Start(bg, ep.method+" "+ep.route, ids,
			trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(
				attribute.String("http.request.method", ep.method),
				attribute.String("http.route", ep.route),
			))
		for i, s := range ep.steps {
			_, span := tr.Start(ctx, s.name, ids)
			t0 := time.Now()
			want := s.budget - debt[e][i]
			for time.Since(t0) < want {
				run(s.name)
			}
			debt[e][i] = time.Since(t0) - want
			span.End()
		}
		root.End()
		busy := time.Since(start)
		time.Sleep(time.Duration(float64(busy) * (1 - duty) / duty))
	}
}

// defaultEndpoint is host:port from the standard OTLP environment variables.
func defaultEndpoint() string {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		v := strings.TrimSpace(os.Getenv(k))
		if v == "" {
			continue
		}
		if strings.Contains(v, "://") {
			if u, err := url.Parse(v); err == nil && u.Host != "" {
				return u.Host
			}
		}
		return strings.TrimSuffix(v, "/")
	}
	return "localhost:4317"
}

// quietErrors prints the SDK's first error, then at most one a minute.
type quietErrors struct {
	mu     sync.Mutex
	last   time.Time
	missed int
}

func (q *quietErrors) Handle(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.last.IsZero() && time.Since(q.last) < time.Minute {
		q.missed++
		return
	}
	more := ""
	if q.missed > 0 {
		more = fmt.Sprintf(" (and %d more since the last report)", q.missed)
	}
	fmt.Fprintf(os.Stderr, "perfprof-demo: otel: %v%s\n", err, more)
	q.last, q.missed = time.Now(), 0
}

func main() {
	duration := flag.Duration("duration", 0, "stop after this long (0: run until interrupted)")
	endpointFlag := flag.String("endpoint", defaultEndpoint(), "OTLP/gRPC endpoint host:port for the spans (insecure)")
	flag.Parse()

	otel.SetErrorHandler(&quietErrors{})
	ctx := context.Background()
	// No retries: a batch that cannot be sent is dropped, and the next one
	// (a second later) tries again, so that a missing collector neither stalls
	// the exporter nor delays the exit.
	exp, err := otlptracegrpc.New(ctx,
		otlptracegrpc.WithEndpoint(*endpointFlag),
		otlptracegrpc.WithInsecure(),
		otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{Enabled: false}),
	)
	if err != nil {
		fmt.Fprintf(os.Stderr, "perfprof-demo: span exporter: %v\n", err)
		os.Exit(1)
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithProcessPID(),
		resource.WithAttributes(attribute.String(convention.ServiceName, "perfprof-demo")),
	)
	if err != nil {
		fmt.Fprintf(os.Stderr, "perfprof-demo: resource: %v\n", err)
		os.Exit(1)
	}
	// Spans leave every second, well inside the receiver's correlation
	// window (5 s in testdata/demo.yaml).
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)),
	)
	// Each goroutine carries the span it runs as pprof labels, which
	// perfprof reads at every sample: exact links, whatever the goroutines
	// do with threads. The thread.id attributes are the fallback.
	tr := spanlabels.NewTracerProvider(tp).Tracer("github.com/perfprof/perfprof/examples/demo")

	rng := rand.New(rand.NewSource(1))
	d := &data{lines: make([][]byte, 256), blocks: make([][]byte, 16)}
	for i := range d.lines {
		d.lines[i] = []byte(fmt.Sprintf("GET /api/v1/items/%d?limit=%d HTTP/1.1 host=example user-agent=demo", rng.Intn(1e6), rng.Intn(100)))
	}
	for i := range d.blocks {
		d.blocks[i] = make([]byte, 16<<10)
		rng.Read(d.blocks[i])
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go worker(tr, d, i, stop, &wg)
	}
	fmt.Fprintf(os.Stderr, "perfprof-demo: pid %d serving GET /items, POST /upload, GET /report (spans to %s)\n", os.Getpid(), *endpointFlag)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	var timeout <-chan time.Time
	if *duration > 0 {
		timeout = time.After(*duration)
	}
	select {
	case <-sig:
	case <-timeout:
	}
	close(stop)
	wg.Wait()
	sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := tp.Shutdown(sctx); err != nil {
		fmt.Fprintf(os.Stderr, "perfprof-demo: flushing spans: %v\n", err)
	}
}
