// Command spanner is the ground-truth workload of the span join tests: Go
// worker goroutines, each locked to its own OS thread, burn CPU inside and
// outside OpenTelemetry spans that they export over OTLP/gRPC with the real
// OTel Go SDK (BatchSpanProcessor + otlptracegrpc, insecure).
//
// Flags:
//
//	-workers N      worker threads (default 2)
//	-duration D     run this long, then flush and exit (default 1m; 0: until SIGINT/SIGTERM)
//	-endpoint H:P   OTLP/gRPC endpoint (default: what the OTLP exporter reads from
//	                OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT, else localhost:4317)
//	-late D         BatchSpanProcessor schedule delay: spans reach the endpoint up to D late (default 2s)
//	-service NAME   resource service.name (default spanner)
//	-seed N         seed of the random burn lengths; worker i uses seed+i (default 1)
//
// Output: "ready PID TID1 TID2 ..." once every worker runs, where TIDk is the
// OS thread id (gettid) of worker k-1; on exit (after -duration or on
// SIGINT/SIGTERM), once the tracer provider is shut down and the spans
// flushed (waiting at most 5 s), "done SPANS" with the number of spans
// ended. Export errors go to stderr; they do not stop the program. The
// exporter keeps the SDK's default retries, so spans sent before the
// endpoint listens are retried rather than lost.
//
// Resource: service.name (from -service), process.pid, telemetry.sdk.*, and
// container.id where the SDK's container detector finds one in
// /proc/self/cgroup, and OTEL_RESOURCE_ATTRIBUTES.
//
// Ground truth. Each worker w (0-based) with tid T loops until stopped:
//
//	request                      root span, kind server
//	├── alpha                    wraps exactly one call of spanAlpha (burns 2–8 ms)
//	└── beta                     spanBeta (first half) · gamma · spanBeta (second half);
//	    │                        the two spanBeta halves together burn 1–5 ms
//	    └── gamma                wraps exactly one call of spanGamma (burns 1–3 ms)
//	burnOutside                  burns 1–4 ms after request has ended: in no span
//	sleep 0–2 ms                 off CPU, in no span
//
// Every span carries the int64 attributes thread.id = T and worker.id = w,
// and the four spans of one iteration share one trace id; alpha and beta
// are children of request, gamma a child of beta. Each span starts (SDK
// default start time, time.Now) immediately before its burn call and ends
// immediately after it, so that, up to the few microseconds the SDK takes
// around a call:
//
//   - a sample on T whose stack holds main.spanAlpha lies in alpha (innermost);
//   - main.spanBeta lies in beta (innermost; never in gamma);
//   - main.spanGamma lies in gamma (innermost; inside beta and request);
//   - main.burnOutside lies in no span of T;
//   - request holds no other work of its own than span bookkeeping, and
//     spans of one worker never overlap except by nesting.
//
// With -wait D, request has a third child, wait, after beta: the thread
// sleeps D in nanosleep(2) inside main.waitSleep, off CPU, in that span.
//
// Durations: alpha ≈ 2–8 ms, gamma ≈ 1–3 ms, beta ≈ 2–8 ms (spanBeta 1–5 ms
// plus gamma), request ≈ alpha + beta ≈ 4–16 ms. On-CPU, a worker spends on
// average about 40% of its time in spanAlpha, 24% in spanBeta, 16% in
// spanGamma, 20% in burnOutside (of its burning time; sleeps are ~7% of
// wall time). Each burn function is a distinct symbol with a frame of its
// own (its loop calls the //go:noinline helper expired), so frame-pointer
// unwinding keeps it and its caller in the stack; nearly all of its time
// is in its own body.
//
// Export: spans are batched and sent every -late (the batch limit is 8192
// spans, the queue 65536, so the timer, not the batch size, decides at
// normal rates); a shutdown flushes what is left.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
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

// expired reports whether the deadline has passed. Calling it keeps the
// burn functions non-leaf, so each has a frame of its own.
//
//go:noinline
func expired(end time.Time) bool { return !time.Now().Before(end) }

// The burn functions spin in a tight integer loop, checking the time every
// 8192 iterations (some microseconds).

//go:noinline
func spanAlpha(d time.Duration) {
	end := time.Now().Add(d)
	x := uint64(1)
	for !expired(end) {
		for i := 0; i < 8192; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	sink += x
}

//go:noinline
func spanBeta(d time.Duration) {
	end := time.Now().Add(d)
	x := uint64(3)
	for !expired(end) {
		for i := 0; i < 8192; i++ {
			x = x*2862933555777941757 + 3037000493
		}
	}
	sink += x
}

//go:noinline
func spanGamma(d time.Duration) {
	end := time.Now().Add(d)
	x := uint64(5)
	for !expired(end) {
		for i := 0; i < 8192; i++ {
			x = x*3935559000370003845 + 2691343689449507681
		}
	}
	sink += x
}

//go:noinline
func burnOutside(d time.Duration) {
	end := time.Now().Add(d)
	x := uint64(7)
	for !expired(end) {
		for i := 0; i < 8192; i++ {
			x = x*1181783497276652981 + 1013904223
		}
	}
	sink += x
}

// between returns a random duration in [lo, hi).
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

var spans atomic.Int64

// waitSleep blocks its thread in nanosleep(2) itself, not through the Go
// scheduler, so that the thread's stack at switch-out holds this function.
//
//go:noinline
func waitSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}

// waitFor is -wait: the length of the wait span's sleep, 0 for none.
var waitFor time.Duration

func worker(tr trace.Tracer, index int, seed uint64, tids chan<- [2]int, stop *atomic.Bool, wg *sync.WaitGroup) {
	defer wg.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := syscall.Gettid()
	tids <- [2]int{index, tid}
	rng := rand.New(rand.NewPCG(seed, uint64(index)))
	attrs := trace.WithAttributes(
		attribute.Int64(convention.ThreadID, int64(tid)),
		attribute.Int64(convention.WorkerID, int64(index)),
	)
	bg := context.Background()
	for !stop.Load() {
		dAlpha := between(rng, 2*time.Millisecond, 8*time.Millisecond)
		dBeta := between(rng, 1*time.Millisecond, 5*time.Millisecond)
		dGamma := between(rng, 1*time.Millisecond, 3*time.Millisecond)
		dOut := between(rng, 1*time.Millisecond, 4*time.Millisecond)
		dSleep := time.Duration(rng.Int64N(int64(2*time.Millisecond) + 1))

		ctx, req := tr.Start(bg, "request", attrs, trace.WithSpanKind(trace.SpanKindServer))

		_, alpha := tr.Start(ctx, "alpha", attrs)
		spanAlpha(dAlpha)
		alpha.End()

		bctx, beta := tr.Start(ctx, "beta", attrs)
		spanBeta(dBeta / 2)
		_, gamma := tr.Start(bctx, "gamma", attrs)
		spanGamma(dGamma)
		gamma.End()
		spanBeta(dBeta - dBeta/2)
		beta.End()

		if waitFor > 0 {
			_, wait := tr.Start(ctx, "wait", attrs)
			waitSleep(waitFor)
			wait.End()
			spans.Add(1)
		}

		req.End()
		spans.Add(4)

		burnOutside(dOut)
		if dSleep > 0 {
			time.Sleep(dSleep)
		}
	}
}

func main() {
	workers := flag.Int("workers", 2, "worker threads")
	duration := flag.Duration("duration", time.Minute, "how long to run (0: until SIGINT/SIGTERM)")
	endpoint := flag.String("endpoint", "", "OTLP/gRPC endpoint host:port (insecure); empty: the exporter's own default and OTEL_EXPORTER_OTLP_* variables")
	late := flag.Duration("late", 2*time.Second, "batch span processor schedule delay")
	service := flag.String("service", "spanner", "resource service.name")
	seed := flag.Uint64("seed", 1, "seed of the random burn lengths")
	flag.DurationVar(&waitFor, "wait", 0, "after beta, a third child span of request, wait, sleeping this long in waitSleep (nanosleep)")
	flag.Parse()
	if *workers < 1 || *late <= 0 {
		fmt.Fprintln(os.Stderr, "spanner: -workers must be ≥ 1 and -late > 0")
		os.Exit(2)
	}

	ctx := context.Background()
	opts := []otlptracegrpc.Option{otlptracegrpc.WithInsecure()}
	if *endpoint != "" {
		opts = append(opts, otlptracegrpc.WithEndpoint(*endpoint))
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "spanner: exporter: %v\n", err)
		os.Exit(1)
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithProcessPID(),
		resource.WithContainer(), // container.id, from /proc/self/cgroup
		resource.WithFromEnv(),   // OTEL_RESOURCE_ATTRIBUTES: k8s.pod.uid, from the downward API
		resource.WithAttributes(attribute.String(convention.ServiceName, *service)),
	)
	if err != nil {
		fmt.Fprintf(os.Stderr, "spanner: resource: %v\n", err)
		os.Exit(1)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithBatcher(exp,
			sdktrace.WithBatchTimeout(*late),
			sdktrace.WithMaxQueueSize(1<<16),
			sdktrace.WithMaxExportBatchSize(8192),
		),
	)
	tr := tp.Tracer("github.com/perfprof/perfprof/internal/testchild/spanner")

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)

	var stop atomic.Bool
	var wg sync.WaitGroup
	tidc := make(chan [2]int, *workers)
	for i := 0; i < *workers; i++ {
		wg.Add(1)
		go worker(tr, i, *seed+uint64(i), tidc, &stop, &wg)
	}
	tids := make([]int, *workers)
	for i := 0; i < *workers; i++ {
		t := <-tidc
		tids[t[0]] = t[1]
	}
	line := fmt.Sprintf("ready %d", os.Getpid())
	for _, t := range tids {
		line += fmt.Sprintf(" %d", t)
	}
	fmt.Println(line)

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

	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := tp.Shutdown(sctx); err != nil {
		fmt.Fprintf(os.Stderr, "spanner: shutdown: %v\n", err)
	}
	fmt.Printf("done %d\n", spans.Load())
}
