'use strict';
// The OTEP 4719 process context: a memory mapping named OTEL_CTX holding
// the resource (service.name, ...) and the thread-local schema and key map,
// which an out-of-process reader finds in /proc/PID/maps. JavaScript cannot
// memfd_create, mmap or prctl, so the publication goes through a native
// addon: the prebuilt process_discovery-napi.node of
// @datadog/libdatadog-extras (libdatadog's OTEP 4719 writer, the one
// dd-trace publishes with). It names the mapping /memfd:OTEL_CTX (or
// [anon:OTEL_CTX] where memfd is refused) and updates it in place when
// called again.
//
// Its fixed parts: telemetry.sdk.name is "libdatadog", and it prepends
// "datadog.local_root_span_id" at index 0 of threadlocal.attribute_key_map;
// the bridge's key map starts with that key for that reason.

const os = require('node:os');
const crypto = require('node:crypto');

const LOCAL_ROOT_KEY = 'datadog.local_root_span_id';

let discovery; // the loaded addon, or null when it did not load
let loadError;
const instanceId = crypto.randomUUID(); // service.instance.id when the resource has none
let handle; // keeps the mapping's memfd open for the life of the process

function loadDiscovery() {
  if (discovery !== undefined) return discovery;
  try {
    const extras = require('@datadog/libdatadog-extras');
    discovery = extras.load('process-discovery');
    if (typeof discovery.TracerMetadata !== 'function' || typeof discovery.storeMetadata !== 'function') {
      throw new Error('process-discovery has no TracerMetadata/storeMetadata');
    }
  } catch (err) {
    loadError = err;
    discovery = null;
  }
  return discovery;
}

// publish writes (or rewrites) the process context. res: service.name,
// service.version, service.instance.id, deployment.environment.name;
// keys: the record keys after index 0; schemaVersion: nodejs_v1_dev.
// It returns undefined, or why it could not publish.
function publish(res, keys, schemaVersion, sdkVersion) {
  const pd = loadDiscovery();
  if (!pd) return `@datadog/libdatadog-extras' process-discovery did not load: ${loadError && loadError.message}`;
  try {
    const md = new pd.TracerMetadata(
      res['service.instance.id'] || instanceId,
      sdkVersion,
      os.hostname(),
      res['service.name'] || null,
      res['deployment.environment.name'] || null,
      res['service.version'] || null,
      null, // process tags (Datadog's)
      null, // container id: the reader knows it from the cgroup
      { attributeKeys: keys, schemaVersion, extraAttributes: [] },
    );
    handle = pd.storeMetadata(md);
  } catch (err) {
    return `publishing the process context failed: ${err.message}`;
  }
  return undefined;
}

module.exports = { publish, LOCAL_ROOT_KEY, published: () => handle !== undefined };
