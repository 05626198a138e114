// perfprof HTML view: flamegraph and timeline drawn on canvases from the
// aggregated data in #perfprof-data (see aggregate.go for its layout).
// Everything is local: no request leaves the page.
//
// The page's script is this file, flame.js, timeline.js and scope.js, concatenated
// into one function of page.html (so that nothing but window.perfprofView
// is global). This file starts the page and holds what both views use:
// formatting, the tooltip, canvas sizing. The views' files hold only
// function declarations, which exist before main runs.
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
  const ui = shared(D);
  const { $, fmtInt, fmtNs } = ui;

  // ---- summary ----
  const st = D.stats;
  const parts = [fmtInt(st.samples) + ' samples'];
  if (st.offCPU) parts.push(fmtInt(st.onCPU) + ' on-CPU, ' + fmtInt(st.offCPU) + ' off-CPU (' + fmtNs(st.offCPUNs) + ')');
  parts.push(fmtNs(D.t1 - D.t0) + ' (' + fmtNs(D.t0) + ' to ' + fmtNs(D.t1) + ')');
  parts.push(D.rows.length + ' row' + (D.rows.length === 1 ? '' : 's'));
  parts.push(fmtInt(st.bars) + ' bars' + (D.barsMerged ? ' (' + fmtInt(D.barsMerged) + ' merged for drawing)' : ''));
  $('summary').textContent = parts.join(' · ');

  const flame = flameView(D, ui);
  const hooks = {}; // the timeline's clicks, which scopeView handles
  const timeline = timelineView(D, ui, hooks);
  const scope = scopeView(D, ui, flame, timeline, hooks);
  V.setSearch = (s) => {
    $('search').value = s;
    flame.search();
  };
  V.redraw = () => {
    flame.draw();
    timeline.draw();
    return { flameDrawMs: V.flameDrawMs, timelineDrawMs: V.timelineDrawMs };
  };
  V.stats = D.stats;
  V.rows = D.rows;

  // ---- first draw ----
  flame.start();
  V.flameDrawnMs = performance.now();
  V.drawMs = V.flameDrawnMs; // since navigation start
  timeline.draw();
  V.timelineDrawnMs = performance.now();
  let resizePending = false;
  window.addEventListener('resize', () => {
    if (resizePending) return;
    resizePending = true;
    requestAnimationFrame(() => {
      resizePending = false;
      flame.draw();
      timeline.draw();
    });
  });
  V.ready = true;
  // The per-sample data the scoped views need: after the first draw, so
  // that it does not delay it.
  setTimeout(() => scope.load().catch(() => {}), 0);
}

// shared returns what both views use. charW, the width of a character of
// the monospace font, is measured by the flamegraph's draw and read by
// fitText and the timeline's axis labels.
function shared(D) {
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

  return {
    V, $, MONO, names, lowerNames, fmtInt, fmtNs, fmtPct, fnName, fnFile, fileLine, showTip, hideTip, sizeCanvas, hash, fitText,
    get charW() {
      return charW;
    },
    set charW(w) {
      charW = w;
    },
  };
}
