// The scoped views of the HTML view (see page.js for how the page's files
// fit together): the flamegraph of one span (its samples and its
// descendants'), of all spans of a name, of a poll or of a brushed range of
// a lane, and the differential flamegraph of a name's slowest 10% against
// the rest; the header that says where the wall time went; the spans panel.
//
// Scoped trees are cut from D.all, the tree of every sample, so that they
// have the shape the Go trees have (frames merged by function, children by
// name) and the flamegraph draws them with the same code. The samples come
// from D.detail (see scope.go for its layout), inflated after the first
// draw.

// scopeView wires the spans panel, the scope header and the timeline's
// clicks (hooks, see timelineView) to the flamegraph.
function scopeView(D, ui, flame, timeline, hooks) {
  const { V, $, fmtInt, fmtNs } = ui;
  const B = D.bars;
  let X = null; // the decoded detail
  let loading = null;

  // ---- the tree of all samples: parent and subtree end of each node ----
  const A = (() => {
    const f = D.all;
    const n = f.fn.length;
    const parent = new Int32Array(n);
    const end = new Int32Array(n);
    const path = [];
    for (let i = 0; i < n; i++) {
      const d = f.depth[i];
      while (path.length > d) end[path.pop()] = i;
      parent[i] = d ? path[d - 1] : -1;
      path.push(i);
    }
    while (path.length) end[path.pop()] = n;
    return { f, n, parent, end };
  })();

  // ---- the detail: gzip in base64, inflated by the browser ----
  async function inflate(b64) {
    const bin = atob(b64);
    const z = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) z[i] = bin.charCodeAt(i);
    const stream = new Blob([z]).stream().pipeThrough(new DecompressionStream('gzip'));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }
  function decode(buf) {
    let pos = 0;
    // Unsigned LEB128; by multiplication, since values pass 2^31.
    const u = () => {
      let x = 0;
      let mul = 1;
      let b;
      do {
        b = buf[pos++];
        x += (b & 127) * mul;
        mul *= 128;
      } while (b & 128);
      return x;
    };
    const z = () => {
      const v = u();
      return v % 2 ? -(v + 1) / 2 : v / 2;
    };
    const version = u();
    if (version !== 1) throw new Error('sample detail: version ' + version + ', this page reads 1');
    const rows = u();
    const n = u();
    const ns = u();
    const nt = u();
    const rowStart = new Int32Array(rows + 1);
    for (let r = 0; r < rows; r++) rowStart[r + 1] = rowStart[r] + u();
    const time = new Float64Array(n);
    for (let r = 0; r < rows; r++) {
      let t = D.t0;
      for (let i = rowStart[r]; i < rowStart[r + 1]; i++) time[i] = t += u();
    }
    const node = new Int32Array(n);
    for (let i = 0; i < n; i++) node[i] = u();
    const span = new Int32Array(n);
    let ref = 0;
    for (let i = 0; i < n; i++) span[i] = (ref += z()) - 1;
    const flags = buf.slice(pos, pos + n);
    pos += n;
    const weight = new Float64Array(n);
    for (let i = 0; i < n; i++) if (flags[i] & 1) weight[i] = u();
    const col = () => {
      const a = new Float64Array(ns);
      for (let i = 0; i < ns; i++) a[i] = u();
      return a;
    };
    const parent = new Int32Array(ns);
    for (let i = 0; i < ns; i++) parent[i] = u() - 1;
    const name = new Int32Array(ns);
    for (let i = 0; i < ns; i++) name[i] = u();
    const trace = new Int32Array(ns);
    for (let i = 0; i < ns; i++) trace[i] = u();
    const start = new Float64Array(ns);
    let st = 0;
    for (let i = 0; i < ns; i++) start[i] = st += z();
    const dur = col();
    const bOn = col();
    const bOff = col();
    const bBlk = col();
    const bRun = col();
    const bUnk = col();
    const traces = [];
    const td = new TextDecoder();
    for (let i = 0; i < nt; i++) {
      const len = u();
      traces.push(td.decode(buf.subarray(pos, pos + len)));
      pos += len;
    }
    if (pos !== buf.length) throw new Error('sample detail: ' + (buf.length - pos) + ' bytes left over');
    // The bar of each span, to outline it when it is chosen elsewhere.
    const bar = new Int32Array(ns).fill(-1);
    for (let i = 0; i < B.span.length; i++) if (B.span[i] > 0) bar[B.span[i] - 1] = i;
    return { n, ns, rowStart, time, node, span, flags, weight, parent, name, trace, start, dur, bOn, bOff, bBlk, bRun, bUnk, traces, bar };
  }
  function load() {
    if (!loading)
      loading = (async () => {
        const t0 = performance.now();
        X = decode(await inflate(D.detail));
        V.detailMs = performance.now() - t0;
        V.detailReady = true;
      })().catch((e) => {
        V.detailError = String((e && e.stack) || e);
        $('spans-note').textContent = 'the per-sample data could not be read (' + e + '): span and range views are off';
        throw e;
      });
    return loading;
  }

  // ---- selections ----
  function newAcc() {
    return { on: new Float64Array(A.n), off: new Float64Array(A.n), onS: 0, offS: 0, blk: 0, run: 0, unk: 0 };
  }
  function add(acc, i) {
    const f = X.flags[i];
    if (f & 1) {
      const w = X.weight[i];
      acc.off[X.node[i]] += w > 0 ? w : 1; // the flamegraph counts an unknown duration as 1 ns, a breakdown as 0
      acc.offS++;
      const st = f >> 1;
      if (st === 1) acc.blk += w;
      else if (st === 2) acc.run += w;
      else acc.unk += w;
    } else {
      acc.on[X.node[i]]++;
      acc.onS++;
    }
  }
  // bySpans: the samples linked to a span with mask[span] set.
  function bySpans(mask) {
    const acc = newAcc();
    const sp = X.span;
    for (let i = 0; i < X.n; i++) {
      const s = sp[i];
      if (s >= 0 && mask[s]) add(acc, i);
    }
    return acc;
  }
  // byRange: the samples of a lane with t0 <= time < t1.
  function byRange(row, t0, t1) {
    const acc = newAcc();
    let lo = X.rowStart[row];
    let hi = X.rowStart[row + 1];
    const end = hi;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (X.time[mid] < t0) lo = mid + 1;
      else hi = mid;
    }
    for (let i = lo; i < end && X.time[i] < t1; i++) add(acc, i);
    return acc;
  }
  // Masks of spans: ancestors come before descendants in X, so one pass
  // carries a mark down to every descendant.
  function maskBelow(root) {
    const m = new Uint8Array(X.ns);
    m[root] = 1;
    for (let j = root + 1; j < X.ns; j++) if (X.parent[j] >= 0 && m[X.parent[j]]) m[j] = 1;
    return m;
  }
  function maskName(k) {
    const m = new Uint8Array(X.ns);
    for (let j = 0; j < X.ns; j++) if (X.name[j] === k || (X.parent[j] >= 0 && m[X.parent[j]])) m[j] = 1;
    return m;
  }

  // cum: every node's value with its descendants', from per-node values.
  function cum(w) {
    const c = Float64Array.from(w);
    for (let i = A.n - 1; i > 0; i--) c[A.parent[i]] += c[i];
    return c;
  }
  // cutTree: the nodes of D.all with a value, in D.all's preorder: the
  // arrays the flamegraph draws (orig: the node of D.all).
  function cutTree(w) {
    const c = cum(w);
    const t = { total: c[0], fn: [], depth: [], val: [], line: [], nl: [], orig: [] };
    for (let i = 0; i < A.n; ) {
      if (i > 0 && c[i] === 0) {
        i = A.end[i];
        continue;
      }
      t.fn.push(A.f.fn[i]);
      t.depth.push(A.f.depth[i]);
      t.val.push(c[i]);
      t.line.push(A.f.line[i]);
      t.nl.push(A.f.nl[i]);
      t.orig.push(i);
      i++;
    }
    return t;
  }
  const treesOf = (acc) => ({ on: cutTree(acc.on), off: D.off ? cutTree(acc.off) : null });

  // A breakdown as analysis.Breakdown computes it: on-CPU is samples ×
  // period, not observed what is left of the wall time, at least 0.
  function breakdown(spans, wall, onS, offS, blk, run, unk) {
    const onCPU = onS * D.period;
    const seen = onCPU + blk + run + unk;
    return { spans, wall, onSamples: onS, offSamples: offS, onCPU, blocked: blk, runnable: run, offUnknown: unk, notObserved: Math.max(0, wall - seen) };
  }
  const bOfArr = (b) => breakdown(b[0], b[1], b[2], b[3], b[4], b[5], b[6]);
  const bOfSpan = (j) => breakdown(1, X.dur[j], X.bOn[j], X.bOff[j], X.bBlk[j], X.bRun[j], X.bUnk[j]);
  function bSum(list) {
    const a = [list.length, 0, 0, 0, 0, 0, 0];
    for (const j of list) {
      a[1] += X.dur[j];
      a[2] += X.bOn[j];
      a[3] += X.bOff[j];
      a[4] += X.bBlk[j];
      a[5] += X.bRun[j];
      a[6] += X.bUnk[j];
    }
    return bOfArr(a);
  }

  // ---- the header above the flamegraph ----
  // ms with 3 decimals, as `perfprof report` prints them.
  const fmtMs = (ns) => (ns / 1e6).toFixed(3) + ' ms';
  const pctOf = (x, wall) => (wall > 0 ? ((100 * x) / wall).toFixed(1) + '%' : '–');
  const PARTS = [
    ['onCPU', 'on-CPU', 'oncpu'],
    ['blocked', 'off-CPU blocked', 'blocked'],
    ['runnable', 'off-CPU runnable', 'runnable'],
    ['offUnknown', 'off-CPU (state unknown)', 'offunknown'],
    ['notObserved', 'not observed', 'unobserved'],
  ];
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  };
  // breakdownEl: one line of the breakdown's parts, each in ms and % of the
  // wall time, and a bar of their shares. Periods unknown: on-CPU is 0.
  function breakdownEl(label, b) {
    const box = el('div', 'bd');
    const line = el('div', 'bd-line');
    if (label) line.appendChild(el('span', 'bd-label', label));
    line.appendChild(el('span', 'bd-wall', 'wall ' + fmtMs(b.wall) + (b.spans ? ' over ' + fmtInt(b.spans) + ' span' + (b.spans === 1 ? '' : 's') : '')));
    const bar = el('div', 'bd-bar');
    const total = Math.max(b.wall, b.onCPU + b.blocked + b.runnable + b.offUnknown + b.notObserved, 1);
    for (const [k, name, cls] of PARTS) {
      if (k === 'offUnknown' && !b.offUnknown) continue;
      const part = el('span', 'bd-part ' + cls);
      part.appendChild(el('i', 'sw ' + cls));
      part.appendChild(document.createTextNode(name + ' ' + fmtMs(b[k]) + ' ' + pctOf(b[k], b.wall)));
      part.dataset.part = k;
      line.appendChild(part);
      const seg = el('span', 'seg ' + cls);
      seg.style.width = ((100 * b[k]) / total).toFixed(3) + '%';
      seg.title = name + ' ' + fmtMs(b[k]);
      bar.appendChild(seg);
    }
    box.appendChild(line);
    box.appendChild(bar);
    if (!D.period) box.appendChild(el('div', 'hint', 'the files do not give the sample period: on-CPU time is unknown (0)'));
    return box;
  }
  const samplesText = (acc) =>
    fmtInt(acc.onS + acc.offS) + ' samples (on-CPU ' + fmtInt(acc.onS) + ', off-CPU ' + fmtInt(acc.offS) + ')';
  function header(title, meta, body) {
    const h = $('scope');
    h.replaceChildren();
    const top = el('div', 'scope-top');
    top.appendChild(el('b', 'scope-title', title));
    for (const m of meta) top.appendChild(el('span', 'scope-meta', m));
    const back = el('button', '', 'whole trace (Esc)');
    back.id = 'scope-back';
    back.type = 'button';
    back.addEventListener('click', unscope);
    top.appendChild(back);
    h.appendChild(top);
    for (const b of body) h.appendChild(b);
    h.hidden = false;
  }

  // ---- the scopes ----
  let current = null;
  // scope shows a selection. t0: the click's time (performance.now()
  // scale), for V.scope.selectMs: from the click to the flamegraph drawn.
  function scope(s, trees, opts, t0) {
    current = s;
    flame.show(trees, Object.assign({ onRoot: unscope }, opts));
    s.selectMs = performance.now() - t0;
    s.flameDrawMs = V.flameDrawMs;
    s.header = $('scope').innerText;
    V.scope = s;
    V.selectMs = s.selectMs;
    V.selections = (V.selections || 0) + 1;
    timeline.highlight(s.hl || null);
  }
  function unscope() {
    if (!current) return;
    current = null;
    V.scope = null;
    $('scope').hidden = true;
    for (const r of document.querySelectorAll('#spans-table tr.on')) r.classList.remove('on');
    flame.show(null);
    timeline.highlight(null);
  }
  // clickTime: when the event happened, on performance.now()'s scale.
  const clickTime = (ev) => (ev && ev.timeStamp > 0 && ev.timeStamp <= performance.now() ? ev.timeStamp : performance.now());
  // ready runs f once the detail is there (at once when it is).
  function ready(f) {
    if (X) return f();
    return load().then(f);
  }

  // selectSpan: span j of X and the spans below it.
  function selectSpan(j, ev) {
    const t0 = clickTime(ev);
    return ready(() => {
      const acc = bySpans(maskBelow(j));
      const b = bOfSpan(j);
      const name = D.spanStrings[X.name[j]];
      const trace = X.traces[X.trace[j]];
      header('span ' + name, ['trace ' + trace, fmtMs(X.dur[j]), samplesText(acc)], [breakdownEl('', b)]);
      const bar = X.bar[j];
      scope(
        { kind: 'span', span: j, name, traceId: trace, root: X.parent[j] < 0, durationNs: X.dur[j], samples: acc.onS + acc.offS, onSamples: acc.onS, offSamples: acc.offS, breakdown: b, hl: bar >= 0 ? { row: B.row[bar], t0: B.start[bar], t1: B.end[bar] } : null },
        treesOf(acc),
        {},
        t0,
      );
    });
  }
  // selectRange: a lane's samples in [t1, t1); what names the range (a poll, a brush).
  function selectRange(row, ta, tb, what, ev) {
    const t0 = clickTime(ev);
    return ready(() => {
      const acc = byRange(row, ta, tb);
      const b = breakdown(0, tb - ta, acc.onS, acc.offS, acc.blk, acc.run, acc.unk);
      header(what, [D.rows[row], fmtNs(ta) + ' – ' + fmtNs(tb), fmtMs(tb - ta), samplesText(acc)], [breakdownEl('', b)]);
      scope({ kind: 'range', row, what, startNs: ta, endNs: tb, samples: acc.onS + acc.offS, onSamples: acc.onS, offSamples: acc.offS, breakdown: b, hl: { row, t0: ta, t1: tb } }, treesOf(acc), {}, t0);
    });
  }
  const nameIndex = (name) => D.spanStrings.indexOf(name);
  // spansNamed: the kept spans of a name, the longest first (ties: the earlier), as analysis.Select orders them.
  function spansNamed(k) {
    const ids = [];
    for (let j = 0; j < X.ns; j++) if (X.name[j] === k) ids.push(j);
    ids.sort((a, b) => X.dur[b] - X.dur[a] || X.start[a] - X.start[b]);
    return ids;
  }
  function selectName(name, ev) {
    const t0 = clickTime(ev);
    return ready(() => {
      const k = nameIndex(name);
      const st = D.spanNames.find((n) => n.name === name);
      const acc = k >= 0 ? bySpans(maskName(k)) : newAcc();
      const b = st ? bOfArr(st.b) : breakdown(0, 0, 0, 0, 0, 0, 0);
      const meta = st ? [fmtInt(st.count) + ' span' + (st.count === 1 ? '' : 's'), 'p50 ' + fmtMs(st.p50), 'p95 ' + fmtMs(st.p95), 'p99 ' + fmtMs(st.p99), samplesText(acc)] : [samplesText(acc)];
      header('all spans named ' + name, meta, [breakdownEl('', b)]);
      scope({ kind: 'name', name, samples: acc.onS + acc.offS, onSamples: acc.onS, offSamples: acc.offS, breakdown: b }, treesOf(acc), {}, t0);
    });
  }

  // selectDiff: the slowest 10% (rounded up) of a name's spans against the
  // rest. A sample belongs to the nearest span of the name at or above its
  // own. The flamegraph is the slow spans' samples; a frame's colour is its
  // share of the slow spans' samples less its share of the typical ones'.
  function selectDiff(name, ev) {
    const t0 = clickTime(ev);
    return ready(() => {
      const k = nameIndex(name);
      const ids = k >= 0 ? spansNamed(k) : [];
      const nSlow = Math.ceil(ids.length / 10);
      const group = new Uint8Array(X.ns); // 1 slow, 2 typical
      ids.forEach((j, r) => (group[j] = r < nSlow ? 1 : 2));
      const near = new Int32Array(X.ns);
      for (let j = 0; j < X.ns; j++) near[j] = X.name[j] === k ? j : X.parent[j] >= 0 ? near[X.parent[j]] : -1;
      const slow = newAcc();
      const typ = newAcc();
      for (let i = 0; i < X.n; i++) {
        const s = X.span[i];
        if (s < 0) continue;
        const g = near[s];
        if (g >= 0) add(group[g] === 1 ? slow : typ, i);
      }
      const trees = treesOf(slow);
      const diffs = {};
      const tops = {};
      for (const mode of ['on', 'off']) {
        const t = trees[mode];
        if (!t) continue;
        const tc = cum(mode === 'on' ? typ.on : typ.off);
        const delta = new Float64Array(t.fn.length);
        const typShare = new Float64Array(t.fn.length);
        let maxAbs = 0;
        for (let i = 0; i < t.fn.length; i++) {
          typShare[i] = tc[0] > 0 ? tc[t.orig[i]] / tc[0] : 0;
          delta[i] = (t.total > 0 ? t.val[i] / t.total : 0) - typShare[i];
          maxAbs = Math.max(maxAbs, Math.abs(delta[i]));
        }
        const pts = (x) => (x >= 0 ? '+' : '−') + Math.abs(100 * x).toFixed(1) + ' points';
        const unit = mode === 'on' ? (v) => fmtInt(v) + ' samples' : (v) => fmtNs(v);
        diffs[mode] = {
          color(i) {
            const r = maxAbs > 0 ? delta[i] / maxAbs : 0;
            if (Math.abs(r) < 0.02) return 'hsl(40, 8%, 88%)';
            const a = Math.min(1, Math.abs(r));
            return r > 0 ? 'hsl(2, ' + (55 + 30 * a).toFixed(0) + '%, ' + (90 - 38 * a).toFixed(0) + '%)' : 'hsl(214, ' + (50 + 30 * a).toFixed(0) + '%, ' + (90 - 35 * a).toFixed(0) + '%)';
          },
          lines(i) {
            return [
              { text: 'slow spans:    ' + (100 * (t.total ? t.val[i] / t.total : 0)).toFixed(1) + '% of their ' + (mode === 'on' ? 'on-CPU samples' : 'off-CPU time') + ' (' + unit(t.val[i]) + ')', cls: 'tt-slow' },
              { text: 'typical spans: ' + (100 * typShare[i]).toFixed(1) + '% (' + unit(tc[t.orig[i]]) + ')', cls: 'tt-typical' },
              { text: 'difference:    ' + pts(delta[i]), cls: delta[i] > 0 ? 'tt-slow' : 'tt-typical' },
            ];
          },
        };
        const order = [];
        for (let i = 1; i < t.fn.length; i++) order.push(i);
        order.sort((a, b) => delta[b] - delta[a]);
        tops[mode] = order.slice(0, 8).map((i) => ({ name: ui.fnName(t.fn[i]), node: i, slowShare: t.total ? t.val[i] / t.total : 0, typicalShare: typShare[i], delta: delta[i] }));
      }
      const slowIds = ids.slice(0, nSlow);
      const typIds = ids.slice(nSlow);
      const legend = el('div', 'hint diff-legend');
      legend.appendChild(el('span', 'sw diff-more'));
      legend.appendChild(document.createTextNode('larger share of the slow spans’ samples than of the typical ones’, '));
      legend.appendChild(el('span', 'sw diff-less'));
      legend.appendChild(document.createTextNode('smaller; width: the slow spans’ samples; hover a frame for both shares'));
      header(
        'slow vs typical: ' + name,
        ['slowest ' + fmtInt(nSlow) + ' of ' + fmtInt(ids.length) + ' spans (≥ ' + fmtMs(nSlow ? X.dur[slowIds[nSlow - 1]] : 0) + ')', 'slow: ' + samplesText(slow), 'typical: ' + samplesText(typ)],
        [breakdownEl('slow', bSum(slowIds)), breakdownEl('typical', bSum(typIds)), legend],
      );
      V.diff = { name, slowSpans: nSlow, typicalSpans: typIds.length, slowSamples: slow.onS + slow.offS, typicalSamples: typ.onS + typ.offS, top: tops };
      scope({ kind: 'diff', name, slowSpans: nSlow, typicalSpans: typIds.length, samples: slow.onS + slow.offS, onSamples: slow.onS, offSamples: slow.offS, breakdown: bSum(slowIds) }, trees, { diff: diffs }, t0);
      V.diff.modeTop = () => V.diff.top[flame.mode];
    });
  }

  // ---- the timeline's clicks ----
  hooks.onBar = (i, ev) => {
    const kind = D.strings[B.kind[i]];
    const label = kind === 'poll' ? D.strings[B.name[i]] : kind + ' ' + D.strings[B.name[i]];
    if (B.span[i] > 0 && kind !== 'poll') return selectSpan(B.span[i] - 1, ev);
    if (B.span[i] < 0) {
      const t0 = clickTime(ev);
      header(label, [fmtMs(B.end[i] - B.start[i])], [el('div', 'hint', 'this span is not in the page: it keeps the ' + fmtInt(D.spansKept) + ' longest of the trace’s spans (' + fmtInt(D.spansOmitted) + ' left out). Shift-drag over it for the samples of its lane in its time, or use perfprof report --span-id.')]);
      current = { kind: 'omitted' };
      V.scope = { kind: 'omitted', name: D.strings[B.name[i]], selectMs: performance.now() - t0 };
      return;
    }
    return selectRange(B.row[i], B.start[i], B.end[i], label, ev);
  };
  hooks.onRange = (row, ta, tb, ev) => selectRange(row, ta, tb, 'range', ev);
  document.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape' && current) unscope();
  });

  // ---- the spans panel ----
  const MAX_NAMES = 200;
  function panel() {
    const tbody = $('spans-table').tBodies[0];
    const names = D.spanNames;
    if (!names.length) {
      $('spans-section').hidden = true;
      return;
    }
    const notes = [fmtInt(names.length) + ' span name' + (names.length === 1 ? '' : 's')];
    if (names.length > MAX_NAMES) notes.push('the ' + MAX_NAMES + ' with the most wall time shown');
    if (D.spansOmitted)
      notes.push(fmtInt(D.spansOmitted) + ' short spans left out of the page (it keeps the ' + fmtInt(D.spansKept) + ' longest): their samples count for their nearest kept ancestor, their names’ flamegraphs miss them; the statistics here cover all');
    $('spans-note').textContent = notes.join(' · ');
    for (const st of names.slice(0, MAX_NAMES)) {
      const b = bOfArr(st.b);
      const tr = el('tr', 'span-name');
      tr.dataset.name = st.name;
      const nameTd = el('td', 'name');
      nameTd.appendChild(el('span', 'caret', '▸'));
      nameTd.appendChild(el('span', '', st.name));
      nameTd.title = 'click: the flamegraph of all ' + st.name + ' spans, and the slowest of them';
      tr.appendChild(nameTd);
      for (const [k, v] of [
        ['count', fmtInt(st.count)],
        ['p50', fmtMs(st.p50)],
        ['p95', fmtMs(st.p95)],
        ['p99', fmtMs(st.p99)],
        ['max', fmtMs(st.max)],
        ['wall', fmtMs(b.wall)],
        ['oncpu', pctOf(b.onCPU, b.wall)],
        ['blocked', pctOf(b.blocked, b.wall)],
        ['runnable', pctOf(b.runnable, b.wall)],
        ['unobserved', pctOf(b.notObserved, b.wall)],
      ]) {
        const td = el('td', 'num ' + k, v);
        td.dataset.col = k;
        tr.appendChild(td);
      }
      const act = el('td', 'act');
      const diffBtn = el('button', 'diff-btn', 'slow vs typical');
      diffBtn.type = 'button';
      diffBtn.title = 'differential flamegraph: the slowest 10% of ' + st.name + ' against the rest';
      diffBtn.disabled = st.count < 2;
      diffBtn.addEventListener('click', (ev) => {
        ev.stopPropagation();
        markRow(tr);
        selectDiff(st.name, ev);
      });
      act.appendChild(diffBtn);
      tr.appendChild(act);
      tr.addEventListener('click', (ev) => {
        markRow(tr);
        toggleSlowest(tr, st.name);
        selectName(st.name, ev);
      });
      tbody.appendChild(tr);
    }
  }
  function markRow(tr) {
    for (const r of document.querySelectorAll('#spans-table tr.on')) r.classList.remove('on');
    tr.classList.add('on');
  }
  // toggleSlowest opens, under a name's row, its 10 slowest spans.
  function toggleSlowest(tr, name) {
    const next = tr.nextElementSibling;
    if (next && next.classList.contains('slowest')) {
      next.remove();
      tr.querySelector('.caret').textContent = '▸';
      return;
    }
    tr.querySelector('.caret').textContent = '▾';
    const row = el('tr', 'slowest');
    const td = el('td');
    td.colSpan = 12;
    row.appendChild(td);
    tr.after(row);
    ready(() => {
      const ids = spansNamed(nameIndex(name)).slice(0, 10);
      td.appendChild(el('span', 'hint', 'slowest: '));
      for (const j of ids) {
        const a = el('button', 'slow-span', fmtMs(X.dur[j]) + ' · trace ' + X.traces[X.trace[j]].slice(0, 8) + '… at ' + fmtNs(X.start[j]));
        a.type = 'button';
        a.dataset.span = j;
        a.title = 'trace ' + X.traces[X.trace[j]] + ': the flamegraph of this span';
        a.addEventListener('click', (ev) => {
          ev.stopPropagation();
          selectSpan(j, ev);
        });
        td.appendChild(a);
      }
    });
  }
  panel();

  // ---- for tests ----
  // findSpan: the page index of a span by trace id (its root: no parent)
  // or by name (the longest), with its bar (-1 none).
  V.findSpan = (q) => {
    let best = -1;
    for (let j = 0; j < X.ns; j++) {
      if (q.traceId && (X.traces[X.trace[j]] !== q.traceId || X.parent[j] >= 0)) continue;
      if (q.name && D.spanStrings[X.name[j]] !== q.name) continue;
      if (best < 0 || X.dur[j] > X.dur[best]) best = j;
    }
    return best < 0 ? null : { index: best, bar: X.bar[best], traceId: X.traces[X.trace[best]], name: D.spanStrings[X.name[best]], durationNs: X.dur[best] };
  };
  // findBar: the first bar of a kind (with a span: hasSpan) on a row.
  V.findBar = (kind, hasSpan) => {
    for (let i = 0; i < B.kind.length; i++) if (D.strings[B.kind[i]] === kind && (hasSpan === undefined || B.span[i] > 0 === hasSpan)) return i;
    return -1;
  };
  V.selectSpan = (j) => selectSpan(j);
  V.selectName = (name) => selectName(name);
  V.selectDiff = (name) => selectDiff(name);
  V.selectRange = (row, t0, t1) => selectRange(row, t0, t1, 'range');
  V.unscope = unscope;

  return { load };
}
