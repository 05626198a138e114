'use strict';
// writer.js runs a request's span as a Node.js thread context (schema
// nodejs_v1_dev, @datadog/pprof's ThreadContext) for internal/otelctx's
// TestNodeRecordLive. Run it with Node.js 24 (AsyncContextFrame) as
//
//   node writer.js DIR
//
// It prints "ready PID", then blocks its one JS thread inside the
// context's run() (Atomics.wait: the thread is stopped in the context, as
// a sample finds it) until DIR/out exists; then it leaves run(), prints
// "out" and blocks outside any context until DIR/done exists.
const fs = require('node:fs');
const path = require('node:path');
const { otelThreadCtx } = require('@datadog/pprof');
const { ThreadContext } = otelThreadCtx;

const dir = process.argv[2];
const trace = Uint8Array.from(Buffer.from('0102030405060708090a0b0c0d0e0f10', 'hex'));
const span = Uint8Array.from(Buffer.from('a1a2a3a4a5a6a7a8', 'hex'));
const ctx = new ThreadContext(trace, span, 1, ['GET /checkout', 'v1']);
const sab = new Int32Array(new SharedArrayBuffer(4));
function waitFor(name) {
  const deadline = Date.now() + 60_000;
  while (!fs.existsSync(path.join(dir, name)) && Date.now() < deadline) Atomics.wait(sab, 0, 0, 20);
}
ctx.run(() => {
  console.log('ready', process.pid);
  waitFor('out');
});
console.log('out');
waitFor('done');
