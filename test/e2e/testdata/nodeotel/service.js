'use strict';
// service.js is the HTTP service of ../noderoutes.js traced by the
// OpenTelemetry JS SDK 2.x (NodeSDK, instrumentation-http, the OTLP/HTTP
// protobuf exporter), for test/e2e's TestNodeBridgeSpanAttribution. Its
// packages are the bridge's (js/otel-thread-context, whose tests run the
// same SDK): make node-deps installs them there. Run it with Node.js 24 as
//
//   node --perf-basic-prof --interpreted-frames-native-stack --logfile=/dev/null \
//        --no-turbo-inlining --no-maglev-inlining service.js DIR
//
// with OTEL_EXPORTER_OTLP_TRACES_ENDPOINT naming the collector's OTLP/HTTP
// endpoint, and BRIDGE=1 to install the bridge (its one line); without it
// the service is what an app without the bridge is. Every span carries
// thread.id (the JS thread is the main thread: its id is the pid), as the
// README's thread join asks, so that the run without the bridge measures
// that join. It prints "ready PID PORT".
process.env.OTEL_LOGS_EXPORTER = 'none';
process.env.OTEL_METRICS_EXPORTER = 'none';
const path = require('node:path');
const { createRequire } = require('node:module');

const bridgeDir = path.join(__dirname, '..', '..', '..', '..', 'js', 'otel-thread-context');
const pkg = createRequire(path.join(bridgeDir, 'package.json'));
const { NodeSDK } = pkg('@opentelemetry/sdk-node');
const { BatchSpanProcessor } = pkg('@opentelemetry/sdk-trace-base');
const { OTLPTraceExporter } = pkg('@opentelemetry/exporter-trace-otlp-proto');
const { HttpInstrumentation } = pkg('@opentelemetry/instrumentation-http');
const { trace } = pkg('@opentelemetry/api');

// threadID puts the OS thread id on every span: the main thread's, which
// runs the JS (a worker thread's would be another).
const threadID = {
  onStart(span) { span.setAttribute('thread.id', process.pid); },
  onEnd() {},
  forceFlush() { return Promise.resolve(); },
  shutdown() { return Promise.resolve(); },
};

const sdk = new NodeSDK({
  serviceName: 'nodeotel',
  spanProcessors: [threadID, new BatchSpanProcessor(new OTLPTraceExporter(),
    { scheduledDelayMillis: 200, maxQueueSize: 65536, maxExportBatchSize: 4096 })],
  instrumentations: [new HttpInstrumentation()],
});
sdk.start();
if (process.env.BRIDGE === '1') {
  // The one line an app adds.
  const bridge = require(bridgeDir).register({ attributes: ['http.route'] });
  if (!bridge.enabled) {
    console.error(`the bridge is off: ${bridge.reason}`);
    process.exit(2);
  }
}
// After sdk.start(): instrumentation-http patches node:http as it is
// required.
const { serve } = require('../noderoutes.js');
const server = serve({
  setRoute(route) { trace.getActiveSpan()?.setAttribute('http.route', route); },
  ids() {
    const span = trace.getActiveSpan();
    if (!span) return '- -';
    const c = span.spanContext();
    return c.traceId + ' ' + c.spanId;
  },
}, process.argv[2] || '.');
process.on('SIGTERM', () => {
  server.close();
  sdk.shutdown().finally(() => process.exit(0));
});
