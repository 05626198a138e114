'use strict';
// jitburn.js is a Node.js service in miniature for perfprof's JIT symbol test
// (internal/profiler/jit_node_test.go). Run it as
//
//   node --perf-basic-prof --interpreted-frames-native-stack --logfile=/dev/null \
//        --no-turbo-inlining --no-maglev-inlining --no-concurrent-recompilation \
//        --turbo-filter=-burnGamma --sparkplug-filter=-burnGamma \
//        --maglev-filter=-burnGamma jitburn.js
//
// It prints "ready PID BETA_TID GAMMA_TID" once its worker threads run, then
// waits for a line on stdin, so that the profiler sees it start like a
// service that the receiver discovers. Then:
//
//   - main thread (tid PID): loads a pile of startup code, drops it, and
//     burns in burnAlpha, optimized by TurboFan ("JS:*burnAlpha" in the map);
//   - worker "beta": the same, in burnBeta;
//   - worker "gamma": burns in burnGamma, kept in the interpreter
//     ("JS:~burnGamma": with --interpreted-frames-native-stack each
//     interpreted function gets its own copy of the interpreter entry
//     trampoline, which is what the map names).
//
// and prints "burning" once the three burn. From then on each thread spends
// nearly all its CPU in its burn function: a loop of arithmetic without
// calls, run in chunks of some milliseconds from the event loop.
//
// Why the flags: --perf-basic-prof turns V8's own log on as well, which
// --logfile=/dev/null keeps out of the working directory (isolate-*.log).
// --no-turbo-inlining and --no-maglev-inlining keep each burn function in
// its own code: inlined into its caller it would run under the caller's
// name, as the perf map has no inlining information (Maglev, on from
// Node.js 22, inlines burnGamma into chunk otherwise). --no-concurrent-recompilation
// optimizes a function on its own thread, so that after a deoptimization
// (see below) it runs optimized again within milliseconds even on a busy
// machine: a background compile waits for a CPU, and meanwhile the function
// runs as Sparkplug code, whose leaves are builtins of node, not the
// function. The filters keep burnGamma out of TurboFan, Maglev and
// Sparkplug without disabling its optimization (%NeverOptimizeFunction would, and V8
// then logs it as "JS:burnGamma", without the "~").
//
// Why the churn: V8 puts new code in code-space memory freed by the GC, so
// an address is named by several map lines over time, the last one right.
// The startup code (many small modules, as an instrumented service loads
// at start) dies and is collected; every CHURN_CHUNKS chunks a little more
// code is compiled and dropped (as template engines and validators do);
// and every KIND_CHUNKS chunks the burn functions meet a kind of work
// their optimized code has not seen, so V8 deoptimizes them and optimizes
// them again into new, often reused, memory: the hot code moves while the
// service runs.
const { Worker, isMainThread, parentPort, workerData } = require('node:worker_threads');
const { readlinkSync } = require('node:fs');

// A chunk of burnAlpha or burnBeta takes ~13 ms of CPU: a new kind every
// ~0.4 s of CPU and churn every ~0.5 s.
const BURN_N = 5000000;
const KIND_CHUNKS = 30;
const CHURN_CHUNKS = 40;

// burnAlpha is the main thread's work. A kind it has not run before has no
// type feedback in the optimized code, which deoptimizes on it.
function burnAlpha(n, kind) {
  let x = 1;
  for (let i = 0; i < n; i++) {
    switch (kind) {
      case 0: x = (x * 31 + i) & 0xffff; break;
      case 1: x = (x * 37 + i) & 0xffff; break;
      case 2: x = (x * 41 + i) & 0xfff; break;
      case 3: x = (x * 43 + i) | 0; break;
      case 4: x = ((x ^ i) * 3) & 0xffff; break;
      case 5: x = (x + i * 5) & 0x7fff; break;
      case 6: x = (x * 7 - i) & 0xffff; break;
      case 7: x = ((x << 2) + i) & 0xffff; break;
      case 8: x = ((x >> 1) + i * 9) & 0xffff; break;
      case 9: x = ((x | i) * 5) & 0x3fff; break;
      case 10: x = (x * 13 - (i & 7)) & 0xffff; break;
      case 11: x = ((x ^ (i << 1)) + 3) & 0xfff; break;
      case 12: x = ((x >>> 2) + i * 11) & 0xffff; break;
      case 13: x = (x * 3 + (i ^ 5)) & 0x7fff; break;
      default: x = (x * 11 + i) & 0x3fff;
    }
  }
  return x;
}

// burnBeta is worker beta's work, like burnAlpha.
function burnBeta(n, kind) {
  let x = 7;
  for (let i = 0; i < n; i++) {
    switch (kind) {
      case 0: x = (x * 17 + i) & 0xffff; break;
      case 1: x = (x * 19 + i) & 0xffff; break;
      case 2: x = (x * 23 + i) & 0xfff; break;
      case 3: x = (x * 29 + i) | 0; break;
      case 4: x = ((x ^ i) * 5) & 0xffff; break;
      case 5: x = (x + i * 3) & 0x7fff; break;
      case 6: x = (x * 9 - i) & 0xffff; break;
      case 7: x = ((x << 3) + i) & 0xffff; break;
      case 8: x = ((x >> 2) + i * 7) & 0xffff; break;
      case 9: x = ((x | i) * 3) & 0x3fff; break;
      case 10: x = (x * 11 - (i & 3)) & 0xffff; break;
      case 11: x = ((x ^ (i << 2)) + 5) & 0xfff; break;
      case 12: x = ((x >>> 1) + i * 13) & 0xffff; break;
      case 13: x = (x * 5 + (i ^ 3)) & 0x7fff; break;
      default: x = (x * 13 + i) & 0x3fff;
    }
  }
  return x;
}

// burnGamma is worker gamma's work, interpreted. Its values stay small
// integers, so the bytecode handlers never allocate or call out.
function burnGamma(n) {
  let x = 3;
  for (let i = 0; i < n; i++) x = (x * 13 + i) & 0xffff;
  return x;
}

// loadModules compiles count made-up modules of fns distinct functions and
// calls each function calls times: with enough calls V8 compiles them with
// Sparkplug or TurboFan too. Nothing keeps them once it returns.
let modules = 0;
function loadModules(count, fns, calls, iters) {
  let sink = 0;
  for (let m = 0; m < count; m++) {
    const id = ++modules;
    let src = '';
    const names = [];
    for (let f = 0; f < fns; f++) {
      names.push(`m${id}_f${f}`);
      src += `function m${id}_f${f}(a, b) { let s = a ^ ${id * 31 + f}; ` +
        `for (let i = 0; i < b; i++) s = (s + i * ${f + 1}) % ${1000 + id}; return s; }\n`;
    }
    const exported = new Function(`${src}return [${names.join(', ')}];`)();
    for (const fn of exported) for (let c = 0; c < calls; c++) sink ^= fn(c, iters);
  }
  return sink;
}

// garbage allocates short-lived objects, so that the GC runs.
function garbage(n) {
  const keep = [];
  for (let k = 0; k < n; k++) keep.push({ k, s: 'v' + k, a: [k, k + 1] });
  return keep.length;
}

// startup loads what an instrumented service loads before it serves: lots
// of code, some of it hot for a while, and garbage; all of it dies.
function startup() {
  let sink = loadModules(120, 10, 3, 50);
  sink ^= loadModules(12, 5, 300, 200);
  for (let r = 0; r < 6; r++) sink ^= garbage(100000);
  return sink;
}

// serve runs burn(n, kind) from the event loop until the process is killed,
// with a little code churn every churnEvery chunks (0: none) and a new kind
// every kindEvery chunks (0: none). Counting chunks, not time, keeps the
// share of the churn and of the recompilations in the thread's CPU the
// same on a machine busy with other work. onFirst runs after the first
// chunk.
function serve(burn, n, churnEvery, kindEvery, onFirst) {
  let chunks = 0;
  let sink = 0;
  function chunk() {
    sink ^= burn(n, kindEvery ? Math.floor(chunks / kindEvery) : 0);
    chunks++;
    if (churnEvery && chunks % churnEvery === 0) sink ^= loadModules(2, 5, 3, 20) ^ garbage(2000);
    if (onFirst) {
      onFirst();
      onFirst = null;
    }
    setImmediate(chunk);
  }
  chunk();
}

// threadID returns the Linux tid of the calling thread.
function threadID() {
  return Number(readlinkSync('/proc/thread-self').split('/').pop());
}

if (isMainThread) {
  const workers = [];
  const tids = {};
  let burning = 0;
  const burned = () => {
    if (++burning === 3) process.stdout.write('burning\n');
  };
  for (const role of ['beta', 'gamma']) {
    const w = new Worker(__filename, { workerData: { role } });
    workers.push(w);
    w.on('message', (m) => {
      if (m === 'burning') return burned();
      tids[role] = m;
      if (tids.beta && tids.gamma) process.stdout.write(`ready ${process.pid} ${tids.beta} ${tids.gamma}\n`);
    });
    w.on('error', (err) => {
      process.stderr.write(`worker ${role}: ${err.stack}\n`);
      process.exit(1);
    });
  }
  process.stdin.once('data', () => {
    process.stdin.pause();
    for (const w of workers) w.postMessage('go');
    startup();
    serve(burnAlpha, BURN_N, CHURN_CHUNKS, KIND_CHUNKS, burned);
  });
} else {
  parentPort.postMessage(threadID());
  parentPort.once('message', () => {
    const burned = () => parentPort.postMessage('burning');
    if (workerData.role === 'gamma') return serve(burnGamma, 100000, 0, 0, burned);
    startup();
    serve(burnBeta, BURN_N, CHURN_CHUNKS, KIND_CHUNKS, burned);
  });
}
