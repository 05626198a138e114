'use strict';
// The bridge wired explicitly (create()) into a NodeTracerProvider of the
// SDK 2.x: at each point, the record a reader would find is that of the
// span the OpenTelemetry context says is running. Needs Node.js 24
// (AsyncContextFrame).
const test = require('node:test');
const assert = require('node:assert/strict');
const { EventEmitter } = require('node:events');
const { trace, context, ROOT_CONTEXT } = require('@opentelemetry/api');
const { NodeTracerProvider } = require('@opentelemetry/sdk-trace-node');
const { SimpleSpanProcessor, InMemorySpanExporter, AlwaysOffSampler, ParentBasedSampler, AlwaysOnSampler } = require('@opentelemetry/sdk-trace-base');
const { create, LOCAL_ROOT_KEY } = require('..');
const { current, idsOf, tick } = require('./helpers');

const logs = [];
const bridge = create({ attributes: ['http.route', 'app.tier'], processContext: false, logger: (m) => logs.push(m) });
const exporter = new InMemorySpanExporter();
const provider = new NodeTracerProvider({
  sampler: new ParentBasedSampler({ root: new AlwaysOnSampler() }),
  spanProcessors: [bridge.spanProcessor, new SimpleSpanProcessor(exporter)],
});
provider.register({ contextManager: bridge.contextManager });
const tracer = trace.getTracer('bridge-test');
const offTracer = new NodeTracerProvider({ sampler: new AlwaysOffSampler(), spanProcessors: [bridge.spanProcessor] }).getTracer('off');
const km = bridge.keyMap;

function assertIn(span, attrs, where) {
  const rec = current(km);
  assert.ok(rec, `${where}: no record`);
  assert.deepEqual({ traceId: rec.traceId, spanId: rec.spanId }, idsOf(span), where);
  assert.equal(rec.valid, 1, where);
  if (attrs) assert.deepEqual(rec.attrs, attrs, where);
  return rec;
}

test('the bridge is on, with the local root span id at key 0', () => {
  assert.equal(bridge.enabled, true, bridge.reason);
  assert.deepEqual(logs, []);
  assert.deepEqual(km, [LOCAL_ROOT_KEY, 'http.route', 'app.tier']);
  assert.deepEqual(bridge.processContextAttributes, {
    'threadlocal.schema_version': 'nodejs_v1_dev',
    'threadlocal.attribute_key_map': [LOCAL_ROOT_KEY, 'http.route', 'app.tier'],
  });
});

test('no record outside any span', async () => {
  assert.equal(current(km), undefined);
  await context.with(ROOT_CONTEXT, async () => { await tick(); assert.equal(current(km), undefined); });
});

test('startActiveSpan: the span, its flags and start attributes, through awaits', async () => {
  await tracer.startActiveSpan('op', { attributes: { 'http.route': '/start', other: 'x' } }, async (span) => {
    const sid = span.spanContext().spanId;
    let rec = assertIn(span, { [LOCAL_ROOT_KEY]: sid, 'http.route': '/start' }, 'in');
    assert.equal(rec.flags, 1);
    await tick();
    assertIn(span, undefined, 'after setImmediate');
    await new Promise((r) => setTimeout(r, 2));
    assertIn(span, undefined, 'after a timer');
    span.end();
    assert.equal(current(km), undefined, 'after end, in the same continuation');
  });
  assert.equal(current(km), undefined, 'after the span');
});

test('a child span, then its parent again; the local root id is inherited', async () => {
  await tracer.startActiveSpan('parent', async (parent) => {
    const root = parent.spanContext().spanId;
    await tracer.startActiveSpan('child', async (child) => {
      await tick();
      assertIn(child, { [LOCAL_ROOT_KEY]: root }, 'child');
      child.end();
    });
    assertIn(parent, { [LOCAL_ROOT_KEY]: root }, 'parent after child');
    const manual = tracer.startSpan('manual'); // not active: the parent runs
    assertIn(parent, undefined, 'startSpan does not switch');
    await context.with(trace.setSpan(context.active(), manual), async () => {
      await tick();
      assertIn(manual, { [LOCAL_ROOT_KEY]: root }, 'context.with(manual)');
    });
    manual.end();
    parent.end();
  });
});

test('two concurrent requests interleaved at awaits: each sees its own span', async () => {
  const order = [];
  let release;
  const gate = new Promise((r) => { release = r; });
  async function request(name, wait) {
    return tracer.startActiveSpan(name, async (span) => {
      span.setAttribute('http.route', `/${name}`);
      const want = { [LOCAL_ROOT_KEY]: span.spanContext().spanId, 'http.route': `/${name}` };
      assertIn(span, want, `${name} before`);
      order.push(`${name}:1`);
      await wait();
      assertIn(span, want, `${name} after the await`);
      order.push(`${name}:2`);
      for (let i = 0; i < 3; i++) {
        await tick();
        assertIn(span, want, `${name} tick ${i}`);
      }
      span.end();
    });
  }
  await Promise.all([
    request('a', () => gate),
    request('b', async () => { await tick(); release(); }),
  ]);
  assert.deepEqual(order.slice(0, 2), ['a:1', 'b:1']);
  assert.ok(order.indexOf('b:1') < order.indexOf('a:2'), 'b ran while a awaited');
  assert.equal(current(km), undefined);
});

test('attributes set late reach the record; unchanged values are not appended', async () => {
  await tracer.startActiveSpan('late', async (span) => {
    const tc = require('@datadog/pprof').otelThreadCtx.getContext();
    span.setAttribute('app.tier', 'gold');
    span.setAttributes({ 'http.route': '/users/:id', 'not.mapped': 1 });
    const size = tc.debugBytes().length;
    span.setAttribute('http.route', '/users/:id');
    assert.equal(tc.debugBytes().length, size, 'same value: no append');
    await tick();
    assertIn(span, { [LOCAL_ROOT_KEY]: span.spanContext().spanId, 'app.tier': 'gold', 'http.route': '/users/:id' }, 'late');
    span.setAttribute('http.route', '/users/:name');
    assert.equal(current(km).attrs['http.route'], '/users/:name', 'last value wins');
    span.end();
  });
});

test("the route of the request's RPC metadata (set by a framework) becomes http.route", async () => {
  const RPC = Symbol.for('OpenTelemetry SDK Context Key RPC_METADATA');
  const span = tracer.startSpan('GET');
  const rpc = { type: 'http', span };
  await context.with(trace.setSpan(ROOT_CONTEXT, span).setValue(RPC, rpc), async () => {
    assertIn(span, { [LOCAL_ROOT_KEY]: span.spanContext().spanId }, 'before routing');
    await tick();
    rpc.route = '/orders/:id'; // what instrumentation-express does when its router matched
    assert.equal(rpc.route, '/orders/:id');
    assertIn(span, { [LOCAL_ROOT_KEY]: span.spanContext().spanId, 'http.route': '/orders/:id' }, 'after routing');
  });
  span.end();
});

test('after its end, a continuation of the span shows no valid record', async () => {
  let later;
  await tracer.startActiveSpan('short', async (span) => {
    later = new Promise((r) => setTimeout(() => r(require('@datadog/pprof').otelThreadCtx.getContext()), 5));
    span.end();
  });
  const tc = await later; // the timer's frame kept the span's context
  assert.ok(tc, 'the frame still holds the context');
  assert.equal(Buffer.from(tc.debugBytes())[24], 0, 'invalidated: valid byte 0');
});

test('context.bind and event emitters bound to a span run in its record', async () => {
  const span = tracer.startSpan('bound');
  const ctx = trace.setSpan(ROOT_CONTEXT, span);
  const fn = context.bind(ctx, () => current(km));
  assert.equal(fn().spanId, span.spanContext().spanId);
  const ee = context.bind(ctx, new EventEmitter());
  let seen;
  ee.on('x', () => { seen = current(km); });
  ee.emit('x');
  assert.equal(seen.spanId, span.spanContext().spanId);
  assert.equal(current(km), undefined);
  span.end();
});

test('a context without a recorded span inside one clears the record, and restores it', async () => {
  await tracer.startActiveSpan('outer', async (span) => {
    await context.with(ROOT_CONTEXT, async () => {
      assert.equal(current(km), undefined, 'ROOT_CONTEXT');
      await tick();
      assert.equal(current(km), undefined, 'ROOT_CONTEXT after await');
    });
    assertIn(span, undefined, 'back in outer');
    await offTracer.startActiveSpan('sampled out', async (ns) => {
      assert.equal(ns.isRecording(), false);
      assert.equal(current(km), undefined, 'a non-recording span has no record');
      ns.end();
    });
    assertIn(span, undefined, 'back in outer after the non-recording span');
    span.end();
  });
});

test('attach() and its token (the experimental context API)', async () => {
  const span = tracer.startSpan('attached');
  const token = bridge.contextManager.attach(trace.setSpan(ROOT_CONTEXT, span));
  assert.equal(current(km).spanId, span.spanContext().spanId);
  token.dispose();
  token.dispose();
  assert.equal(current(km), undefined);
  span.end();
});

test('spans are exported as usual', () => {
  assert.ok(exporter.getFinishedSpans().length >= 10);
});

test('a worker thread (its own isolate and thread context) runs its own bridge', async () => {
  const { Worker } = require('node:worker_threads');
  const code = `
    const { parentPort } = require('node:worker_threads');
    const { trace } = require('@opentelemetry/api');
    const { NodeTracerProvider } = require('@opentelemetry/sdk-trace-node');
    const { create } = require(${JSON.stringify(require.resolve('..'))});
    const { current } = require(${JSON.stringify(require.resolve('./helpers'))});
    const b = create({ attributes: ['http.route'] });
    new NodeTracerProvider({ spanProcessors: [b.spanProcessor] }).register({ contextManager: b.contextManager });
    trace.getTracer('w').startActiveSpan('in-worker', { attributes: { 'http.route': '/w' } }, async (s) => {
      await new Promise((r) => setTimeout(r, 1));
      parentPort.postMessage({ enabled: b.enabled, span: s.spanContext().spanId, rec: current(b.keyMap) });
      s.end();
    });`;
  const msg = await new Promise((resolve, reject) => {
    const w = new Worker(code, { eval: true });
    w.once('message', (m) => { resolve(m); w.terminate(); });
    w.once('error', reject);
  });
  assert.equal(msg.enabled, true);
  assert.equal(msg.rec.spanId, msg.span);
  assert.equal(msg.rec.attrs['http.route'], '/w');
  assert.equal(current(km), undefined, 'the main thread runs no span');
  assert.equal(require('./helpers').processContextOf(), undefined, 'a worker leaves the process context to the main thread');
});
