'use strict';
// Helpers of the tests: the record the writer would show a reader now.
const { otelThreadCtx } = require('@datadog/pprof');

// current decodes the thread context attached to the running continuation
// (the bytes a reader finds at the end of its walk), or undefined.
function current(keyMap) {
  const tc = otelThreadCtx.getContext();
  if (tc === undefined) return undefined;
  return decode(Buffer.from(tc.debugBytes()), keyMap);
}

function decode(b, keyMap) {
  const rec = {
    traceId: b.subarray(0, 16).toString('hex'),
    spanId: b.subarray(16, 24).toString('hex'),
    valid: b[24],
    flags: b[25],
    attrs: {},
  };
  const size = b.readUInt16LE(26);
  let d = b.subarray(28, 28 + size);
  while (d.length >= 2 && 2 + d[1] <= d.length) {
    rec.attrs[keyMap ? keyMap[d[0]] : d[0]] = d.subarray(2, 2 + d[1]).toString('utf8');
    d = d.subarray(2 + d[1]);
  }
  return rec;
}

// spanOf is what a record of span s must say.
function idsOf(s) {
  const sc = s.spanContext();
  return { traceId: sc.traceId, spanId: sc.spanId };
}

const tick = () => new Promise((r) => setImmediate(r));

module.exports = { current, decode, idsOf, tick };

// processContextOf reads this process's OTEP 4719 mapping as a reader
// would (the header, then the payload it points at): undefined when none is
// published.
function processContextOf() {
  const fs = require('node:fs');
  const line = fs.readFileSync('/proc/self/maps', 'utf8').split('\n')
    .find((l) => /(\/memfd:OTEL_CTX|\[anon:OTEL_CTX\]|\[anon_shmem:OTEL_CTX\])( \(deleted\))?$/.test(l));
  if (!line) return undefined;
  const addr = BigInt('0x' + line.split('-')[0]);
  const fd = fs.openSync('/proc/self/mem', 'r');
  try {
    const hdr = Buffer.alloc(32);
    fs.readSync(fd, hdr, 0, 32, addr);
    const payload = Buffer.alloc(hdr.readUInt32LE(12));
    fs.readSync(fd, payload, 0, payload.length, hdr.readBigUInt64LE(24));
    return { mapping: line.replace(/^.*\s(\S+( \(deleted\))?)$/, '$1'), signature: hdr.subarray(0, 8).toString(), version: hdr.readUInt32LE(8), payload };
  } finally {
    fs.closeSync(fd);
  }
}

module.exports.processContextOf = processContextOf;
