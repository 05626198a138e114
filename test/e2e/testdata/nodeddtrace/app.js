'use strict';
// app.js is an HTTP service traced by dd-trace, for test/e2e's Node.js
// tests (node_test.go). Nothing in it is for perfprof: dd-trace is loaded
// with --require dd-trace/init and configured by its environment only:
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
// Routes /alpha, /beta and /gamma each burn CPU in a function of their own
// (burnAlpha, burnBeta, burnGamma) in SLICES slices, awaiting between slices
// a setImmediate, a 1 ms timer or a small file read in turn, so that
// concurrent requests interleave on the one JS thread. Each sets http.route
// on its span, as a router would (dd-trace sets it from the frameworks it
// instruments, and node:http has none): dd-trace then puts the endpoint
// "GET /alpha" in the span's thread context record. After its second slice a
// request blocks its thread for BLOCK_MS in blockInRequest (Atomics.wait:
// off CPU inside the span). A request's response is
// "ROUTE TRACE_ID SPAN_ID BURNS BLOCKS" (hex, dd-trace's ids of the
// request's span; BURNS and BLOCKS the CLOCK_MONOTONIC intervals, ns, of
// its burn slices and of its block, as START:END,START:END...): the ground
// truth the test judges each sample's link by, as the thread ran one
// request at a time.
//
// Route /hold sets its route, prints "held TRACE_ID SPAN_ID" and blocks the
// JS thread inside the request (Atomics.wait, as a sample finds a thread
// stopped mid-request) until DIR/release exists, which it then removes.
//
// A timer outside any request burns in backgroundWork every 50 ms: work
// that no span covers.
const http = require('node:http');
const fs = require('node:fs');
const path = require('node:path');
const tracer = require('dd-trace');

const dir = process.argv[2] || '.';
const SLICES = 4;
const SLICE_MS = 2;
const BLOCK_MS = 2;

// Each burn function runs arithmetic for ms milliseconds of wall time in a
// loop of its own (no call but the clock's every 20 000 iterations), so
// that its samples have it as their leaf or the leaf's caller.
function burnAlpha(ms, x) {
  const end = performance.now() + ms;
  do {
    for (let i = 0; i < 20000; i++) x = (x * 1103515245 + 12345) % 2147483647;
  } while (performance.now() < end);
  return x;
}
function burnBeta(ms, x) {
  const end = performance.now() + ms;
  do {
    for (let i = 0; i < 20000; i++) x = (x * 1103515245 + 54321) % 2147483647;
  } while (performance.now() < end);
  return x;
}
function burnGamma(ms, x) {
  const end = performance.now() + ms;
  do {
    for (let i = 0; i < 20000; i++) x = (x * 1103515245 + 11111) % 2147483647;
  } while (performance.now() < end);
  return x;
}
function backgroundWork(ms, x) {
  const end = performance.now() + ms;
  do {
    for (let i = 0; i < 20000; i++) x = (x * 1103515245 + 22222) % 2147483647;
  } while (performance.now() < end);
  return x;
}
const burns = { alpha: burnAlpha, beta: burnBeta, gamma: burnGamma };

const small = path.join(__dirname, 'package.json');
const pauses = [
  () => new Promise((resolve) => setImmediate(resolve)),
  () => new Promise((resolve) => setTimeout(resolve, 1)),
  () => fs.promises.readFile(small),
];

function ids() {
  const span = tracer.scope().active();
  if (!span) return '- -';
  const c = span.context();
  return c.toTraceId(true) + ' ' + c.toSpanId(true);
}

const sab = new Int32Array(new SharedArrayBuffer(4));
function blockInRequest(ms) {
  Atomics.wait(sab, 0, 0, ms);
}

// process.hrtime.bigint is libuv's uv_hrtime: CLOCK_MONOTONIC, the clock
// of perf's sample times.
const now = () => process.hrtime.bigint();

let seed = 1;
async function route(name, res) {
  tracer.scope().active()?.setTag('http.route', '/' + name);
  const burn = burns[name];
  const slices = [];
  let block = '';
  for (let i = 0; i < SLICES; i++) {
    const t0 = now();
    seed = burn(SLICE_MS, seed) & 0xffff;
    slices.push(t0 + ':' + now());
    if (i === 1) {
      const b0 = now();
      blockInRequest(BLOCK_MS);
      block = b0 + ':' + now();
    }
    if (i < SLICES - 1) await pauses[i % pauses.length]();
  }
  res.end(name + ' ' + ids() + ' ' + slices.join(',') + ' ' + block + '\n');
}

function hold(res) {
  tracer.scope().active()?.setTag('http.route', '/hold');
  console.log('held ' + ids());
  const release = path.join(dir, 'release');
  const deadline = Date.now() + 60_000;
  while (!fs.existsSync(release) && Date.now() < deadline) Atomics.wait(sab, 0, 0, 20);
  fs.rmSync(release, { force: true });
  res.end('hold ' + ids() + '\n');
}

const server = http.createServer((req, res) => {
  const name = req.url.slice(1);
  if (burns[name]) {
    route(name, res).catch((e) => { res.statusCode = 500; res.end(String(e)); });
  } else if (name === 'hold') {
    hold(res);
  } else {
    res.statusCode = 404;
    res.end('no route ' + req.url + '\n');
  }
});

setInterval(() => { seed = backgroundWork(1, seed) & 0xffff; }, 50);

server.listen(0, '127.0.0.1', () => {
  console.log('ready', process.pid, server.address().port);
});
