'use strict';
// workers.js runs spans on Node.js worker threads as well as on the main
// thread, each isolate with its own OpenTelemetry SDK (NodeTracerProvider)
// and the bridge (js/otel-thread-context), for test/e2e's
// TestNodeWorkerThreadContexts: every thread publishes its own Node.js
// thread context, and only the main thread the process context. Run it
// with Node.js 24 as
//
//   node --perf-basic-prof --interpreted-frames-native-stack --logfile=/dev/null \
//        --no-turbo-inlining --no-maglev-inlining workers.js
//
// The main thread and two workers (isolates "main", "w1", "w2") each open
// two spans, A and B, that stay open and take turns on their thread: each
// burns 1 ms in its own function (burnMainA, burnW1B, ...) and awaits a
// setImmediate, so the thread switches between its two spans every
// millisecond. It prints "ready PID", then "span ISOLATE A|B TRACE_ID
// SPAN_ID" for each of the six spans as they open.
const path = require('node:path');
const { Worker, isMainThread, parentPort, workerData } = require('node:worker_threads');
const { createRequire } = require('node:module');

const bridgeDir = path.join(__dirname, '..', '..', '..', '..', 'js', 'otel-thread-context');
const pkg = createRequire(path.join(bridgeDir, 'package.json'));
const { NodeTracerProvider } = pkg('@opentelemetry/sdk-trace-node');
const { trace } = pkg('@opentelemetry/api');
const { create } = require(bridgeDir);

function burn(ms, x, salt) {
  const end = performance.now() + ms;
  do {
    for (let i = 0; i < 20000; i++) x = (x * 1103515245 + salt) % 2147483647;
  } while (performance.now() < end);
  return x;
}
// One function per isolate and span, so that a sample's stack says which
// span ran.
const burns = {
  main: { A: function burnMainA(x) { return burn(1, x, 101); }, B: function burnMainB(x) { return burn(1, x, 102); } },
  w1: { A: function burnW1A(x) { return burn(1, x, 201); }, B: function burnW1B(x) { return burn(1, x, 202); } },
  w2: { A: function burnW2A(x) { return burn(1, x, 301); }, B: function burnW2B(x) { return burn(1, x, 302); } },
};

const isolate = isMainThread ? 'main' : workerData.isolate;
const bridge = create({ serviceName: 'nodeworkers', attributes: ['http.route'] });
if (!bridge.enabled) {
  console.error(`the bridge is off: ${bridge.reason}`);
  process.exit(2);
}
const provider = new NodeTracerProvider({ spanProcessors: [bridge.spanProcessor] });
provider.register({ contextManager: bridge.contextManager });
const tracer = trace.getTracer('workers');

const say = isMainThread ? (line) => console.log(line) : (line) => parentPort.postMessage(line);
if (isMainThread) console.log('ready', process.pid);

function run(name) {
  tracer.startActiveSpan(`${isolate}-${name}`, async (span) => {
    span.setAttribute('http.route', `/${isolate}/${name}`);
    const c = span.spanContext();
    say(`span ${isolate} ${name} ${c.traceId} ${c.spanId}`);
    let x = 1;
    for (;;) {
      x = burns[isolate][name](x) & 0xffff;
      await new Promise((resolve) => setImmediate(resolve));
    }
  });
}
run('A');
run('B');

if (isMainThread) {
  for (const w of ['w1', 'w2']) {
    const worker = new Worker(__filename, { workerData: { isolate: w } });
    worker.on('message', (line) => console.log(line));
    worker.on('error', (err) => { console.error(err); process.exit(1); });
  }
}
