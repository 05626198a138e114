'use strict';
// What the bridge costs, per operation, on this machine: the same SDK
// 2.x TracerProvider and AsyncLocalStorageContextManager with and without
// it, each measured in a process of its own (without: the bridge is never
// loaded, so the span class is not wrapped), alternately in rounds; the
// medians are printed.
//
//   node bench/bench.js            # Node.js 24; prints a markdown table
//   node bench/bench.js --quick    # a short run (the tests use it)
//   node bench/bench.js --json     # the medians as JSON
//
// Rows:
//   span start+end   tracer.startSpan() then span.end(), attributes at start
//   with (span)      contextManager.with(a context holding a span, fn)
//   with (no span)   with(a context holding no span, fn) while a span's
//                    record is attached (the bridge detaches it, then
//                    restores it)
//   setAttribute     span.setAttribute('http.route', a new value)
//   await hop        one `await null` inside a span's context
const { performance } = require('node:perf_hooks');
const { trace, ROOT_CONTEXT } = require('@opentelemetry/api');
const { BasicTracerProvider } = require('@opentelemetry/sdk-trace-base');
const { AsyncLocalStorageContextManager } = require('@opentelemetry/context-async-hooks');

const { execFileSync } = require('node:child_process');

const quick = process.argv.includes('--quick');
const asJSON = process.argv.includes('--json');
const child = (process.argv.find((a) => a.startsWith('--child=')) || '').slice(8);
const N = quick ? 2000 : 200000;
const ROUNDS = quick ? 3 : 9;

// A processor that keeps nothing, standing for the app's exporting one.
const sink = { onStart() {}, onEnd() {}, forceFlush: async () => {}, shutdown: async () => {} };

function setup(kind) {
  if (kind === 'without') {
    return {
      tracer: new BasicTracerProvider({ spanProcessors: [sink] }).getTracer('bench'),
      cm: new AsyncLocalStorageContextManager().enable(),
    };
  }
  const bridge = require('..').create({ attributes: ['http.route'], processContext: false });
  if (!bridge.enabled) {
    console.error(`the bridge is off here (${bridge.reason}): run with Node.js 24`);
    process.exit(2);
  }
  return {
    tracer: new BasicTracerProvider({ spanProcessors: [bridge.spanProcessor, sink] }).getTracer('bench'),
    cm: bridge.contextManager.enable(),
  };
}

function nsPer(n, fn) {
  const t0 = performance.now();
  fn(n);
  return ((performance.now() - t0) * 1e6) / n;
}

async function nsPerAsync(n, fn) {
  const t0 = performance.now();
  await fn(n);
  return ((performance.now() - t0) * 1e6) / n;
}

const attrs = { 'http.route': '/users/:id', 'http.request.method': 'GET' };
const noop = () => 0;

const cases = {
  'span start+end': (s) => nsPer(N, (n) => {
    for (let i = 0; i < n; i++) s.tracer.startSpan('op', { attributes: attrs }).end();
  }),
  'with (span)': (s) => {
    const span = s.tracer.startSpan('op');
    const ctx = trace.setSpan(ROOT_CONTEXT, span);
    const r = nsPer(N, (n) => { for (let i = 0; i < n; i++) s.cm.with(ctx, noop); });
    span.end();
    return r;
  },
  'with (no span)': (s) => {
    const span = s.tracer.startSpan('op');
    const r = s.cm.with(trace.setSpan(ROOT_CONTEXT, span), () =>
      nsPer(N, (n) => { for (let i = 0; i < n; i++) s.cm.with(ROOT_CONTEXT, noop); }));
    span.end();
    return r;
  },
  setAttribute: (s) => {
    // A fresh span every 8 values: the record's room (640 bytes) is not
    // what is measured.
    return nsPer(N, (n) => {
      let span;
      for (let i = 0; i < n; i++) {
        if (i % 8 === 0) { if (span) span.end(); span = s.tracer.startSpan('op'); }
        span.setAttribute('http.route', i & 1 ? '/a' : '/b');
      }
      span.end();
    });
  },
  'await hop': (s) => {
    const span = s.tracer.startSpan('op');
    const r = s.cm.with(trace.setSpan(ROOT_CONTEXT, span), () =>
      nsPerAsync(N, async (n) => { for (let i = 0; i < n; i++) await null; }));
    return r.then((v) => { span.end(); return v; });
  },
};

function median(a) {
  const s = [...a].sort((x, y) => x - y);
  return s[Math.floor(s.length / 2)];
}

// runChild measures every case once, after a warm-up run, in this process.
async function runChild(kind) {
  const s = setup(kind);
  const out = {};
  for (const [name, fn] of Object.entries(cases)) {
    await fn(s);
    out[name] = await fn(s);
  }
  console.log(JSON.stringify(out));
}

async function main() {
  if (child) return runChild(child);
  const got = { without: [], with: [] };
  for (let r = 0; r < ROUNDS; r++) {
    for (const k of r % 2 ? ['with', 'without'] : ['without', 'with']) {
      const args = [__filename, `--child=${k}`, ...(quick ? ['--quick'] : [])];
      got[k].push(JSON.parse(execFileSync(process.execPath, args, { encoding: 'utf8' })));
    }
  }
  const results = {};
  for (const name of Object.keys(cases)) {
    const without = median(got.without.map((g) => g[name]));
    const withIt = median(got.with.map((g) => g[name]));
    results[name] = { without, with: withIt, cost: withIt - without };
  }
  if (asJSON) {
    console.log(JSON.stringify({ node: process.version, n: N, rounds: ROUNDS, results }));
    return;
  }
  console.log(`Node.js ${process.version}, ${N} operations, ${ROUNDS} processes each, medians (ns per operation)\n`);
  console.log('| operation | without the bridge | with it | cost |');
  console.log('|---|---:|---:|---:|');
  for (const [name, r] of Object.entries(results)) {
    console.log(`| ${name} | ${r.without.toFixed(0)} | ${r.with.toFixed(0)} | ${r.cost >= 0 ? '+' : ''}${r.cost.toFixed(0)} |`);
  }
}

main();
