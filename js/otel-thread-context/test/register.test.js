'use strict';
// The one-line install: register() after NodeSDK (0.223, SDK 2.x) started,
// with instrumentation-http and a real HTTP server. Each request's handler
// runs in its server span's record, through awaits, while other requests
// run in between; the process context is published with the SDK's
// resource. Needs Node.js 24 (AsyncContextFrame).
process.env.OTEL_LOGS_EXPORTER = 'none';
process.env.OTEL_METRICS_EXPORTER = 'none';
const test = require('node:test');
const assert = require('node:assert/strict');
const { NodeSDK } = require('@opentelemetry/sdk-node');
const { SimpleSpanProcessor, InMemorySpanExporter } = require('@opentelemetry/sdk-trace-base');
const { HttpInstrumentation } = require('@opentelemetry/instrumentation-http');
const { trace, context, SpanKind } = require('@opentelemetry/api');
const { current, processContextOf } = require('./helpers');

const exporter = new InMemorySpanExporter();
const sdk = new NodeSDK({
  serviceName: 'register-test',
  spanProcessors: [new SimpleSpanProcessor(exporter)],
  instrumentations: [new HttpInstrumentation()],
});
sdk.start();
const bridge = require('..').register({ attributes: ['http.route', 'http.request.method'] });
const http = require('node:http'); // after the instrumentation patched it

test('register() wires the bridge into the started SDK', () => {
  assert.equal(bridge.enabled, true, bridge.reason);
  assert.equal(require('..').register(), bridge, 'a second call returns the first bridge');
  assert.equal(context._getContextManager(), bridge.contextManager);
});

test('each request handler runs in its own server span, through awaits, with http.route', async () => {
  const seen = [];
  let releaseA;
  const gateA = new Promise((r) => { releaseA = r; });
  const server = http.createServer(async (req, res) => {
    const span = trace.getActiveSpan();
    const route = req.url.startsWith('/a') ? '/a/:id' : '/b/:id';
    const check = (where) => {
      const rec = current(bridge.keyMap);
      seen.push(where);
      assert.ok(rec, `${req.url} ${where}: no record`);
      assert.equal(rec.spanId, span.spanContext().spanId, `${req.url} ${where}`);
      assert.equal(rec.traceId, span.spanContext().traceId, `${req.url} ${where}`);
      return rec;
    };
    assert.equal(span.kind, SpanKind.SERVER);
    let rec = check('start');
    assert.equal(rec.attrs['http.request.method'], 'GET');
    // What a framework's instrumentation does once its router matched.
    context.active().getValue(Symbol.for('OpenTelemetry SDK Context Key RPC_METADATA')).route = route;
    if (req.url.startsWith('/a')) {
      await gateA; // /b runs its whole handler meanwhile
    } else {
      await new Promise((r) => setTimeout(r, 5));
      releaseA();
    }
    rec = check('after await');
    assert.equal(rec.attrs['http.route'], route);
    await tracer.startActiveSpan('work', async (w) => {
      await new Promise((r) => setImmediate(r));
      assert.equal(current(bridge.keyMap).spanId, w.spanContext().spanId);
      w.end();
    });
    check('after the child span');
    res.end(route);
  });
  const tracer = trace.getTracer('register-test');
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const get = (path) => new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port: server.address().port, path }, (res) => {
      let body = '';
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve(body));
    }).on('error', reject);
  });
  assert.deepEqual(await Promise.all([get('/a/1'), get('/b/2')]), ['/a/:id', '/b/:id']);
  server.close();
  assert.equal(seen.length, 6);
  assert.equal(current(bridge.keyMap), undefined, 'no record outside the requests');
  // SimpleSpanProcessor exports once the resource detectors are done.
  const servers = () => exporter.getFinishedSpans().filter((s) => s.kind === SpanKind.SERVER);
  for (const deadline = Date.now() + 10_000; servers().length < 2 && Date.now() < deadline;) {
    await new Promise((r) => setTimeout(r, 10));
  }
  assert.deepEqual(servers().map((s) => s.attributes['http.route']).sort(), ['/a/:id', '/b/:id'],
    'instrumentation-http copied the route to the spans at the end, as without the bridge');
});

test('the process context names the schema, the key map and the service', () => {
  const pc = processContextOf();
  assert.ok(pc, 'no OTEL_CTX mapping');
  assert.equal(pc.signature, 'OTEL_CTX');
  assert.equal(pc.version, 2);
  const text = pc.payload.toString('latin1');
  for (const s of ['nodejs_v1_dev', 'datadog.local_root_span_id', 'http.route', 'http.request.method', 'register-test']) {
    assert.ok(text.includes(s), `payload lacks ${s}`);
  }
});
