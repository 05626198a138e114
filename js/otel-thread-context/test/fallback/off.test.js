'use strict';
// Where the writer cannot publish (Node.js before 24, or Node.js 24 with
// --no-async-context-frame: no AsyncContextFrame), register() must not
// crash the app: it logs one line saying why, changes nothing, and the
// SDK works as without it. Run it with the machine's Node.js 20, and with
// Node.js 24 under NODE_OPTIONS=--no-async-context-frame.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const { trace, context } = require('@opentelemetry/api');
const { NodeTracerProvider } = require('@opentelemetry/sdk-trace-node');
const { SimpleSpanProcessor, InMemorySpanExporter } = require('@opentelemetry/sdk-trace-base');

const major = Number(process.versions.node.split('.')[0]);
const flagOff = [...process.execArgv, ...(process.env.NODE_OPTIONS || '').split(/\s+/)].includes('--no-async-context-frame');
const exporter = new InMemorySpanExporter();
const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
provider.register();
const sdkManager = context._getContextManager();
const logs = [];
const pkg = require('../..');
const bridge = pkg.register({ logger: (m) => logs.push(m) });

test('this runtime has no AsyncContextFrame', () => {
  assert.ok(major < 22 || flagOff, `Node.js ${process.versions.node} without --no-async-context-frame has it: run this file on Node.js 20, or with NODE_OPTIONS=--no-async-context-frame`);
});

test('register() is off, and says why once', () => {
  assert.equal(bridge.enabled, false);
  assert.match(bridge.reason, /async_context_frame/);
  assert.equal(logs.length, 1, logs.join('\n'));
  assert.match(logs[0], /^@perfprof\/otel-thread-context: off: .*async_context_frame/);
  assert.equal(pkg.register({ logger: (m) => logs.push(m) }), bridge);
  pkg.create({ logger: (m) => logs.push(m) });
  assert.equal(logs.length, 1, 'the same reason is not logged again');
});

test('the SDK keeps its own context manager, and works', async () => {
  assert.equal(context._getContextManager(), sdkManager);
  const tracer = trace.getTracer('fallback');
  await tracer.startActiveSpan('op', async (span) => {
    await new Promise((r) => setTimeout(r, 1));
    assert.equal(trace.getActiveSpan(), span);
    span.end();
  });
  assert.equal(exporter.getFinishedSpans().length, 1);
});

test("an inert bridge's context manager and span processor still work as the SDK's", async () => {
  const b = pkg.create({ logger: () => {} });
  const span = trace.getTracer('fallback').startSpan('x');
  b.spanProcessor.onStart(span, context.active());
  const ctx = trace.setSpan(context.active(), span);
  assert.equal(b.contextManager.with(ctx, () => trace.getSpan(b.contextManager.active())), span);
  b.spanProcessor.onEnd(span);
  span.end();
});

test('no process context is published', () => {
  assert.ok(!/OTEL_CTX/.test(fs.readFileSync('/proc/self/maps', 'utf8')));
});
