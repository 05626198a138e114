'use strict';
// The thread-context writer: @datadog/pprof's ThreadContext (OTEP 4947
// records reachable from the thread-local otel_thread_ctx_nodejs_v1, schema
// nodejs_v1_dev). load() returns { api } when this process can publish, or
// { reason } saying why not; it never throws.

function load() {
  if (process.platform !== 'linux') {
    return { reason: `the thread context is read on Linux only (this is ${process.platform})` };
  }
  let pprof;
  try {
    pprof = require('@datadog/pprof');
  } catch (err) {
    return { reason: `@datadog/pprof did not load: ${err.message}` };
  }
  const api = pprof.otelThreadCtx;
  if (!api || typeof api.ThreadContext !== 'function' || typeof api.getContext !== 'function' ||
      typeof api.clearContext !== 'function' || typeof api.getProcessContextAttributes !== 'function') {
    return { reason: '@datadog/pprof has no otelThreadCtx API (5.20.0 or later is needed)' };
  }
  try {
    // Throws when AsyncContextFrame is off (Node.js < 24, or
    // --no-async-context-frame) or V8 keeps internal fields elsewhere: a
    // reader would find nothing or mis-walk, so the schema must not be
    // declared.
    api.getProcessContextAttributes([]);
    // Installs the writer's AsyncLocalStorage and fills this thread's
    // discovery struct now, before the process context names the schema.
    new api.ThreadContext(new Uint8Array(16), new Uint8Array(8), 0, []).run(() => {});
  } catch (err) {
    return { reason: err.message.replace(/\.$/, '') };
  }
  return { api };
}

module.exports = { load };
