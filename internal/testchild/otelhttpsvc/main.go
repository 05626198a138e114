// Command otelhttpsvc is the ground-truth workload of the span attribution
// tests on an ordinary Go service: a net/http server instrumented with the
// contrib otelhttp handler, its handlers running on plain goroutines (not
// locked to OS threads) with GOMAXPROCS=2 and async preemption on, as Go
// services run. It records which request every millisecond of its handlers'
// CPU work belonged to and on which thread it ran, so that a test can judge
// the span each profiler sample was linked to. The same binary drives it.
//
// Usage:
//
//	otelhttpsvc serve [flags]   the service
//	otelhttpsvc drive [flags]   the clients
//
// serve flags:
//
//	-addr H:P       listen address (default 127.0.0.1:0)
//	-endpoint H:P   OTLP/gRPC span endpoint, insecure (default: the exporter's
//	                OTEL_EXPORTER_OTLP_* variables, else localhost:4317)
//	-late D         batch span processor schedule delay (default 1s)
//	-labels         wrap the tracer provider with pkg/spanlabels, so that each
//	                goroutine carries its span's ids as pprof labels
//	-truth FILE     where to write the ground truth at exit (default: none)
//	-interval D     ground-truth record interval during CPU work (default 1ms)
//	-background D   CPU the unspanned background goroutine burns per 3 ms
//	                (default 1ms; 0: no background work)
//
// It prints "ready PID PORT" once it listens, and on SIGINT/SIGTERM (after
// the in-flight requests, the span flush and the truth file) "done SPANS
// RECORDS".
//
// drive flags: -url (the service's base URL), -clients (default 8),
// -duration (default 15s), -pause (default 0). Each client loops over GET
// /alpha, /beta and /gamma (4:3:3, at random) on its own keep-alive
// connection, waiting -pause after each response; the driver prints "done
// REQUESTS ERRORS" at the end.
//
// # Spans
//
// Every request has a server span from otelhttp ("GET /alpha" ...), the
// root of its own trace (the clients send no trace context). Every span,
// the server spans included, gets the int64 attribute thread.id = gettid()
// of the thread that started it, set by a span processor's OnStart, which
// runs on the goroutine calling Start: what a user following perfprof's
// README does. Resource: service.name otelhttpsvc, process.pid,
// container.id where the SDK's container detector finds one, and
// OTEL_RESOURCE_ATTRIBUTES.
//
// # Work
//
// All CPU work is done by main.burn, which spins for a wall-clock duration;
// its caller names the work in the stack:
//
//	GET /alpha   main.routeAlpha: burn 2–4 ms; a child span alpha.query
//	             around a 1–2 ms sleep (a downstream call, off CPU); burn
//	             1–2 ms in the server span again
//	GET /beta    main.routeBeta: burn 3–6 ms, in the server span
//	GET /gamma   main.routeGamma: a child span gamma.render around
//	             main.renderGamma burning 1–3 ms; a 0.5 ms sleep; burn 1–2 ms
//	             in the server span
//	background   main.backgroundWork, one goroutine started by main, in no
//	             span: burn -background, sleep the rest of 3 ms, forever
//
// A sample whose stack holds main.routeAlpha, routeBeta or routeGamma is
// work of a request of that route; one whose stack holds
// main.backgroundWork is work of no span.
//
// # Ground truth
//
// Each burn records (CLOCK_MONOTONIC ns, gettid, route, trace id, span id,
// burn number) when it starts, every -interval while it spins and when it
// ends. Its span id is the innermost span of its request (the server span,
// or gamma.render around renderGamma); the trace id names the request; the
// background's records have route "-" and no ids. Between two consecutive
// records of one burn on one thread, that thread ran that burn, unless the
// goroutine left the thread and came back in between: another burn on the
// thread in that gap would leave a record of its own there, unless it ran
// for less than an interval, which the judge bounds by rejecting long gaps.
//
// The truth file is text, one item a line:
//
//	offset NS                    realtime − monotonic, measured at start
//	span TRACE SPAN PARENT TID START END NAME
//	                             every sampled span ended: ids in hex (PARENT
//	                             "-" for a root), TID its thread.id, START and
//	                             END Unix ns
//	rec MONO TID ROUTE TRACE SPAN BURN
//	                             ROUTE alpha, beta, gamma or -; TRACE and SPAN
//	                             "-" for the background
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	_ "unsafe" // go:linkname

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/perfprof/perfprof/internal/convention"
	"github.com/perfprof/perfprof/pkg/spanlabels"
)

// nanotime is the runtime's CLOCK_MONOTONIC reading, the clock of perf
// samples. It goes through the vDSO (26 ns here), where
// unix.ClockGettime makes a system call.
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: otelhttpsvc serve|drive [flags]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		serve(os.Args[2:])
	case "drive":
		drive(os.Args[2:])
	default:
		fmt.Fprintf(os.Stderr, "otelhttpsvc: unknown mode %q\n", os.Args[1])
		os.Exit(2)
	}
}

// Routes, as ground-truth records name them.
const (
	routeNone = iota
	routeA
	routeB
	routeG
)

var routeNames = [...]string{routeNone: "-", routeA: "alpha", routeB: "beta", routeG: "gamma"}

type record struct {
	mono  int64
	tid   int32
	route uint8
	burn  uint32
	trace trace.TraceID
	span  trace.SpanID
}

// recorder collects one goroutine's records, to be handed to the truth at
// the end of a request: no lock is taken while burning.
type recorder struct {
	route uint8
	trace trace.TraceID
	recs  []record
}

func (r *recorder) mark(span trace.SpanID, burn uint32) {
	r.recs = append(r.recs, record{
		mono: nanotime(), tid: int32(syscall.Gettid()), route: r.route, burn: burn, trace: r.trace, span: span,
	})
}

// truth is everything recorded, and the spans ended.
var truth struct {
	mu    sync.Mutex
	recs  []record
	spans []string
}

func (r *recorder) flush() {
	truth.mu.Lock()
	truth.recs = append(truth.recs, r.recs...)
	truth.mu.Unlock()
	r.recs = r.recs[:0]
}

var (
	interval = time.Millisecond
	burns    atomic.Uint32
	sink     atomic.Uint64
)

// burn spins for d of wall time as work of span, recording the truth as it
// goes. Its calls keep it a function with a frame, so that frame-pointer
// unwinding shows its caller.
//
//go:noinline
func burn(rec *recorder, span trace.SpanID, d time.Duration) {
	n := burns.Add(1)
	rec.mark(span, n)
	now := nanotime()
	end, next := now+int64(d), now+int64(interval)
	x := uint64(n)
	for {
		for range 4096 {
			x = x*6364136223846793005 + 1442695040888963407
		}
		now = nanotime()
		if now >= end {
			break
		}
		if now >= next {
			rec.mark(span, n)
			next = now + int64(interval)
		}
	}
	rec.mark(span, n)
	sink.Add(x)
}

// between returns a random duration in [lo, hi).
func between(lo, hi time.Duration) time.Duration {
	return lo + rand.N(hi-lo)
}

var tracer trace.Tracer

//go:noinline
func routeAlpha(ctx context.Context, rec *recorder) {
	server := trace.SpanContextFromContext(ctx).SpanID()
	burn(rec, server, between(2*time.Millisecond, 4*time.Millisecond))
	_, q := tracer.Start(ctx, "alpha.query")
	time.Sleep(between(time.Millisecond, 2*time.Millisecond))
	q.End()
	burn(rec, server, between(time.Millisecond, 2*time.Millisecond))
}

//go:noinline
func routeBeta(ctx context.Context, rec *recorder) {
	burn(rec, trace.SpanContextFromContext(ctx).SpanID(), between(3*time.Millisecond, 6*time.Millisecond))
}

//go:noinline
func routeGamma(ctx context.Context, rec *recorder) {
	rctx, render := tracer.Start(ctx, "gamma.render")
	renderGamma(rctx, rec)
	render.End()
	time.Sleep(500 * time.Microsecond)
	burn(rec, trace.SpanContextFromContext(ctx).SpanID(), between(time.Millisecond, 2*time.Millisecond))
}

//go:noinline
func renderGamma(ctx context.Context, rec *recorder) {
	burn(rec, trace.SpanContextFromContext(ctx).SpanID(), between(time.Millisecond, 3*time.Millisecond))
}

// handle serves a route: the route function's work, then a small body.
func handle(route uint8, f func(context.Context, *recorder)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		rec := &recorder{route: route, trace: trace.SpanContextFromContext(ctx).TraceID(), recs: make([]record, 0, 16)}
		f(ctx, rec)
		rec.flush()
		_, _ = io.WriteString(w, routeNames[route]+"\n")
	}
}

// backgroundWork burns in no span until stop is closed.
//
//go:noinline
func backgroundWork(d time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	rec := &recorder{route: routeNone}
	for {
		select {
		case <-stop:
			rec.flush()
			return
		default:
		}
		burn(rec, trace.SpanID{}, d)
		time.Sleep(3*time.Millisecond - d)
		if len(rec.recs) > 256 {
			rec.flush()
		}
	}
}

// tidProcessor puts the OS thread id on every span as it starts. OnStart
// runs on the goroutine that calls Start, so it is the thread that goroutine
// runs on at that instant.
type tidProcessor struct{}

func (tidProcessor) OnStart(_ context.Context, s sdktrace.ReadWriteSpan) {
	s.SetAttributes(attribute.Int64(convention.ThreadID, int64(syscall.Gettid())))
}

func (tidProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	var tid int64
	for _, a := range s.Attributes() {
		if a.Key == convention.ThreadID {
			tid = a.Value.AsInt64()
		}
	}
	parent := "-"
	if s.Parent().IsValid() {
		parent = s.Parent().SpanID().String()
	}
	line := fmt.Sprintf("span %s %s %s %d %d %d %s", s.SpanContext().TraceID(), s.SpanContext().SpanID(), parent,
		tid, s.StartTime().UnixNano(), s.EndTime().UnixNano(), s.Name())
	truth.mu.Lock()
	truth.spans = append(truth.spans, line)
	truth.mu.Unlock()
}

func (tidProcessor) Shutdown(context.Context) error   { return nil }
func (tidProcessor) ForceFlush(context.Context) error { return nil }

// clockOffset returns realtime − monotonic, read as a midpoint.
func clockOffset() int64 {
	m0 := nanotime()
	rt := time.Now().UnixNano()
	m1 := nanotime()
	return rt - (m0+m1)/2
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "otelhttpsvc: "+format+"\n", args...)
	os.Exit(1)
}

func serve(args []string) {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	endpoint := fs.String("endpoint", "", "OTLP/gRPC endpoint host:port (insecure)")
	late := fs.Duration("late", time.Second, "batch span processor schedule delay")
	labels := fs.Bool("labels", false, "label goroutines with their spans (pkg/spanlabels)")
	truthPath := fs.String("truth", "", "ground-truth file written at exit")
	fs.DurationVar(&interval, "interval", time.Millisecond, "ground-truth record interval while burning")
	background := fs.Duration("background", time.Millisecond, "CPU burnt in no span per 3 ms (0: none)")
	_ = fs.Parse(args)
	if *background < 0 || *background >= 3*time.Millisecond || interval <= 0 {
		fail("-background must be in [0, 3ms) and -interval > 0")
	}
	// The scheduling the attribution must survive: 2 Ps, whatever the
	// machine, goroutines moving between threads.
	runtime.GOMAXPROCS(2)
	offset := clockOffset()

	ctx := context.Background()
	opts := []otlptracegrpc.Option{otlptracegrpc.WithInsecure()}
	if *endpoint != "" {
		opts = append(opts, otlptracegrpc.WithEndpoint(*endpoint))
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		fail("exporter: %v", err)
	}
	res, err := resource.New(ctx, resource.WithProcessPID(), resource.WithContainer(), resource.WithFromEnv(),
		resource.WithAttributes(attribute.String(convention.ServiceName, "otelhttpsvc")))
	if err != nil {
		fail("resource: %v", err)
	}
	sdk := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithSpanProcessor(tidProcessor{}),
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(*late), sdktrace.WithMaxQueueSize(1<<16)),
	)
	var tp trace.TracerProvider = sdk
	if *labels {
		tp = spanlabels.NewTracerProvider(sdk)
	}
	tracer = tp.Tracer("github.com/perfprof/perfprof/internal/testchild/otelhttpsvc")

	mux := http.NewServeMux()
	mux.Handle("GET /alpha", handle(routeA, routeAlpha))
	mux.Handle("GET /beta", handle(routeB, routeBeta))
	mux.Handle("GET /gamma", handle(routeG, routeGamma))
	srv := &http.Server{Handler: otelhttp.NewHandler(mux, "otelhttpsvc", otelhttp.WithTracerProvider(tp))}
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		fail("listen: %v", err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	stop, bgDone := make(chan struct{}), make(chan struct{})
	if *background > 0 {
		go backgroundWork(*background, stop, bgDone)
	} else {
		close(bgDone)
	}
	fmt.Printf("ready %d %d\n", os.Getpid(), lis.Addr().(*net.TCPAddr).Port)

	select {
	case <-sig:
	case err := <-served:
		fail("serve: %v", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		fmt.Fprintf(os.Stderr, "otelhttpsvc: shutdown: %v\n", err)
	}
	close(stop)
	<-bgDone
	if err := sdk.Shutdown(sctx); err != nil {
		fmt.Fprintf(os.Stderr, "otelhttpsvc: span flush: %v\n", err)
	}
	truth.mu.Lock()
	defer truth.mu.Unlock()
	if *truthPath != "" {
		if err := writeTruth(*truthPath, offset); err != nil {
			fail("truth: %v", err)
		}
	}
	fmt.Printf("done %d %d\n", len(truth.spans), len(truth.recs))
}

func writeTruth(path string, offset int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	fmt.Fprintf(w, "offset %d\n", offset)
	for _, s := range truth.spans {
		fmt.Fprintln(w, s)
	}
	for _, r := range truth.recs {
		tr, sp := "-", "-"
		if r.route != routeNone {
			tr, sp = r.trace.String(), r.span.String()
		}
		fmt.Fprintf(w, "rec %d %d %s %s %s %d\n", r.mono, r.tid, routeNames[r.route], tr, sp, r.burn)
	}
	return errors.Join(w.Flush(), f.Close())
}

func drive(args []string) {
	fs := flag.NewFlagSet("drive", flag.ExitOnError)
	base := fs.String("url", "", "the service's base URL, http://H:P")
	clients := fs.Int("clients", 8, "concurrent clients")
	duration := fs.Duration("duration", 15*time.Second, "how long to drive")
	pause := fs.Duration("pause", 0, "each client waits this long after each response")
	_ = fs.Parse(args)
	if *base == "" || *clients < 1 {
		fail("drive needs -url and -clients ≥ 1")
	}
	paths := []string{"/alpha", "/alpha", "/alpha", "/alpha", "/beta", "/beta", "/beta", "/gamma", "/gamma", "/gamma"}
	var requests, errs atomic.Int64
	deadline := time.Now().Add(*duration)
	var wg sync.WaitGroup
	for range *clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One keep-alive connection per client, as a pool of callers has.
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 10 * time.Second}
			for time.Now().Before(deadline) {
				resp, err := c.Get(*base + paths[rand.IntN(len(paths))])
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %s", resp.Status)
					}
				}
				requests.Add(1)
				if err != nil {
					if errs.Add(1) <= 3 {
						fmt.Fprintf(os.Stderr, "otelhttpsvc drive: %v\n", err)
					}
				}
				time.Sleep(*pause)
			}
		}()
	}
	wg.Wait()
	fmt.Printf("done %d %d\n", requests.Load(), errs.Load())
}
