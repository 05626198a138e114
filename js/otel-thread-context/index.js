'use strict';
// @perfprof/otel-thread-context: the OpenTelemetry JS SDK 2.x bridge to the
// Node.js thread context (OTEP 4947 records, schema nodejs_v1_dev, written
// by @datadog/pprof's ThreadContext) and the OTEP 4719 process context, so
// that an out-of-process profiler reads, at each sample, the span that was
// running on the JS thread.
//
// - ThreadContextSpanProcessor: on span start, builds the span's
//   ThreadContext (trace id, span id, trace flags, the configured
//   attributes) and caches it on the span (a WeakMap); keeps the configured
//   attributes current when they are set later; invalidates it on end.
// - ThreadContextManager: the SDK's AsyncLocalStorageContextManager, whose
//   with() also runs the callback inside the active span's
//   ThreadContext.run(), so that the record follows the continuation
//   through every await (AsyncContextFrame), and outside any recorded span
//   runs it with no record.
// - The process context: the schema, the attribute key map and the
//   resource, published once at start and again with the SDK's resource at
//   the first span.

const { isMainThread } = require('node:worker_threads');
const { context: contextApi, trace } = require('@opentelemetry/api');
const { AsyncLocalStorageContextManager } = require('@opentelemetry/context-async-hooks');
const writer = require('./lib/writer');
const processContext = require('./lib/process-context');

const VERSION = require('./package.json').version;
const DEFAULT_ATTRIBUTES = Object.freeze(['http.route']);
// The key under which @opentelemetry/core keeps RPCMetadata in a context
// (createContextKey is Symbol.for): frameworks' instrumentations set
// rpcMetadata.route when their router matched, and instrumentation-http
// copies it to the span's http.route only at the response's end.
const RPC_METADATA_KEY = Symbol.for('OpenTelemetry SDK Context Key RPC_METADATA');
const HTTP_ROUTE = 'http.route';

let warned = new Set();
function warnOnce(log, msg) {
  if (warned.has(msg)) return;
  warned.add(msg);
  log(`@perfprof/otel-thread-context: ${msg}`);
}
const defaultLog = (msg) => console.warn(msg);

const HEX = new Uint8Array(128);
for (let i = 0; i < 16; i++) HEX['0123456789abcdef'.charCodeAt(i)] = i;
for (let i = 10; i < 16; i++) HEX['ABCDEF'.charCodeAt(i - 10)] = i;
// The ids are copied into the record by the ThreadContext constructor, so
// one pair of buffers serves every span.
const traceIdBuf = new Uint8Array(16);
const spanIdBuf = new Uint8Array(8);
function hexBytes(hex, b) {
  if (hex.length !== 2 * b.length) {
    b.fill(0);
    return b;
  }
  for (let i = 0; i < b.length; i++) b[i] = (HEX[hex.charCodeAt(2 * i) & 127] << 4) | HEX[hex.charCodeAt(2 * i + 1) & 127];
  return b;
}

function attrString(v) {
  if (v === undefined || v === null) return undefined;
  if (typeof v === 'string') return v;
  if (Array.isArray(v)) return v.map(String).join(',');
  return String(v);
}

// SpanState is what the bridge keeps per recorded span: its ThreadContext,
// the attribute values last written (by record key index), and whether the
// route of its RPC metadata is watched.
class SpanState {
  constructor(tc, values) {
    this.tc = tc;
    this.values = values;
    this.rpcWatched = false;
  }

  set(index, value) {
    const s = attrString(value);
    if (s === undefined || this.values[index] === s) return;
    this.values[index] = s;
    const a = new Array(index + 1);
    a[index] = s;
    this.tc.appendAttributes(a); // the last entry of a key wins (OTEP 4947)
  }
}

class ThreadContextBridge {
  constructor(options = {}) {
    const attributes = options.attributes === undefined ? DEFAULT_ATTRIBUTES : options.attributes;
    if (!Array.isArray(attributes) || attributes.some((k) => typeof k !== 'string' || k === '')) {
      throw new TypeError('attributes must be an array of attribute names');
    }
    if (new Set(attributes).size !== attributes.length || attributes.includes(processContext.LOCAL_ROOT_KEY)) {
      throw new TypeError('attributes must be unique and not name ' + processContext.LOCAL_ROOT_KEY);
    }
    if (attributes.length > 255) throw new RangeError('at most 255 attributes');
    this._log = options.logger || defaultLog;
    this.attributes = Object.freeze(attributes.slice());
    // Record key index i is keyMap[i]: the local root span's id, then the
    // configured attributes.
    this.keyMap = Object.freeze([processContext.LOCAL_ROOT_KEY, ...attributes]);
    this._keyIndex = new Map(attributes.map((k, i) => [k, i + 1]));
    this._routeIndex = this._keyIndex.get(HTTP_ROUTE);
    this._states = new WeakMap();
    this._patched = new WeakSet();
    this._resourceSeen = false;

    const w = writer.load();
    this._api = w.api;
    this.enabled = w.api !== undefined;
    this.reason = w.reason;
    if (!this.enabled) {
      warnOnce(this._log, `off: ${w.reason}; spans are not published as thread contexts`);
    }
    this.contextManager = new ThreadContextManager(this);
    this.spanProcessor = new ThreadContextSpanProcessor(this);

    // One process context per process: a worker thread's bridge writes its
    // records with the same key map, and leaves the publication to the
    // main thread's.
    this._publishing = this.enabled && options.processContext !== false && isMainThread;
    this._resource = resourceFromEnv();
    this._serviceNameOption = options.serviceName;
    if (options.serviceName) this._resource['service.name'] = options.serviceName;
    if (this._publishing && !options._deferPublish) this._publish();
  }

  _disable(why) {
    warnOnce(this._log, `off: ${why}`);
    this.enabled = false;
    this._publishing = false;
    this.reason = why;
  }

  // processContextAttributes are the threadlocal.* attributes of the OTEP
  // 4719 process context that describe this bridge's records, for an app
  // that publishes its process context itself (processContext: false).
  get processContextAttributes() {
    if (!this.enabled) return undefined;
    return this._api.getProcessContextAttributes(this.keyMap.slice());
  }

  _publish() {
    const schema = this._api.getProcessContextAttributes(this.keyMap.slice())['threadlocal.schema_version'];
    const why = processContext.publish(this._resource, this.attributes.slice(), schema, VERSION);
    if (why) {
      this._publishing = false;
      warnOnce(this._log, `the process context is not published (${why}); a profiler will not find the thread contexts`);
    }
  }

  // _sawResource republishes the process context with the SDK's resource
  // when the first span shows it, if it says something else.
  _sawResource(resource) {
    this._resourceSeen = true;
    const attrs = resource && resource.attributes;
    if (!attrs || !this._publishing) return;
    let changed = false;
    for (const k of ['service.name', 'service.version', 'service.instance.id', 'deployment.environment.name']) {
      if (k === 'service.name' && this._serviceNameOption) continue; // the app's word wins
      const v = attrString(attrs[k]);
      if (v !== undefined && this._resource[k] !== v) {
        this._resource[k] = v;
        changed = true;
      }
    }
    if (changed) this._publish();
  }

  _start(span, parentContext) {
    const sc = span.spanContext();
    const values = new Array(this.keyMap.length);
    const parent = span.parentSpanContext;
    if (!parent || parent.isRemote) {
      values[0] = sc.spanId;
    } else {
      const ps = trace.getSpan(parentContext);
      const pst = ps === undefined ? undefined : this._states.get(ps);
      if (pst !== undefined) values[0] = pst.values[0];
    }
    const attrs = span.attributes;
    if (attrs) {
      for (let i = 0; i < this.attributes.length; i++) values[i + 1] = attrString(attrs[this.attributes[i]]);
    }
    const tc = new this._api.ThreadContext(hexBytes(sc.traceId, traceIdBuf), hexBytes(sc.spanId, spanIdBuf), sc.traceFlags & 0xff, values);
    this._states.set(span, new SpanState(tc, values));
    this._patch(Object.getPrototypeOf(span));
  }

  // _patch wraps setAttribute of the SDK's span class once, so that the
  // configured attributes set after the start reach the record.
  _patch(proto) {
    if (this._patched.has(proto) || typeof proto.setAttribute !== 'function') return;
    this._patched.add(proto);
    const bridge = this;
    const orig = proto.setAttribute;
    proto.setAttribute = function setAttribute(key, value) {
      const r = orig.call(this, key, value);
      const i = bridge._keyIndex.get(key);
      if (i !== undefined) {
        const st = bridge._states.get(this);
        if (st !== undefined) st.set(i, this.attributes ? this.attributes[key] : value);
      }
      return r;
    };
  }

  _end(span) {
    const st = this._states.get(span);
    if (st === undefined) return;
    this._states.delete(span);
    st.tc.invalidate(); // every frame that holds it: the reader sees no span
    if (this._api.getContext() === st.tc) this._api.clearContext(); // this continuation runs no span any more
  }

  // _watchRoute follows the route that a framework sets on the request's
  // RPC metadata into the record's http.route, as soon as it is set.
  _watchRoute(ctx, span, st) {
    const rpc = ctx.getValue(RPC_METADATA_KEY);
    if (rpc === undefined || rpc === null || rpc.span !== span) return;
    st.rpcWatched = true;
    const index = this._routeIndex;
    let route = rpc.route;
    try {
      Object.defineProperty(rpc, 'route', {
        configurable: true,
        enumerable: true,
        get() { return route; },
        set(v) { route = v; st.set(index, v); },
      });
    } catch {
      return; // frozen: the span's own http.route still counts
    }
    if (route !== undefined) st.set(index, route);
  }
}

// resourceFromEnv reads the resource attributes the process context carries
// from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, as the SDK does.
function resourceFromEnv() {
  const res = {};
  for (const kv of (process.env.OTEL_RESOURCE_ATTRIBUTES || '').split(',')) {
    const i = kv.indexOf('=');
    if (i <= 0) continue;
    try {
      res[decodeURIComponent(kv.slice(0, i).trim())] = decodeURIComponent(kv.slice(i + 1).trim());
    } catch {
      // a malformed pair is skipped, as the SDK's env detector does
    }
  }
  if (process.env.OTEL_SERVICE_NAME) res['service.name'] = process.env.OTEL_SERVICE_NAME;
  if (!res['service.name']) res['service.name'] = 'unknown_service:node';
  return res;
}

function runIn(tc, fn, thisArg, args) {
  return tc.run(() => fn.apply(thisArg, args));
}

function runDetached(api, fn, thisArg, args) {
  const prior = api.getContext();
  api.clearContext();
  try {
    return fn.apply(thisArg, args);
  } finally {
    if (prior !== undefined) prior.enter();
  }
}

// ThreadContextManager is the SDK's AsyncLocalStorageContextManager whose
// with() also enters the thread context of the span active in the context
// it runs (trace.getSpan(context)). bind() goes through with().
class ThreadContextManager extends AsyncLocalStorageContextManager {
  constructor(bridge) {
    super();
    if (!(bridge instanceof ThreadContextBridge)) throw new TypeError('use create().contextManager');
    this._bridge = bridge;
  }

  with(ctx, fn, thisArg, ...args) {
    const b = this._bridge;
    if (!b.enabled) return super.with(ctx, fn, thisArg, ...args);
    const span = trace.getSpan(ctx);
    const st = span === undefined ? undefined : b._states.get(span);
    if (st !== undefined) {
      if (!st.rpcWatched && b._routeIndex !== undefined) b._watchRoute(ctx, span, st);
      return this._asyncLocalStorage.run(ctx, runIn, st.tc, fn, thisArg, args);
    }
    if (b._api.getContext() === undefined) return super.with(ctx, fn, thisArg, ...args);
    return this._asyncLocalStorage.run(ctx, runDetached, b._api, fn, thisArg, args);
  }

  attach(ctx) {
    const token = super.attach(ctx);
    const b = this._bridge;
    if (!b.enabled) return token;
    const api = b._api;
    const prior = api.getContext();
    const span = trace.getSpan(ctx);
    const st = span === undefined ? undefined : b._states.get(span);
    if (st !== undefined) st.tc.enter();
    else if (prior !== undefined) api.clearContext();
    let disposed = false;
    return {
      dispose() {
        if (disposed) return;
        disposed = true;
        token.dispose();
        if (prior !== undefined) prior.enter();
        else api.clearContext();
      },
    };
  }
}

// ThreadContextSpanProcessor gives each recorded span its thread context.
// It exports nothing: put it before the exporting processors.
class ThreadContextSpanProcessor {
  constructor(bridge) {
    if (!(bridge instanceof ThreadContextBridge)) throw new TypeError('use create().spanProcessor');
    this._bridge = bridge;
  }

  onStart(span, parentContext) {
    const b = this._bridge;
    if (!b.enabled) return;
    if (!b._resourceSeen) b._sawResource(span.resource);
    b._start(span, parentContext);
  }

  onEnd(span) {
    if (this._bridge.enabled) this._bridge._end(span);
  }

  forceFlush() { return Promise.resolve(); }

  shutdown() { return Promise.resolve(); }
}

let registered;

// create makes a bridge for explicit wiring: pass bridge.contextManager and
// bridge.spanProcessor (first) to the SDK (NodeSDK, NodeTracerProvider).
function create(options) {
  return new ThreadContextBridge(options);
}

// register installs a bridge in an app whose SDK is already started
// (NodeSDK.start() or NodeTracerProvider.register()): it replaces the
// global context manager with the bridge's, and adds the bridge's span
// processor to the global SDK TracerProvider. On a Node.js that cannot
// publish (no AsyncContextFrame: before 24) it logs once why and changes
// nothing. Later calls return the first bridge.
function register(options = {}) {
  if (registered) return registered;
  const bridge = create({ ...options, _deferPublish: true });
  registered = bridge;
  if (!bridge.enabled) return bridge;
  const provider = options.tracerProvider || trace.getTracerProvider();
  const sdk = typeof provider.getDelegate === 'function' ? provider.getDelegate() : provider;
  // The SDK 2.x TracerProvider keeps its processors in a MultiSpanProcessor
  // (_activeSpanProcessor._spanProcessors), the list its own forceFlush
  // walks; 2.x has no public way to add one after construction.
  const multi = sdk && sdk._activeSpanProcessor;
  if (!multi || !Array.isArray(multi._spanProcessors)) {
    bridge._disable('no OpenTelemetry SDK 2.x TracerProvider is registered: call register() after sdk.start() ' +
      '(or provider.register()), or pass create().contextManager and create().spanProcessor to the SDK');
    return bridge;
  }
  multi._spanProcessors.unshift(bridge.spanProcessor);
  bridge.contextManager.enable();
  contextApi.disable(); // the SDK's context manager: register() runs at start, before any request
  contextApi.setGlobalContextManager(bridge.contextManager);
  if (bridge._publishing) bridge._publish();
  return bridge;
}

module.exports = {
  register,
  create,
  ThreadContextBridge,
  ThreadContextManager,
  ThreadContextSpanProcessor,
  DEFAULT_ATTRIBUTES,
  LOCAL_ROOT_KEY: processContext.LOCAL_ROOT_KEY,
  VERSION,
  _resetForTests() { registered = undefined; warned = new Set(); },
};
