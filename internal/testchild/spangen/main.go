// Command spangen is the soak test's load: a service whose worker threads
// burn CPU inside OpenTelemetry spans at a fixed total rate, exported over
// OTLP/gRPC with the real OTel Go SDK, and which counts every span it ends
// by what became of it, so that the test can reconcile them with the
// collector's counters.
//
// Flags:
//
//	-threads N      worker goroutines, each locked to its own OS thread (default 8)
//	-rate R         spans per second, all workers together (default 5000)
//	-burn D         CPU burnt inside each span (default 100µs)
//	-duration D     run this long, then flush and exit (0: until SIGINT/SIGTERM)
//	-endpoint H:P   OTLP/gRPC endpoint (insecure)
//	-slow-every N   every Nth span of each worker burns -slow-burn instead (0: none)
//	-slow-burn D    CPU burnt inside a slow span (default 200ms)
//
// Output: "ready PID" once every worker runs; "slow TRACEID SPANID" as each
// slow span ends (same name as the others: only its duration tells it
// apart); on exit, once the tracer
// provider has flushed, "done ENDED EXPORTED FAILED": spans ended, spans in
// export calls that succeeded, and spans in export calls that failed after
// the exporter's retries. The batch span processor blocks instead of
// dropping when its queue is full, so ENDED = EXPORTED + FAILED unless the
// final flush timed out (then the difference is printed as lost).
//
// Every span carries thread.id (gettid of its worker) and worker.id, as the
// tokio and Go instrumentations of perfprof's users do; a worker sleeps
// between spans to keep the rate, so its thread also switches off the CPU
// thousands of times a second, which the scheduler capture sees.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/perfprof/perfprof/internal/convention"
)

var sink uint64

// work burns the CPU for d: the frame the samples inside spans land in.
func work(d time.Duration) {
	end := time.Now().Add(d)
	x := uint64(1)
	for time.Now().Before(end) {
		for i := 0; i < 512; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	atomic.AddUint64(&sink, x)
}

// countingExporter counts the spans of each export call by its outcome.
type countingExporter struct {
	sdktrace.SpanExporter
	exported, failed atomic.Int64
}

func (c *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := c.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		c.failed.Add(int64(len(spans)))
		fmt.Fprintf(os.Stderr, "spangen: export of %d spans: %v\n", len(spans), err)
	} else {
		c.exported.Add(int64(len(spans)))
	}
	return err
}

var ended atomic.Int64

// slowEvery and slowBurn make every slowEvery-th span of a worker burn
// slowBurn.
var (
	slowEvery int
	slowBurn  time.Duration
	printMu   sync.Mutex
)

// worker ends one span every period until stop, pacing by absolute
// deadlines so that a late wake-up does not lower the rate.
func worker(tr trace.Tracer, index int, period, burn time.Duration, stop *atomic.Bool, wg *sync.WaitGroup, ready chan<- struct{}) {
	defer wg.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := syscall.Gettid()
	attrs := trace.WithAttributes(
		attribute.Int64(convention.ThreadID, int64(tid)),
		attribute.Int64(convention.WorkerID, int64(index)),
	)
	ready <- struct{}{}
	next := time.Now()
	for i := 1; !stop.Load(); i++ {
		_, sp := tr.Start(context.Background(), "request", attrs, trace.WithSpanKind(trace.SpanKindServer))
		slow := slowEvery > 0 && i%slowEvery == 0
		if slow {
			work(slowBurn)
		} else {
			work(burn)
		}
		sp.End()
		ended.Add(1)
		if slow {
			sc := sp.SpanContext()
			printMu.Lock()
			fmt.Printf("slow %s %s\n", sc.TraceID(), sc.SpanID())
			printMu.Unlock()
			next = time.Now()
		}
		next = next.Add(period)
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		} else if d < -time.Second {
			next = time.Now() // overloaded: do not burst to catch up
		}
	}
}

func main() {
	threads := flag.Int("threads", 8, "worker threads")
	rate := flag.Float64("rate", 5000, "spans per second, all workers together")
	burn := flag.Duration("burn", 100*time.Microsecond, "CPU burnt inside each span")
	duration := flag.Duration("duration", 0, "how long to run (0: until SIGINT/SIGTERM)")
	endpoint := flag.String("endpoint", "", "OTLP/gRPC endpoint host:port (insecure)")
	flag.IntVar(&slowEvery, "slow-every", 0, "every Nth span of each worker is slow (0: none)")
	flag.DurationVar(&slowBurn, "slow-burn", 200*time.Millisecond, "CPU burnt inside a slow span")
	flag.Parse()
	if *threads < 1 || *rate <= 0 {
		fmt.Fprintln(os.Stderr, "spangen: -threads must be ≥ 1 and -rate > 0")
		os.Exit(2)
	}

	ctx := context.Background()
	opts := []otlptracegrpc.Option{otlptracegrpc.WithInsecure()}
	if *endpoint != "" {
		opts = append(opts, otlptracegrpc.WithEndpoint(*endpoint))
	}
	inner, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "spangen: exporter: %v\n", err)
		os.Exit(1)
	}
	exp := &countingExporter{SpanExporter: inner}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithProcessPID(),
		resource.WithAttributes(attribute.String(convention.ServiceName, "spangen")),
	)
	if err != nil {
		fmt.Fprintf(os.Stderr, "spangen: resource: %v\n", err)
		os.Exit(1)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithBatcher(exp,
			sdktrace.WithBatchTimeout(200*time.Millisecond),
			sdktrace.WithMaxQueueSize(1<<15),
			sdktrace.WithMaxExportBatchSize(1024),
			sdktrace.WithBlocking(),
		),
	)
	tr := tp.Tracer("github.com/perfprof/perfprof/internal/testchild/spangen")

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	var stop atomic.Bool
	var wg sync.WaitGroup
	ready := make(chan struct{}, *threads)
	period := time.Duration(float64(*threads) / *rate * float64(time.Second))
	for i := 0; i < *threads; i++ {
		wg.Add(1)
		go worker(tr, i, period, *burn, &stop, &wg, ready)
	}
	for i := 0; i < *threads; i++ {
		<-ready
	}
	fmt.Printf("ready %d\n", os.Getpid())

	var timeout <-chan time.Time
	if *duration > 0 {
		timeout = time.After(*duration)
	}
	select {
	case <-sig:
	case <-timeout:
	}
	stop.Store(true)
	wg.Wait()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := tp.Shutdown(sctx); err != nil {
		fmt.Fprintf(os.Stderr, "spangen: shutdown: %v\n", err)
	}
	n, ok, failed := ended.Load(), exp.exported.Load(), exp.failed.Load()
	if lost := n - ok - failed; lost != 0 {
		fmt.Fprintf(os.Stderr, "spangen: %d spans lost in the final flush\n", lost)
	}
	fmt.Printf("done %d %d %d\n", n, ok, failed)
}
