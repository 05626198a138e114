// Drives a perfprof HTML report (internal/htmlview) in headless Chromium.
//
//   node check.mjs REPORT.html SCREENSHOT.png [PLAN-JSON]
//
// PLAN-JSON (optional): {"clickFrame": "name", "search": "text", "markRow": 0,
// "scope": {...}}. Without it the script picks the widest child of the root
// and row 0. With "scope" it then drives the span-scoped views (see
// scopeSteps below).
//
// The network is closed for the page: the context is offline and every
// request other than the report itself is aborted and reported. Prints one
// JSON object with what it observed and exits 1 when the page failed to load,
// threw, logged an error or made a request (internal/htmlview's browser_test.go
// asserts the rest). Chromium: $CHROMIUM, else /usr/bin/chromium (Debian's).
import { chromium } from 'playwright-core';
import { pathToFileURL } from 'node:url';
import path from 'node:path';

const [file, shot, planArg] = process.argv.slice(2);
if (!file || !shot) {
  console.error('usage: node check.mjs REPORT.html SCREENSHOT.png [PLAN-JSON]');
  process.exit(2);
}
const plan = planArg ? JSON.parse(planArg) : {};
const fileURL = pathToFileURL(path.resolve(file)).href;
const out = { url: fileURL, requests: [], blocked: [], errors: [], steps: {} };
const T = Date.now();
const mark = (name) => {
  out.timing = out.timing || {};
  out.timing[name] = Date.now() - T;
};
const fail = (msg) => {
  out.errors.push(msg);
};

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  // playwright-core adds a fresh --user-data-dir of its own.
  args: [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
  ],
});
mark('launched');
try {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 }, deviceScaleFactor: 1, offline: true });
  context.on('request', (r) => {
    if (r.url() !== fileURL) out.requests.push(r.url());
  });
  await context.route('**/*', (route) => {
    const u = route.request().url();
    if (u === fileURL) return route.continue();
    out.blocked.push(u);
    return route.abort('blockedbyclient');
  });
  mark('context');
  const page = await context.newPage();
  mark('page');
  page.on('pageerror', (e) => fail('page error: ' + e.message));
  page.on('console', (m) => {
    if (m.type() === 'error') fail('console error: ' + m.text());
  });

  mark('before-goto');
  const t0 = Date.now();
  await page.goto(fileURL, { waitUntil: 'load', timeout: 60000 });
  await page.waitForFunction(() => window.perfprofView && (window.perfprofView.ready || window.perfprofView.error), null, { timeout: 60000 });
  out.loadWallMs = Date.now() - t0;
  const V = () => page.evaluate(() => window.perfprofView);
  const state = await page.evaluate(() => {
    const v = window.perfprofView;
    return {
      ready: v.ready,
      error: v.error,
      scriptStartMs: v.scriptStartMs,
      parsedMs: v.parsedMs,
      drawMs: v.drawMs,
      flameDrawMs: v.flameDrawMs,
      timelineDrawMs: v.timelineDrawMs,
      timelineDrawnMs: v.timelineDrawnMs,
      flameBoxes: v.flameBoxes,
      zoomedFrame: v.zoomedFrame,
      mode: v.mode,
      total: v.total,
      stats: v.stats,
      rows: v.rows,
      title: document.title,
    };
  });
  out.load = state;
  if (!state.ready) throw new Error('page not ready: ' + state.error);
  const tooltip = async () => page.evaluate(() => {
    const t = document.getElementById('tooltip');
    return { visible: !t.hidden && t.getBoundingClientRect().width > 0, text: t.innerText };
  });

  mark('before-flame');
  // Flamegraph: hover then click a frame.
  let frame = plan.clickFrame;
  if (!frame) frame = await page.evaluate(() => window.perfprofView.widestFrame(1));
  const rect = await page.evaluate((name) => (name ? window.perfprofView.frameRect(name) : null), frame);
  if (frame && !rect) fail('frame not drawn: ' + frame);
  if (rect) {
    const pos = { x: rect.x + rect.w / 2, y: rect.y + rect.h / 2 };
    await page.locator('#flame').hover({ position: pos });
    out.steps.flameHover = { tooltip: await tooltip(), hovered: (await V()).hovered };
    await page.locator('#flame').click({ position: pos });
    const v = await V();
    const after = await page.evaluate((name) => window.perfprofView.frameRect(name), frame);
    const width = await page.evaluate(() => document.getElementById('flame').clientWidth);
    out.steps.click = { frame, rectBefore: rect, zoomedFrame: v.zoomedFrame, zoomPath: v.zoomPath, zoomedWidth: after && after.w, canvasWidth: width, zoomText: await page.textContent('#zoom-path') };
    await page.screenshot({ path: shot.replace(/\.png$/, '') + '-zoomed.png', fullPage: true });
    await page.click('#reset');
    out.steps.reset = { zoomedFrame: (await V()).zoomedFrame };
  }

  mark('before-search');
  // Search.
  if (plan.search) {
    await page.fill('#search', plan.search);
    const v = await V();
    out.steps.search = {
      term: plan.search,
      matches: v.searchMatches,
      percent: v.searchPercent,
      frames: v.searchFrames,
      total: v.total,
      text: await page.textContent('#search-result'),
    };
  }

  mark('before-offcpu');
  // Off-CPU view and back.
  if (!(await page.isDisabled('#mode-off'))) {
    await page.check('#mode-off');
    const v = await V();
    out.steps.offMode = { mode: v.mode, total: v.total, searchMatches: v.searchMatches };
    await page.check('#mode-on');
    out.steps.onMode = { mode: (await V()).mode, total: (await V()).total };
  }

  mark('before-timeline');
  // Timeline: wheel zoom and reset, then zoom into the middle and hover the
  // heaviest mark of a row there.
  const row = plan.markRow || 0;
  const tlLoc = page.locator('#timeline');
  await tlLoc.scrollIntoViewIfNeeded();
  const b = await tlLoc.boundingBox();
  const full = (await V()).timelineRange;
  await page.mouse.move(b.x + b.width * 0.6, b.y + 40);
  await page.mouse.wheel(0, -400);
  await page.waitForFunction((r) => window.perfprofView.timelineRange[1] - window.perfprofView.timelineRange[0] < r[1] - r[0], full, { timeout: 5000 }).catch(() => {});
  const zoomed = (await V()).timelineRange;
  await tlLoc.dblclick({ position: { x: 5, y: 5 } });
  await page.waitForFunction((r) => window.perfprofView.timelineRange[0] === r[0] && window.perfprofView.timelineRange[1] === r[1], full, { timeout: 5000 }).catch(() => {});
  const reset = (await V()).timelineRange;
  out.steps.wheel = { full, zoomed, reset };
  await page.mouse.move(b.x + (b.width + 160) / 2, b.y + 40);
  await page.mouse.wheel(0, -(plan.timelineZoomWheel || 2000));
  await page.waitForTimeout(200);
  out.steps.wheel.detail = (await V()).timelineRange;
  const mp = await page.evaluate((r) => window.perfprofView.markPoint(r, false), row);
  if (!mp) fail('no mark in row ' + row);
  else {
    await tlLoc.hover({ position: { x: mp.x, y: mp.y } });
    out.steps.markHover = { point: { x: mp.x, y: mp.y }, expected: mp.mark, hoveredMark: (await V()).hoveredMark, tooltip: await tooltip() };
  }
  mark('before-shot');
  await page.screenshot({ path: shot, fullPage: true });
  out.screenshot = shot;
  if (plan.scope) await scopeSteps(page, plan.scope, tooltip);
} catch (e) {
  fail(String((e && e.stack) || e));
} finally {
  await browser.close();
}
if (out.requests.length) fail('the page made requests: ' + out.requests.join(', '));
if (out.blocked.length) fail('requests blocked: ' + out.blocked.join(', '));
console.log(JSON.stringify(out, null, 1));
process.exit(out.errors.length ? 1 : 0);

// scopeSteps drives the scoped views with real clicks and records what the
// page shows in out.scope. plan: {traceId: a root span's trace to click on
// the timeline, spanName: a row of the spans panel to click, diffName: a
// name for "slow vs typical", brushRow: a lane to shift-drag over, poll:
// true to click a poll bar, perfClicks: how many span bars to click for
// timings, shots: directory for the screenshots scoped-span.png,
// spans-panel.png and diff.png}.
async function scopeSteps(page, plan, tooltip) {
  const S = (out.scope = { shots: [], perf: { clicks: [] } });
  await page.waitForFunction(() => window.perfprofView.detailReady || window.perfprofView.detailError, null, { timeout: 60000 });
  const v0 = await page.evaluate(() => ({ detailMs: window.perfprofView.detailMs, error: window.perfprofView.detailError }));
  S.detailMs = v0.detailMs;
  if (v0.error) throw new Error('detail: ' + v0.error);
  await page.fill('#search', '');
  const tl = page.locator('#timeline');
  const scopeState = () => page.evaluate(() => window.perfprofView.scope);
  const shotPath = (name) => (plan.shots || '.') + '/' + name;
  // clickBar clicks bar i on the timeline and waits for the next selection.
  const clickBar = async (i) => {
    const before = await page.evaluate(() => window.perfprofView.selections || 0);
    await tl.scrollIntoViewIfNeeded();
    const pt = await page.evaluate((i) => window.perfprofView.barPoint(i), i);
    if (!pt) throw new Error('bar ' + i + ' cannot be hit');
    await tl.click({ position: pt });
    await page.waitForFunction((n) => (window.perfprofView.selections || 0) > n, before, { timeout: 10000 });
    return scopeState();
  };

  if (plan.traceId) {
    const f = await page.evaluate((id) => window.perfprofView.findSpan({ traceId: id }), plan.traceId);
    if (!f || f.bar < 0) throw new Error('no bar for the root span of trace ' + plan.traceId);
    S.span = await clickBar(f.bar);
    S.span.found = f;
    S.span.rootWidth = (await page.evaluate(() => window.perfprofView.frameRect('all'))) || null;
    await page.locator('#flame-section').scrollIntoViewIfNeeded();
    await page.screenshot({ path: shotPath('scoped-span.png'), fullPage: false });
    S.shots.push(shotPath('scoped-span.png'));
    await page.keyboard.press('Escape');
    S.afterEscape = await page.evaluate(() => ({ scoped: !!window.perfprofView.scope, total: window.perfprofView.total, headerHidden: document.getElementById('scope').hidden }));
    // And back with a click on the root frame.
    await clickBar(f.bar);
    const root = await page.evaluate(() => window.perfprofView.frameRect('all'));
    await page.locator('#flame').click({ position: { x: root.x + 5, y: root.y + root.h / 2 } });
    S.afterRootClick = await page.evaluate(() => ({ scoped: !!window.perfprofView.scope, total: window.perfprofView.total }));
  }
  if (plan.poll) {
    const i = await page.evaluate(() => window.perfprofView.findBar('poll'));
    if (i >= 0) {
      S.poll = await clickBar(i);
      S.poll.bar = await page.evaluate((i) => window.perfprofView.barInfo(i), i);
      await page.keyboard.press('Escape');
    }
  }
  if (plan.brushRow !== undefined) {
    await page.evaluate(() => window.perfprofView.showRange(window.perfprofView.fullRange[0], window.perfprofView.fullRange[1]));
    await tl.scrollIntoViewIfNeeded();
    const b = await tl.boundingBox();
    const row = plan.brushRow;
    const [a, z] = await page.evaluate(
      (row) => {
        const V = window.perfprofView;
        const [t0, t1] = V.fullRange;
        return [V.lanePoint(row, t0 + 0.4 * (t1 - t0)), V.lanePoint(row, t0 + 0.6 * (t1 - t0))];
      },
      row,
    );
    const before = await page.evaluate(() => window.perfprofView.selections || 0);
    await page.keyboard.down('Shift');
    await page.mouse.move(b.x + a.x, b.y + a.y);
    await page.mouse.down();
    await page.mouse.move(b.x + (a.x + z.x) / 2, b.y + a.y, { steps: 4 });
    await page.mouse.move(b.x + z.x, b.y + a.y, { steps: 4 });
    await page.mouse.up();
    await page.keyboard.up('Shift');
    await page.waitForFunction((n) => (window.perfprofView.selections || 0) > n, before, { timeout: 10000 });
    S.brush = await scopeState();
    S.perf.brush = S.brush.selectMs;
    await page.keyboard.press('Escape');
  }
  S.panel = await page.$$eval('#spans-table tr.span-name', (rows) =>
    rows.map((r) => {
      const cells = {};
      for (const td of r.querySelectorAll('td[data-col]')) cells[td.dataset.col] = td.textContent;
      return { name: r.dataset.name, cells };
    }),
  );
  if (plan.spanName) {
    const row = page.locator('#spans-table tr.span-name', { has: page.locator('td.name', { hasText: plan.spanName }) }).first();
    const before = await page.evaluate(() => window.perfprofView.selections || 0);
    await row.locator('td.name').click();
    await page.waitForFunction((n) => (window.perfprofView.selections || 0) > n, before, { timeout: 10000 });
    S.name = await scopeState();
    S.perf.name = S.name.selectMs;
    await page.waitForSelector('#spans-table tr.slowest .slow-span');
    S.slowest = await page.$$eval('#spans-table tr.slowest .slow-span', (bs) => bs.map((b) => ({ text: b.textContent, span: +b.dataset.span })));
    await page.locator('#spans-section').scrollIntoViewIfNeeded();
    await page.screenshot({ path: shotPath('spans-panel.png'), fullPage: true });
    S.shots.push(shotPath('spans-panel.png'));
    const b2 = await page.evaluate(() => window.perfprofView.selections || 0);
    await page.locator('#spans-table tr.slowest .slow-span').first().click();
    await page.waitForFunction((n) => (window.perfprofView.selections || 0) > n, b2, { timeout: 10000 });
    S.slowSpan = await scopeState();
    await page.keyboard.press('Escape');
  }
  if (plan.diffName) {
    const row = page.locator('#spans-table tr.span-name', { has: page.locator('td.name', { hasText: plan.diffName }) }).first();
    const before = await page.evaluate(() => window.perfprofView.selections || 0);
    await row.locator('.diff-btn').click();
    await page.waitForFunction((n) => (window.perfprofView.selections || 0) > n, before, { timeout: 10000 });
    S.diff = await page.evaluate(() => ({ scope: window.perfprofView.scope, top: window.perfprofView.diff.top.on || [], mode: window.perfprofView.mode }));
    S.perf.diff = S.diff.scope.selectMs;
    const top = S.diff.top[0];
    if (top) {
      const r = await page.evaluate((n) => window.perfprofView.frameRect(n), top.name);
      await page.locator('#flame-section').scrollIntoViewIfNeeded();
      if (r) {
        await page.locator('#flame').hover({ position: { x: r.x + Math.min(r.w / 2, 200), y: r.y + r.h / 2 } });
        S.diff.tooltip = await tooltip();
      }
    }
    await page.screenshot({ path: shotPath('diff.png'), fullPage: false });
    S.shots.push(shotPath('diff.png'));
    await page.mouse.move(0, 0);
    await page.keyboard.press('Escape');
  }
  // Timings: span bars spread over the trace, each a real click.
  const n = plan.perfClicks || 0;
  if (n > 0) {
    const bars = await page.evaluate((n) => window.perfprofView.spanBars(n), n);
    for (const i of bars) {
      const s = await clickBar(i);
      S.perf.clicks.push(s.selectMs);
      await page.keyboard.press('Escape');
    }
  }
}
