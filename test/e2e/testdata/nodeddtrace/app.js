'use strict';
// app.js is the HTTP service of ../noderoutes.js traced by dd-trace, for
// test/e2e's Node.js tests (node_test.go). Nothing in it is for perfprof:
// dd-trace is loaded with --require dd-trace/init and configured by its
// environment only:
//
//   DD_TRACE_OTEL_CTX_ENABLED=true (the OTEP 4947 thread context, through
//     @datadog/pprof, and the OTEP 4719 process context that names its
//     schema, through @datadog/libdatadog-extras)
//   OTEL_TRACES_EXPORTER=otlp OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://HOST:PORT/v1/traces
//     (OTLP/HTTP with JSON, the one protocol dd-trace 6.21.0 exports spans in)
//
// Run it with Node.js 24 (AsyncContextFrame, which the thread context needs)
// from this directory:
//
//   node --perf-basic-prof --interpreted-frames-native-stack --logfile=/dev/null \
//        --no-turbo-inlining --no-maglev-inlining --require dd-trace/init app.js DIR
//
// (--perf-basic-prof names the JIT code in /tmp/perf-PID.map; the other flags
// keep each burn function in its own code, as internal/profiler's jitburn.js
// says.) It prints "ready PID PORT" once it listens on a loopback port.
//
// Each route sets http.route on its span (dd-trace sets it from the
// frameworks it instruments, and node:http has none): dd-trace then puts
// the endpoint "GET /alpha" in the span's thread context record.
const tracer = require('dd-trace');
const { serve } = require('../noderoutes.js');

serve({
  setRoute(route) { tracer.scope().active()?.setTag('http.route', route); },
  ids() {
    const span = tracer.scope().active();
    if (!span) return '- -';
    const c = span.context();
    return c.toTraceId(true) + ' ' + c.toSpanId(true);
  },
}, process.argv[2] || '.');
