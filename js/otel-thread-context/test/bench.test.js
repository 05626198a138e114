'use strict';
// The benchmark of the README's figures still runs (a short run: its
// numbers are not checked, only that every row has them).
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { execFileSync } = require('node:child_process');

test('bench/bench.js --quick measures every row with and without the bridge', () => {
  const out = JSON.parse(execFileSync(process.execPath, [path.join(__dirname, '..', 'bench', 'bench.js'), '--quick', '--json'], { encoding: 'utf8' }));
  const rows = Object.keys(out.results);
  assert.deepEqual(rows, ['span start+end', 'with (span)', 'with (no span)', 'setAttribute', 'await hop']);
  for (const r of rows) {
    for (const k of ['without', 'with']) assert.ok(out.results[r][k] > 0, `${r} ${k}: ${out.results[r][k]}`);
  }
});
