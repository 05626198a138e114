// The timeline of the HTML view (see page.js for how the page's files fit
// together): a lane per row with its bars (polls, parks, spans) and its
// sample marks, zoomed with the wheel and panned by dragging.

// timelineView draws D's rows into #timeline and handles the mouse on it.
// hooks.onBar(i, ev) is called on a click on bar i, hooks.onRange(row, t0,
// t1, ev) when a range of a lane is brushed (shift + drag).
function timelineView(D, ui, hooks) {
  const { V, $, MONO, names, fmtInt, fmtNs, fileLine, showTip, hideTip, sizeCanvas, fitText } = ui;

  // ================= timeline =================
  const tlCanvas = $('timeline');
  const LABEL_W = 160;
  const AXIS_H = 20;
  const TRACK = { runtime: [3, 12], span: [16, 8], on: [26, 14], off: [42, 10] };
  const hasOff = !!D.off;
  const LANE_H = hasOff ? 56 : 44;
  const KIND_COLOR = { poll: '#43a047', park: '#cfd8dc', span: '#7e57c2' };
  // hl: the selection the flamegraph shows, {row, t0, t1}, outlined;
  // brush: a range being brushed, {row, x0, x1} in CSS pixels.
  const tl = { v0: D.t0, v1: Math.max(D.t1, D.t0 + 1000), hl: null, brush: null };
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
      if (x + 3 + label.length * ui.charW <= w) ctx.fillText(label, x + 3, AXIS_H / 2);
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
    if (tl.hl && tl.hl.row < D.rows.length) {
      const y = AXIS_H + tl.hl.row * LANE_H;
      const x0 = Math.max(LABEL_W, tx(tl.hl.t0));
      const x1 = Math.min(right, Math.max(x0 + 2, tx(tl.hl.t1)));
      if (x1 > LABEL_W && x0 < right) {
        ctx.fillStyle = 'rgba(255, 193, 7, 0.25)';
        ctx.fillRect(x0, y, x1 - x0, LANE_H - 2);
        ctx.strokeStyle = '#e6a100';
        ctx.lineWidth = 2;
        ctx.strokeRect(x0, y + 1, x1 - x0, LANE_H - 4);
      }
    }
    if (tl.brush) {
      const y = AXIS_H + tl.brush.row * LANE_H;
      const x0 = Math.max(LABEL_W, Math.min(tl.brush.x0, tl.brush.x1));
      const x1 = Math.min(right, Math.max(tl.brush.x0, tl.brush.x1));
      ctx.fillStyle = 'rgba(30, 136, 229, 0.2)';
      ctx.fillRect(x0, y, x1 - x0, LANE_H - 2);
      ctx.strokeStyle = '#1e88e5';
      ctx.lineWidth = 1;
      ctx.strokeRect(x0 + 0.5, y + 0.5, x1 - x0 - 1, LANE_H - 3);
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
      const what = kinds[i] === 'park' ? '' : B.span[i] > 0 ? 'click: the flamegraph of this span' : B.span[i] < 0 ? 'click: (span left out of the page)' : "click: the flamegraph of this lane's samples in it";
      const lines = [D.rows[hit.row], fmtNs(B.start[i]) + ' – ' + fmtNs(B.end[i]) + '  (' + fmtNs(B.end[i] - B.start[i]) + ')'];
      if (what) lines.push({ text: what, cls: 'tt-dim' });
      showTip(ev, kinds[i] + ': ' + D.strings[B.name[i]], lines);
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
  let noClick = false; // the click that ends a pan or a brush selects nothing
  tlCanvas.addEventListener('mousemove', (ev) => {
    const r = tlCanvas.getBoundingClientRect();
    const mx = ev.clientX - r.left;
    if (tl.brush) {
      tl.brush.x1 = Math.max(LABEL_W, mx);
      hideTip();
      redrawTimeline();
      return;
    }
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
    const mx = ev.clientX - r.left;
    const row = Math.floor((ev.clientY - r.top - AXIS_H) / LANE_H);
    noClick = false;
    if (ev.shiftKey && mx >= LABEL_W && row >= 0 && row < D.rows.length) {
      ev.preventDefault(); // no text selection
      tl.brush = { row, x0: mx, x1: mx };
      return;
    }
    drag = { x: mx, v0: tl.v0, v1: tl.v1, moved: false };
  });
  window.addEventListener('mouseup', (ev) => {
    if (drag && drag.moved) noClick = true;
    drag = null;
    const b = tl.brush;
    if (!b) return;
    tl.brush = null;
    noClick = true;
    const x0 = Math.min(b.x0, b.x1);
    const x1 = Math.max(b.x0, b.x1);
    if (x1 - x0 < 3) {
      redrawTimeline();
      return;
    }
    hooks.onRange(b.row, Math.round(xt(x0)), Math.round(xt(x1)), ev); // whole ns, as sample times are
  });
  tlCanvas.addEventListener('click', (ev) => {
    if (noClick) {
      noClick = false;
      return;
    }
    const r = tlCanvas.getBoundingClientRect();
    const hit = tlHit(ev.clientX - r.left, ev.clientY - r.top);
    if (hit && hit.kind === 'bar' && kinds[hit.i] !== 'park') hooks.onBar(hit.i, ev);
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
  // showRange: the view from t0 to t1 (ns), drawn now.
  V.showRange = (t0, t1) => {
    tl.v0 = t0;
    tl.v1 = Math.max(t1, t0 + 1000);
    drawTimeline();
  };
  // barPoint: a point where a click hits bar i, with the view zoomed to
  // the bar (a tenth of the plot wide) when it is narrower than that.
  V.barPoint = (i) => {
    measurePlot();
    const span = B.end[i] - B.start[i];
    if (tx(B.end[i]) - tx(B.start[i]) < plotW() / 10 || B.start[i] < tl.v0 || B.end[i] > tl.v1) {
      const mid = (B.start[i] + B.end[i]) / 2;
      V.showRange(mid - 5 * Math.max(span, 1000), mid + 5 * Math.max(span, 1000));
    }
    const rt = kinds[i] === 'poll' || kinds[i] === 'park';
    const tr = rt ? TRACK.runtime : TRACK.span;
    const y = AXIS_H + B.row[i] * LANE_H + tr[0] + tr[1] / 2;
    for (let x = Math.ceil(tx(B.start[i])) + 1; x < tx(B.end[i]); x++) {
      const hit = tlHit(x, y);
      if (hit && hit.kind === 'bar' && hit.i === i) return { x, y };
    }
    return null;
  };
  V.fullRange = [D.t0, Math.max(D.t1, D.t0 + 1000)];
  V.barInfo = (i) => ({ row: B.row[i], kind: kinds[i], name: D.strings[B.name[i]], startNs: B.start[i], endNs: B.end[i], span: B.span[i] });
  // spanBars: n bars with a span, spread over the bar table.
  V.spanBars = (n) => {
    const all = [];
    for (let i = 0; i < B.span.length; i++) if (B.span[i] > 0 && kinds[i] === 'span') all.push(i);
    const out = [];
    for (let k = 0; k < n && all.length; k++) out.push(all[Math.floor(((k + 0.5) * all.length) / n)]);
    return out;
  };
  // lanePoint: the point of time t (ns) in the middle of a lane.
  V.lanePoint = (row, t) => ({ x: tx(t), y: AXIS_H + row * LANE_H + LANE_H / 2 });
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

  return {
    draw: drawTimeline,
    // highlight outlines {row, t0, t1} (null: nothing) and redraws.
    highlight(h) {
      tl.hl = h;
      redrawTimeline();
    },
  };
}
