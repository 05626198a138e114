'use strict';
// noderoutes.js is the HTTP service of test/e2e's Node.js tests, whatever
// traces it: app.js (dd-trace) and nodeotel/service.js (the OpenTelemetry
// JS SDK, with or without the bridge) give it their tracer's two calls.
// Node.js built-ins only.
//
// Routes /alpha, /beta and /gamma burn CPU in burnAlpha, burnBeta,
// burnGamma in SLICES slices of SLICE_MS, awaiting a setImmediate, a 1 ms
// timer or a small file read between them in turn, so that concurrent
// requests interleave on the one JS thread; after the second slice a
// request blocks its thread for BLOCK_MS in blockInRequest (Atomics.wait:
// off CPU inside its span). Each names its route on its span, as a router
// would. The response is the ground truth the tests judge each sample by:
//
//   ROUTE TRACE_ID SPAN_ID BURNS BLOCK
//
// (hex ids of the request's span; BURNS and BLOCK the CLOCK_MONOTONIC
// intervals, ns, of its slices and of its block, START:END
// comma-separated), as the thread ran one request at a time.
//
// Route /light answers at once ("light TRACE_ID SPAN_ID"): the service's
// throughput against a tracer's and a profiler's cost. Route /hold prints
// "held TRACE_ID SPAN_ID" and blocks the JS thread inside the request
// until DIR/release exists, which it then removes (a thread stopped
// mid-request). A timer outside any request burns in backgroundWork every
// 50 ms: work no span covers.
const http = require('node:http');
const fs = require('node:fs');
const path = require('node:path');

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

const small = __filename;
const pauses = [
  () => new Promise((resolve) => setImmediate(resolve)),
  () => new Promise((resolve) => setTimeout(resolve, 1)),
  () => fs.promises.readFile(small),
];

const sab = new Int32Array(new SharedArrayBuffer(4));
function blockInRequest(ms) {
  Atomics.wait(sab, 0, 0, ms);
}

// process.hrtime.bigint is libuv's uv_hrtime: CLOCK_MONOTONIC, the clock
// of perf's sample times.
const now = () => process.hrtime.bigint();

// serve listens on a loopback port and prints "ready PID PORT". tracer
// has setRoute(route), which names the active span's route ("/alpha"),
// and ids(), the active span's "TRACE_ID SPAN_ID" ("- -" for none). dir
// is where /hold looks for its release file.
function serve(tracer, dir) {
  let seed = 1;
  async function route(name, res) {
    tracer.setRoute('/' + name);
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
    res.end(name + ' ' + tracer.ids() + ' ' + slices.join(',') + ' ' + block + '\n');
  }

  function hold(res) {
    tracer.setRoute('/hold');
    console.log('held ' + tracer.ids());
    const release = path.join(dir, 'release');
    const deadline = Date.now() + 60_000;
    while (!fs.existsSync(release) && Date.now() < deadline) Atomics.wait(sab, 0, 0, 20);
    fs.rmSync(release, { force: true });
    res.end('hold ' + tracer.ids() + '\n');
  }

  const server = http.createServer((req, res) => {
    const name = req.url.slice(1);
    if (burns[name]) {
      route(name, res).catch((e) => { res.statusCode = 500; res.end(String(e)); });
    } else if (name === 'light') {
      tracer.setRoute('/light');
      res.end('light ' + tracer.ids() + '\n');
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
  return server;
}

module.exports = { serve };
