// The flamegraph of the HTML view (see page.js for how the page's files
// fit together): a zoomable, searchable call tree on a canvas, for on-CPU
// samples or off-CPU time.

// flameView draws D's call trees into #flame and wires the controls above
// it. start() makes the first draw; show() swaps in other trees (a scoped
// view, see scope.js), which the same code draws.
function flameView(D, ui) {
  const { V, $, MONO, names, lowerNames, fmtInt, fmtNs, fmtPct, fnName, fnFile, fileLine, showTip, hideTip, sizeCanvas, hash, fitText } = ui;

  // ================= flamegraph =================
  function prepTree(f) {
    const n = f.fn.length;
    const x = new Float64Array(n);
    const end = new Int32Array(n);
    const parent = new Int32Array(n);
    const self = new Float64Array(n);
    const next = new Float64Array(n);
    const path = [];
    let maxDepth = 0;
    for (let i = 0; i < n; i++) {
      const d = f.depth[i];
      while (path.length > d) end[path.pop()] = i;
      self[i] = f.val[i];
      if (d === 0) parent[i] = -1;
      else {
        const p = path[d - 1];
        parent[i] = p;
        x[i] = next[p];
        next[p] += f.val[i];
        self[p] -= f.val[i];
      }
      next[i] = x[i];
      path.push(i);
      if (d > maxDepth) maxDepth = d;
    }
    while (path.length) end[path.pop()] = n;
    return { f, n, x, end, parent, self, maxDepth };
  }
  const whole = { on: prepTree(D.on), off: D.off ? prepTree(D.off) : null };
  let trees = whole;
  // diffs, in the differential view: per mode, {color(i), lines(i)} for
  // node i of the drawn tree (diff: the current mode's); onRoot: called on
  // a click on the root frame (a scoped view goes back to the whole trace).
  const FL = { mode: 'on', t: trees.on, zoom: 0, match: null, term: '', boxes: [], diffs: null, diff: null, onRoot: null };
  if (!D.on.total && trees.off) FL.mode = 'off';
  FL.t = trees[FL.mode];
  const flameCanvas = $('flame');
  const ROW_H = 18;
  const colorCache = { on: new Map(), off: new Map() };

  function frameColor(fn, mode) {
    const cache = colorCache[mode];
    let c = cache.get(fn);
    if (c) return c;
    if (fn < 0) c = 'hsl(0, 0%, 82%)';
    else {
      const h = hash(names[fn]);
      const kernel = fnFile(fn) === 'kernel';
      let hue;
      let sat = 60 + (h % 25);
      let light = 58 + ((h >>> 8) % 14);
      if (mode === 'off') hue = kernel ? 265 + ((h >>> 4) % 25) : 195 + ((h >>> 4) % 35);
      else if (kernel) {
        hue = 28 + ((h >>> 4) % 12);
        sat = 85;
        light = 62;
      } else hue = (h >>> 4) % 56;
      c = 'hsl(' + hue + ', ' + sat + '%, ' + light + '%)';
    }
    cache.set(fn, c);
    return c;
  }

  function drawFlame() {
    const t0 = performance.now();
    const T = FL.t;
    const f = T.f;
    const h = (T.maxDepth + 1) * ROW_H + 2;
    const { ctx, w } = sizeCanvas(flameCanvas, Math.max(h, 3 * ROW_H));
    ctx.font = MONO;
    ctx.textBaseline = 'middle';
    ui.charW = ctx.measureText('MMMMMMMMMM').width / 10 || ui.charW;
    const boxes = [];
    FL.boxes = boxes;
    if (!f.val[0]) {
      ctx.fillStyle = '#666';
      ctx.fillText('no ' + (FL.mode === 'on' ? 'on-CPU' : 'off-CPU') + ' samples', 8, ROW_H);
      V.flameDrawMs = performance.now() - t0;
      return;
    }
    const z = FL.zoom;
    const scale = w / f.val[z];
    const box = (i, x, bw, dim) => {
      const y = f.depth[i] * ROW_H;
      const matched = FL.match && f.fn[i] >= 0 && FL.match[f.fn[i]];
      ctx.fillStyle = matched ? '#d33cd3' : FL.diff ? FL.diff.color(i) : frameColor(f.fn[i], FL.mode);
      ctx.globalAlpha = dim ? 0.55 : 1;
      ctx.fillRect(x, y, Math.max(bw - 0.5, 0.5), ROW_H - 1);
      ctx.globalAlpha = 1;
      if (bw > 3 * ui.charW) {
        const label = fitText(ctx, fnName(f.fn[i]), bw);
        if (label) {
          ctx.fillStyle = dim ? '#444' : '#111';
          ctx.fillText(label, x + 3, y + ROW_H / 2);
        }
      }
      boxes.push(x, bw, i);
    };
    // Ancestors of the zoomed frame span the full width, faded.
    for (let a = T.parent[z]; a >= 0; a = T.parent[a]) box(a, 0, w, true);
    box(z, 0, w, false);
    const xz = T.x[z];
    for (let i = z + 1; i < T.end[z]; ) {
      const bw = f.val[i] * scale;
      if (bw < 0.3) {
        i = T.end[i]; // too thin to see, and so are its children
        continue;
      }
      box(i, (T.x[i] - xz) * scale, bw, false);
      i++;
    }
    V.flameDrawMs = performance.now() - t0;
    V.flameBoxes = boxes.length / 3;
  }

  function flameHit(ev) {
    const r = flameCanvas.getBoundingClientRect();
    const mx = ev.clientX - r.left;
    const depth = Math.floor((ev.clientY - r.top) / ROW_H);
    const f = FL.t.f;
    const b = FL.boxes;
    for (let k = 0; k < b.length; k += 3) {
      const i = b[k + 2];
      if (f.depth[i] === depth && mx >= b[k] && mx < b[k] + b[k + 1]) return i;
    }
    return -1;
  }

  function nodeInfo(i) {
    const f = FL.t.f;
    return {
      node: i,
      name: fnName(f.fn[i]),
      file: fnFile(f.fn[i]),
      line: f.line[i],
      otherLines: f.nl[i],
      value: f.val[i],
      self: FL.t.self[i],
      percent: (100 * f.val[i]) / (f.total || 1),
    };
  }

  function setZoom(i, noDraw) {
    FL.zoom = i;
    const f = FL.t.f;
    const path = [];
    for (let a = i; a >= 0; a = FL.t.parent[a]) path.push(fnName(f.fn[a]));
    path.reverse();
    V.zoomedNode = i;
    V.zoomedFrame = fnName(f.fn[i]);
    V.zoomPath = path;
    $('zoom-path').textContent =
      i === 0
        ? 'root at the top; click a frame to zoom into it, click an ancestor or the root to zoom out'
        : 'zoomed into ' + V.zoomedFrame + ' (' + fmtPct(f.val[i], f.total) + ' of all; click the root or Reset to zoom out): ' + path.join(' › ');
    if (!noDraw) drawFlame();
  }

  flameCanvas.addEventListener('mousemove', flameHover);
  function flameHover(ev) {
    const i = flameHit(ev);
    if (i < 0) {
      V.hovered = null;
      hideTip();
      return;
    }
    const inf = nodeInfo(i);
    V.hovered = inf;
    const f = FL.t.f;
    const unit = FL.mode === 'on' ? (v) => fmtInt(v) + ' samples' : (v) => fmtNs(v) + ' off-CPU';
    const lines = [
      fileLine(inf.file, inf.line, inf.otherLines),
      unit(inf.value) + ' (' + fmtPct(inf.value, f.total) + ' of all' + (FL.zoom ? ', ' + fmtPct(inf.value, f.val[FL.zoom]) + ' of zoomed' : '') + ')',
      { text: 'self: ' + unit(inf.self) + ' (' + fmtPct(inf.self, f.total) + ')', cls: 'tt-dim' },
    ];
    if (FL.diff) lines.push(...FL.diff.lines(i));
    if (i === 0 && FL.onRoot) lines.push({ text: 'click: back to the whole trace (or Esc)', cls: 'tt-dim' });
    else if (i !== FL.zoom) lines.push({ text: 'click to zoom' + (i === 0 || inf.node < FL.zoom ? ' out' : ' in'), cls: 'tt-dim' });
    showTip(ev, inf.name, lines);
  }
  flameCanvas.addEventListener('mouseleave', () => {
    V.hovered = null;
    hideTip();
  });
  flameCanvas.addEventListener('click', (ev) => {
    const i = flameHit(ev);
    if (i === 0 && FL.onRoot) {
      FL.onRoot();
      return;
    }
    if (i >= 0 && i !== FL.zoom) {
      setZoom(i);
      flameHover(ev); // what is under the mouse changed
    }
  });
  $('reset').addEventListener('click', () => setZoom(0));

  // Search: functions whose name contains the text, any case. The share
  // counts each sample once, under its outermost matching frame.
  function applySearch() {
    const term = $('search').value.trim().toLowerCase();
    FL.term = term;
    V.searchTerm = term;
    const f = FL.t.f;
    if (!term) {
      FL.match = null;
      V.searchMatches = 0;
      V.searchPercent = 0;
      V.searchFrames = 0;
      $('search-result').textContent = '';
      drawFlame();
      return;
    }
    const m = new Uint8Array(names.length);
    for (let k = 0; k < names.length; k++) m[k] = lowerNames[k].includes(term) ? 1 : 0;
    FL.match = m;
    let sum = 0;
    let frames = 0;
    for (let i = 1; i < FL.t.n; ) {
      if (m[f.fn[i]]) {
        sum += f.val[i];
        i = FL.t.end[i];
      } else i++;
    }
    for (let i = 1; i < FL.t.n; i++) if (m[f.fn[i]]) frames++;
    V.searchMatches = sum;
    V.searchPercent = (100 * sum) / (f.total || 1);
    V.searchFrames = frames;
    const what = FL.mode === 'on' ? fmtInt(sum) + ' of ' + fmtInt(f.total) + ' samples' : fmtNs(sum) + ' of ' + fmtNs(f.total);
    $('search-result').textContent = 'matched ' + fmtPct(sum, f.total) + ' (' + what + ', ' + frames + ' frame' + (frames === 1 ? '' : 's') + ')';
    drawFlame();
  }
  $('search').addEventListener('input', applySearch);

  // useMode draws trees[mode] (which must exist), zoomed out.
  function useMode(mode) {
    FL.diff = FL.diffs ? FL.diffs[mode] : null;
    FL.mode = mode;
    FL.t = trees[mode];
    V.mode = mode;
    V.total = FL.t.f.total;
    $('mode-' + mode).checked = true;
    setZoom(0, true);
    applySearch(); // draws
  }
  function setMode(mode) {
    if (trees[mode]) useMode(mode);
  }
  function enableModes() {
    for (const mode of ['on', 'off']) {
      const el = $('mode-' + mode);
      el.disabled = !trees[mode];
      el.parentElement.classList.toggle('disabled', !trees[mode]);
      el.parentElement.title = trees[mode] ? '' : 'no ' + mode + '-CPU samples';
    }
  }
  for (const mode of ['on', 'off']) {
    const el = $('mode-' + mode);
    el.addEventListener('change', () => el.checked && setMode(mode));
  }
  enableModes();

  // show draws other trees ({on, off}: flame arrays as in D.on, null for
  // none), or D's again when t is null, keeping the mode when it can. opts:
  // {diff, onRoot, mode}.
  function show(t, opts) {
    opts = opts || {};
    trees = t ? { on: t.on ? prepTree(t.on) : null, off: t.off ? prepTree(t.off) : null } : whole;
    FL.diffs = opts.diff || null;
    FL.onRoot = opts.onRoot || null;
    let mode = opts.mode || FL.mode;
    if (!trees[mode]) mode = mode === 'on' ? 'off' : 'on';
    if (!trees[mode]) {
      trees = { on: prepTree({ total: 0, fn: [-1], depth: [0], val: [0], line: [0], nl: [0] }), off: null };
      mode = 'on';
    }
    enableModes();
    useMode(mode);
  }

  // ---- helpers for tests: positions are CSS pixels from the canvas' top-left ----
  // frameRect: the widest drawn flamegraph box of the function named name.
  V.frameRect = (name) => {
    const f = FL.t.f;
    const b = FL.boxes;
    let best = null;
    for (let k = 0; k < b.length; k += 3) {
      const i = b[k + 2];
      if (fnName(f.fn[i]) === name && (!best || b[k + 1] > best.w))
        best = { x: b[k], y: f.depth[i] * ROW_H, w: b[k + 1], h: ROW_H - 1, node: i, depth: f.depth[i], value: f.val[i] };
    }
    return best;
  };
  // widestFrame: the name of the widest drawn box at a depth (root: 0).
  V.widestFrame = (depth) => {
    const f = FL.t.f;
    const b = FL.boxes;
    let best = -1;
    for (let k = 0; k < b.length; k += 3) if (f.depth[b[k + 2]] === depth && (best < 0 || b[k + 1] > b[best + 1])) best = k;
    return best < 0 ? null : fnName(f.fn[b[best + 2]]);
  };

  return {
    draw: drawFlame,
    search: applySearch,
    show,
    get mode() {
      return FL.mode;
    },
    start() {
      V.mode = FL.mode;
      V.total = FL.t.f.total;
      $('mode-' + FL.mode).checked = true;
      setZoom(0);
    },
  };
}
