// perfprof HTML view: flamegraph and timeline drawn on canvases from the
// aggregated data in #perfprof-data (see aggregate.go for its layout).
// Everything is local: no request leaves the page.
(function () {
  'use strict';
  const scriptStart = performance.now();
  // State for tests and for the curious (devtools); see doc.go.
  const V = (window.perfprofView = { ready: false, error: null, scriptStartMs: scriptStart });
  try {
    main();
  } catch (e) {
    V.error = String((e && e.stack) || e);
    throw e;
  }

  function main() {
    const D = JSON.parse(document.getElementById('perfprof-data').textContent);
    V.parsedMs = performance.now();
    const $ = (id) => document.getElementById(id);
    const tooltip = $('tooltip');
    const MONO = '11px ui-monospace, "SFMono-Regular", Menlo, Consolas, "DejaVu Sans Mono", "Liberation Mono", monospace';
    const names = D.funcs.map((f) => f[0]);
    const lowerNames = names.map((n) => n.toLowerCase());

    // ---- formatting ----
    const fmtInt = (n) => Math.round(n).toLocaleString('en-US');
    function fmtNs(ns) {
      const a = Math.abs(ns);
      if (a >= 1e9) return (ns / 1e9).toFixed(a >= 1e11 ? 1 : 3) + ' s';
      if (a >= 1e6) return (ns / 1e6).toFixed(a >= 1e8 ? 1 : 2) + ' ms';
      if (a >= 1e3) return (ns / 1e3).toFixed(a >= 1e5 ? 1 : 2) + ' µs';
      return Math.round(ns) + ' ns';
    }
    function fmtPct(part, whole) {
      if (!whole) return '0%';
      const p = (100 * part) / whole;
      return (p >= 10 ? p.toFixed(1) : p >= 0.1 ? p.toFixed(2) : p.toFixed(3)) + '%';
    }
    const fnName = (f) => (f < 0 ? 'all' : names[f]);
    const fnFile = (f) => (f < 0 ? '' : D.funcs[f][1]);
    function fileLine(file, line, others) {
      let s = file ? file + (line ? ':' + line : '') : '(file unknown)';
      if (others > 0) s += ' (+' + others + ' other line' + (others > 1 ? 's' : '') + ')';
      return s;
    }

    // ---- summary ----
    const st = D.stats;
    const parts = [fmtInt(st.samples) + ' samples'];
    if (st.offCPU) parts.push(fmtInt(st.onCPU) + ' on-CPU, ' + fmtInt(st.offCPU) + ' off-CPU (' + fmtNs(st.offCPUNs) + ')');
    parts.push(fmtNs(D.t1 - D.t0) + ' (' + fmtNs(D.t0) + ' to ' + fmtNs(D.t1) + ')');
    parts.push(D.rows.length + ' row' + (D.rows.length === 1 ? '' : 's'));
    parts.push(fmtInt(st.bars) + ' bars' + (D.barsMerged ? ' (' + fmtInt(D.barsMerged) + ' merged for drawing)' : ''));
    $('summary').textContent = parts.join(' · ');

    // ---- tooltip ----
    // Built with textContent only: names come from the profiled program.
    function showTip(ev, head, lines) {
      tooltip.replaceChildren();
      const h = document.createElement('div');
      h.className = 'tt-head';
      h.textContent = head;
      tooltip.appendChild(h);
      for (const l of lines) {
        const d = document.createElement('div');
        if (typeof l === 'string') d.textContent = l;
        else {
          d.textContent = l.text;
          d.className = l.cls;
        }
        tooltip.appendChild(d);
      }
      tooltip.hidden = false;
      const pad = 14;
      const r = tooltip.getBoundingClientRect();
      let x = ev.clientX + pad;
      let y = ev.clientY + pad;
      if (x + r.width > window.innerWidth - 4) x = Math.max(4, ev.clientX - pad - r.width);
      if (y + r.height > window.innerHeight - 4) y = Math.max(4, ev.clientY - pad - r.height);
      tooltip.style.left = x + 'px';
      tooltip.style.top = y + 'px';
    }
    function hideTip() {
      tooltip.hidden = true;
    }

    function sizeCanvas(c, cssH) {
      const dpr = window.devicePixelRatio || 1;
      c.style.height = cssH + 'px';
      const w = c.clientWidth || 800;
      const pw = Math.round(w * dpr);
      const ph = Math.round(cssH * dpr);
      if (c.width !== pw) c.width = pw;
      if (c.height !== ph) c.height = ph;
      const ctx = c.getContext('2d');
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, w, cssH);
      return { ctx, w, h: cssH };
    }
    function hash(s) {
      let h = 2166136261;
      for (let i = 0; i < s.length; i++) {
        h ^= s.charCodeAt(i);
        h = Math.imul(h, 16777619);
      }
      return h >>> 0;
    }
    let charW = 6.6;
    function fitText(ctx, text, w) {
      const n = Math.floor((w - 6) / charW);
      if (n < 2) return '';
      return text.length <= n ? text : text.slice(0, n - 1) + '…';
    }

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
    const trees = { on: prepTree(D.on), off: D.off ? prepTree(D.off) : null };
    const FL = { mode: 'on', t: trees.on, zoom: 0, match: null, term: '', boxes: [] };
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
      charW = ctx.measureText('MMMMMMMMMM').width / 10 || charW;
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
        ctx.fillStyle = matched ? '#d33cd3' : frameColor(f.fn[i], FL.mode);
        ctx.globalAlpha = dim ? 0.55 : 1;
        ctx.fillRect(x, y, Math.max(bw - 0.5, 0.5), ROW_H - 1);
        ctx.globalAlpha = 1;
        if (bw > 3 * charW) {
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

    function setZoom(i) {
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
      drawFlame();
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
      if (i !== FL.zoom) lines.push({ text: 'click to zoom' + (i === 0 || inf.node < FL.zoom ? ' out' : ' in'), cls: 'tt-dim' });
      showTip(ev, inf.name, lines);
    }
    flameCanvas.addEventListener('mouseleave', () => {
      V.hovered = null;
      hideTip();
    });
    flameCanvas.addEventListener('click', (ev) => {
      const i = flameHit(ev);
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

    function setMode(mode) {
      if (!trees[mode]) return;
      FL.mode = mode;
      FL.t = trees[mode];
      V.mode = mode;
      V.total = FL.t.f.total;
      $('mode-' + mode).checked = true;
      FL.zoom = 0;
      setZoom(0);
      applySearch();
    }
    for (const mode of ['on', 'off']) {
      const el = $('mode-' + mode);
      if (!trees[mode]) {
        el.disabled = true;
        el.parentElement.classList.add('disabled');
        el.parentElement.title = 'no ' + mode + '-CPU samples';
      }
      el.addEventListener('change', () => el.checked && setMode(mode));
    }

    // ================= timeline =================
    const tlCanvas = $('timeline');
    const LABEL_W = 160;
    const AXIS_H = 20;
    const TRACK = { runtime: [3, 12], span: [16, 8], on: [26, 14], off: [42, 10] };
    const hasOff = !!D.off;
    const LANE_H = hasOff ? 56 : 44;
    const KIND_COLOR = { poll: '#43a047', park: '#cfd8dc', span: '#7e57c2' };
    const tl = { v0: D.t0, v1: Math.max(D.t1, D.t0 + 1000) };
    const B = D.bars;
    const kinds = B.kind.map((k) => D.strings[k]);
    // Bars arrive sorted by row then start: per row, a range of indices.
    const rowBars = D.rows.map(() => [0, 0]);
    for (let i = 0; i < B.row.length; ) {
      let j = i;
      while (j < B.row.length && B.row[j] === B.row[i]) j++;
      rowBars[B.row[i]] = [i, j];
      i = j;
    }
    // Marks per row, split on/off-CPU: entry offsets into D.marks[row].
    const MF = 6;
    const rowMarks = D.marks.map((M) => {
      const on = [];
      const off = [];
      for (let k = 0; k < M.length; k += MF) (M[k + 1] ? off : on).push(k);
      return { on, off };
    });
    let maxOn = 1;
    let maxOff = 1;
    for (const M of D.marks)
      for (let k = 0; k < M.length; k += MF) {
        if (M[k + 1]) maxOff = Math.max(maxOff, M[k + 3]);
        else maxOn = Math.max(maxOn, M[k + 2]);
      }

    // The plot's width, read from the layout once per draw or event: reading
    // clientWidth per bar or mark costs more than the drawing.
    let plotWidth = 1;
    const measurePlot = () => (plotWidth = Math.max(1, tlCanvas.clientWidth - LABEL_W - 8));
    const plotW = () => plotWidth;
    const tx = (t) => LABEL_W + ((t - tl.v0) / (tl.v1 - tl.v0)) * plotW();
    const xt = (x) => tl.v0 + ((x - LABEL_W) / plotW()) * (tl.v1 - tl.v0);
    const markHeight = (M, k, track) => {
      const frac = M[k + 1] ? M[k + 3] / maxOff : M[k + 2] / maxOn;
      return Math.max(2, Math.round(Math.sqrt(frac) * track[1]));
    };

    // fmtTick shows t in the unit of the tick step, with just the decimals the step needs.
    function fmtTick(t, step) {
      const [u, name] = step >= 1e9 ? [1e9, 's'] : step >= 1e6 ? [1e6, 'ms'] : step >= 1e3 ? [1e3, 'µs'] : [1, 'ns'];
      const dec = Math.max(0, Math.ceil(-Math.log10(step / u) - 1e-9));
      return (t / u).toFixed(dec) + ' ' + name;
    }
    function niceStep(span, px) {
      const raw = span / Math.max(1, px / 110);
      const p = Math.pow(10, Math.floor(Math.log10(raw)));
      for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
      return 10 * p;
    }

    function drawTimeline() {
      const t0 = performance.now();
      const h = AXIS_H + D.rows.length * LANE_H + 4;
      const { ctx, w } = sizeCanvas(tlCanvas, Math.max(h, AXIS_H + LANE_H));
      measurePlot();
      const right = w - 8;
      const pw = Math.max(1, Math.ceil(right - LABEL_W));
      const col = new Float32Array(pw);
      ctx.font = MONO;
      ctx.textBaseline = 'middle';
      // axis and grid
      const step = niceStep(tl.v1 - tl.v0, right - LABEL_W);
      ctx.fillStyle = '#555';
      ctx.strokeStyle = '#e6e6e6';
      ctx.lineWidth = 1;
      for (let t = Math.ceil(tl.v0 / step) * step; t <= tl.v1; t += step) {
        const x = Math.round(tx(t)) + 0.5;
        ctx.beginPath();
        ctx.moveTo(x, AXIS_H - 4);
        ctx.lineTo(x, h);
        ctx.stroke();
        const label = fmtTick(t, step);
        if (x + 3 + label.length * charW <= w) ctx.fillText(label, x + 3, AXIS_H / 2);
      }
      if (!D.rows.length) ctx.fillText('no rows', 8, AXIS_H + 12);
      for (let r = 0; r < D.rows.length; r++) {
        const y = AXIS_H + r * LANE_H;
        ctx.fillStyle = r % 2 ? '#fcfcfc' : '#f4f6f8';
        ctx.fillRect(0, y, w, LANE_H - 2);
        ctx.fillStyle = '#222';
        ctx.fillText(fitText(ctx, D.rows[r], LABEL_W - 4), 4, y + LANE_H / 2);
        ctx.save();
        ctx.beginPath();
        ctx.rect(LABEL_W, y, right - LABEL_W, LANE_H);
        ctx.clip();
        // Bars, snapped to whole pixels; per kind, the part of a bar that
        // the previous bar of that kind already covered is not drawn again
        // (thousands of sub-pixel bars become one rectangle per pixel).
        const [b0, b1] = rowBars[r];
        const covered = {};
        const rects = {}; // kind -> flat x, y, w, h: one fill per kind
        const labels = [];
        for (let i = b0; i < b1; i++) {
          if (B.start[i] > tl.v1) break;
          if (B.end[i] < tl.v0) continue;
          const kind = kinds[i];
          const tr = kind === 'poll' || kind === 'park' ? TRACK.runtime : TRACK.span;
          const fx0 = tx(B.start[i]);
          const fx1 = tx(B.end[i]);
          let x0 = Math.max(LABEL_W, Math.floor(fx0));
          const x1 = Math.min(right, Math.max(x0 + 1, Math.ceil(fx1)));
          const done = covered[kind] || 0;
          if (x1 <= done) continue;
          if (x0 < done) x0 = done;
          covered[kind] = x1;
          (rects[kind] || (rects[kind] = [])).push(x0, y + tr[0], x1 - x0, tr[1]);
          if (fx1 - fx0 > 60 && tr[1] >= 10 && kind !== 'park') labels.push(i, Math.max(LABEL_W, fx0), Math.min(right, fx1), y + tr[0] + tr[1] / 2);
        }
        for (const kind in rects) {
          const a = rects[kind];
          ctx.fillStyle = KIND_COLOR[kind] || '#9e9e9e';
          ctx.beginPath();
          for (let k = 0; k < a.length; k += 4) ctx.rect(a[k], a[k + 1], a[k + 2], a[k + 3]);
          ctx.fill();
        }
        ctx.fillStyle = '#fff';
        for (let k = 0; k < labels.length; k += 4) {
          const label = fitText(ctx, D.strings[B.name[labels[k]]], labels[k + 2] - labels[k + 1]);
          if (label) ctx.fillText(label, labels[k + 1] + 3, labels[k + 3]);
        }
        // Sample marks, bottom-aligned in their tracks: the tallest per
        // pixel column, drawn as runs of equal height.
        const M = D.marks[r];
        for (const [list, tr, color] of [
          [rowMarks[r].on, TRACK.on, '#e4572e'],
          [rowMarks[r].off, TRACK.off, '#1e88e5'],
        ]) {
          if (!list.length) continue;
          col.fill(0);
          for (const k of list) {
            const ts = D.t0 + M[k] * D.bucketNs;
            if (ts > tl.v1 || ts + D.bucketNs < tl.v0) continue;
            const c0 = Math.max(0, Math.floor(tx(ts)) - LABEL_W);
            const c1 = Math.min(pw, Math.max(c0 + 1, Math.ceil(tx(ts + D.bucketNs)) - LABEL_W));
            const mh = markHeight(M, k, tr);
            for (let c = c0; c < c1; c++) if (col[c] < mh) col[c] = mh;
          }
          ctx.fillStyle = color;
          ctx.beginPath();
          for (let c = 0; c < pw; ) {
            const mh = col[c];
            let e = c + 1;
            while (e < pw && col[e] === mh) e++;
            if (mh > 0) ctx.rect(LABEL_W + c, y + tr[0] + tr[1] - mh, e - c, mh);
            c = e;
          }
          ctx.fill();
        }
        ctx.restore();
      }
      V.timelineDrawMs = performance.now() - t0;
      V.timelineRange = [tl.v0, tl.v1];
    }

    // What is under the mouse: {row, kind: 'mark'|'bar', ...} or null.
    function tlHit(mx, my) {
      if (mx < LABEL_W || my < AXIS_H) return null;
      const r = Math.floor((my - AXIS_H) / LANE_H);
      if (r < 0 || r >= D.rows.length) return null;
      const yy = my - AXIS_H - r * LANE_H;
      const inTrack = (tr) => yy >= tr[0] - 1 && yy < tr[0] + tr[1] + 1;
      const t = xt(mx);
      const pxNs = (tl.v1 - tl.v0) / plotW();
      for (const off of [0, 1]) {
        const tr = off ? TRACK.off : TRACK.on;
        if (!inTrack(tr)) continue;
        const list = off ? rowMarks[r].off : rowMarks[r].on;
        const M = D.marks[r];
        // binary search for the last bucket starting at or before t + 2px
        const want = Math.floor((t + 2 * pxNs - D.t0) / D.bucketNs);
        let lo = 0;
        let hi = list.length - 1;
        let at = -1;
        while (lo <= hi) {
          const mid = (lo + hi) >> 1;
          if (M[list[mid]] <= want) {
            at = mid;
            lo = mid + 1;
          } else hi = mid - 1;
        }
        // the heaviest entry within 2px of the mouse
        let best = -1;
        for (let j = at; j >= 0; j--) {
          const k = list[j];
          const ts = D.t0 + M[k] * D.bucketNs;
          if (ts + D.bucketNs < t - 2 * pxNs) break;
          if (best < 0 || M[k + 3] > M[best + 3]) best = k;
        }
        if (best >= 0) return { row: r, kind: 'mark', k: best };
      }
      for (const tr of [TRACK.runtime, TRACK.span]) {
        if (!inTrack(tr)) continue;
        const [b0, b1] = rowBars[r];
        let found = -1;
        const slack = 1.5 * pxNs;
        for (let i = b0; i < b1; i++) {
          if (B.start[i] > t + slack) break;
          const kind = kinds[i];
          const isRt = kind === 'poll' || kind === 'park';
          if (isRt !== (tr === TRACK.runtime)) continue;
          if (B.end[i] >= t - slack) found = i;
        }
        if (found >= 0) return { row: r, kind: 'bar', i: found };
      }
      return null;
    }

    function markInfo(r, k) {
      const M = D.marks[r];
      const startNs = D.t0 + M[k] * D.bucketNs;
      const stack = D.stacks[M[k + 4]]
        .slice()
        .reverse()
        .map((fr) => ({ name: names[D.frames[2 * fr]], file: D.funcs[D.frames[2 * fr]][1], line: D.frames[2 * fr + 1] }));
      return {
        row: r,
        rowName: D.rows[r],
        offCPU: !!M[k + 1],
        startNs,
        endNs: startNs + D.bucketNs,
        count: M[k + 2],
        weight: M[k + 3],
        stackCount: M[k + 5],
        stack, // leaf first
      };
    }

    function showTimelineTip(ev, hit) {
      if (hit.kind === 'bar') {
        const i = hit.i;
        V.hoveredMark = null;
        V.hoveredBar = { row: hit.row, name: D.strings[B.name[i]], kind: kinds[i], startNs: B.start[i], endNs: B.end[i] };
        showTip(ev, kinds[i] + ': ' + D.strings[B.name[i]], [
          D.rows[hit.row],
          fmtNs(B.start[i]) + ' – ' + fmtNs(B.end[i]) + '  (' + fmtNs(B.end[i] - B.start[i]) + ')',
        ]);
        return;
      }
      const m = markInfo(hit.row, hit.k);
      V.hoveredBar = null;
      V.hoveredMark = m;
      const lines = [];
      lines.push(fmtNs(m.startNs) + ' – ' + fmtNs(m.endNs));
      lines.push(
        (m.offCPU ? fmtInt(m.count) + ' off-CPU samples, ' + fmtNs(m.weight) : fmtInt(m.count) + ' on-CPU sample' + (m.count === 1 ? '' : 's')) +
          '; the most frequent stack (' + fmtInt(m.stackCount) + ' of them), leaf first:',
      );
      const MAXF = 48;
      m.stack.slice(0, MAXF).forEach((fr, j) => {
        lines.push({ text: (j === 0 ? '▶ ' : '  ') + fr.name + '  ' + fileLine(fr.file, fr.line, 0), cls: j === 0 ? 'tt-leaf' : '' });
      });
      if (m.stack.length > MAXF) lines.push({ text: '  … ' + (m.stack.length - MAXF) + ' outer frames', cls: 'tt-dim' });
      if (!m.stack.length) lines.push({ text: '  (no frames)', cls: 'tt-dim' });
      showTip(ev, m.rowName + ' · ' + (m.offCPU ? 'off-CPU' : 'on-CPU'), lines);
    }

    let drag = null;
    tlCanvas.addEventListener('mousemove', (ev) => {
      const r = tlCanvas.getBoundingClientRect();
      const mx = ev.clientX - r.left;
      if (drag) {
        const dt = ((mx - drag.x) / plotW()) * (drag.v1 - drag.v0);
        if (Math.abs(mx - drag.x) > 2) drag.moved = true;
        tl.v0 = drag.v0 - dt;
        tl.v1 = drag.v1 - dt;
        hideTip();
        redrawTimeline();
        return;
      }
      const hit = tlHit(mx, ev.clientY - r.top);
      if (!hit) {
        V.hoveredMark = null;
        V.hoveredBar = null;
        hideTip();
        return;
      }
      showTimelineTip(ev, hit);
    });
    tlCanvas.addEventListener('mouseleave', () => {
      drag = null;
      hideTip();
    });
    tlCanvas.addEventListener('mousedown', (ev) => {
      const r = tlCanvas.getBoundingClientRect();
      drag = { x: ev.clientX - r.left, v0: tl.v0, v1: tl.v1, moved: false };
    });
    window.addEventListener('mouseup', () => {
      drag = null;
    });
    tlCanvas.addEventListener(
      'wheel',
      (ev) => {
        const r = tlCanvas.getBoundingClientRect();
        const mx = ev.clientX - r.left;
        if (mx < LABEL_W) return;
        ev.preventDefault();
        const at = xt(mx);
        const k = Math.exp(ev.deltaY * 0.0015);
        const span = Math.min(Math.max((tl.v1 - tl.v0) * k, 1000), (D.t1 - D.t0) * 4 + 1000);
        const frac = (mx - LABEL_W) / plotW();
        tl.v0 = at - frac * span;
        tl.v1 = tl.v0 + span;
        hideTip();
        redrawTimeline();
      },
      { passive: false },
    );
    tlCanvas.addEventListener('dblclick', () => {
      tl.v0 = D.t0;
      tl.v1 = Math.max(D.t1, D.t0 + 1000);
      redrawTimeline();
    });
    let tlPending = false;
    function redrawTimeline() {
      if (tlPending) return;
      tlPending = true;
      requestAnimationFrame(() => {
        tlPending = false;
        drawTimeline();
      });
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
    // markPoint: the centre of the heaviest on-CPU (or off-CPU) mark of a row in view.
    V.markPoint = (row, offCPU) => {
      const M = D.marks[row];
      const list = offCPU ? rowMarks[row].off : rowMarks[row].on;
      const tr = offCPU ? TRACK.off : TRACK.on;
      let best = -1;
      for (const k of list) {
        const ts = D.t0 + M[k] * D.bucketNs;
        if (ts < tl.v0 || ts + D.bucketNs > tl.v1) continue; // not (wholly) in view
        if (best < 0 || M[k + 3] > M[best + 3]) best = k;
      }
      if (best < 0) return null;
      const ts = D.t0 + M[best] * D.bucketNs;
      const x0 = tx(ts);
      const x1 = Math.max(x0 + 1, tx(ts + D.bucketNs));
      return { x: (x0 + x1) / 2, y: AXIS_H + row * LANE_H + tr[0] + tr[1] - 1, mark: markInfo(row, best) };
    };
    V.setSearch = (s) => {
      $('search').value = s;
      applySearch();
    };
    V.redraw = () => {
      drawFlame();
      drawTimeline();
      return { flameDrawMs: V.flameDrawMs, timelineDrawMs: V.timelineDrawMs };
    };
    V.stats = D.stats;
    V.rows = D.rows;

    // ---- first draw ----
    V.mode = FL.mode;
    V.total = FL.t.f.total;
    $('mode-' + FL.mode).checked = true;
    setZoom(0);
    V.flameDrawnMs = performance.now();
    V.drawMs = V.flameDrawnMs; // since navigation start
    drawTimeline();
    V.timelineDrawnMs = performance.now();
    let resizePending = false;
    window.addEventListener('resize', () => {
      if (resizePending) return;
      resizePending = true;
      requestAnimationFrame(() => {
        resizePending = false;
        drawFlame();
        drawTimeline();
      });
    });
    V.ready = true;
  }
})();
