// fusegrad VIZ, the timeline's tiles: its content (rows, ranges, memory) drawn in strips TILE_W px wide at one scale
// and kept while the scale stays, so a pan draws only the strips that come into view, and idle time draws the ones
// beside the view before a pan reaches them. A zoom changes the scale: the frame draws new tiles within a time budget
// and shows the last whole frame stretched where the rest will go, drawn in the frames after. Loaded before app.js.
"use strict";

const TILE_W = 256, MAX_TILES = 48, POOL = 64, IDLE_TILES = 2; // tiles kept per scale, canvases kept for reuse

class TimelineTiles {
  // render(ctx, t0, t1, scale, width): draw the content from time t0 to t1 at `scale` px per time unit, x = 0 at t0,
  // into a tile `width` CSS px wide (ctx is scaled to device pixels)
  constructor(render) {
    Object.assign(this, { render, set: null, pool: [], snap: null, view: null, complete: false, idle: 0, drawn: 0, made: 0,
      cost: 0 });
  }

  // forget every tile (the content changed: new rows, colours, a selection)
  reset() {
    if (this.set) this.release(this.set);
    this.set = null;
    this.snap = null;
  }

  // draw the content of view {t0, scale, left, width, height, dpr, key} onto ctx (the view's device pixels from
  // `left`), making missing tiles while `budget` ms last (at least one). True when every tile in view was there
  frame(ctx, view, budget) {
    const start = performance.now();
    if (!this.fits(view)) this.replace(view);
    this.view = view;
    const { k0, k1, origin } = this.span(view), set = this.set, missing = [];
    for (let k = k0; k <= k1; k++) if (!set.tiles.has(k)) missing.push(k);
    const mid = (k0 + k1) / 2; // the middle first: the eye is there, and a zoom keeps the cursor's place
    missing.sort((a, b) => Math.abs(a - mid) - Math.abs(b - mid));
    let made = 0;
    for (const k of missing) { // one tile at least; another only if it should fit in what is left of the budget
      if (made && performance.now() - start + this.cost > budget) break;
      const t = performance.now();
      this.make(k);
      this.cost = (this.cost + performance.now() - t) / 2; // the recent tiles' cost: it follows the scale and the load
      made++;
    }
    this.made = made;
    const complete = made === missing.length, tw = this.tileWidth(view), x = Math.round(view.left * view.dpr);
    ctx.save();
    ctx.setTransform(1, 0, 0, 1, 0, 0); // device pixels: tiles land on whole pixels, never resampled
    ctx.beginPath();
    ctx.rect(x, 0, Math.ceil(view.width * view.dpr), Math.ceil(view.height * view.dpr));
    ctx.clip();
    if (!complete) this.drawStretched(ctx, view);
    for (let k = k0; k <= k1; k++) {
      const tile = set.tiles.get(k);
      if (tile) ctx.drawImage(tile, x + k * tw - origin, 0);
    }
    ctx.restore();
    this.complete = complete;
    this.trim(k0, k1);
    return complete;
  }

  // draw tiles beside the view in idle time, so the next pan finds them
  prefetchLater() {
    if (this.idle || !this.set) return;
    this.idle = requestIdleCallback((deadline) => {
      this.idle = 0;
      if (!this.set || !this.fits(this.view)) return;
      const { k0, k1 } = this.span(this.view), room = () => deadline.timeRemaining() > this.cost + 2; // no overrun
      for (let d = 1; d <= IDLE_TILES && room(); d++) {
        for (const k of [k1 + d, k0 - d]) if (!this.set.tiles.has(k) && room()) this.make(k);
      }
    });
  }

  tileWidth(view) {
    return Math.round(TILE_W * view.dpr);
  }

  // the tiles k0..k1 that cover the view, and the view's left edge in the tile set's device pixels
  span(view) {
    const tw = this.tileWidth(view), unit = view.scale * view.dpr;
    const origin = Math.round((view.t0 - this.set.anchor) * unit);
    return { k0: Math.floor(origin / tw), k1: Math.floor((origin + Math.ceil(view.width * view.dpr) - 1) / tw), origin };
  }

  // the tiles made for an earlier view serve this one: same content, height and pixel ratio, the same scale (a pan
  // keeps it up to rounding), and not so far from where the set began that its pixel numbers lose precision
  fits(view) {
    const set = this.set;
    return Boolean(set) && set.key === view.key && set.height === view.height && set.dpr === view.dpr &&
      Math.abs(view.scale / set.scale - 1) < 1e-9 && Math.abs((view.t0 - set.anchor) * view.scale) < 1e7;
  }

  replace(view) {
    if (this.set && this.complete) this.keepFrame(); // the last whole frame stands in for this view's missing tiles
    if (this.set) this.release(this.set);
    this.set = { scale: view.scale, anchor: view.t0, key: view.key, height: view.height, dpr: view.dpr, tiles: new Map() };
  }

  release(set) {
    for (const tile of set.tiles.values()) if (this.pool.length < POOL) this.pool.push(tile);
    set.tiles.clear();
  }

  // tile k: device pixels k * tileWidth .. (k + 1) * tileWidth right of the set's anchor time
  make(k) {
    const set = this.set, tw = Math.round(TILE_W * set.dpr), h = Math.ceil(set.height * set.dpr);
    const tile = this.pool.pop() || document.createElement("canvas");
    if (tile.width !== tw || tile.height !== h) [tile.width, tile.height] = [tw, h]; // a resize clears it: only then
    const ctx = tile.getContext("2d"), unit = set.scale * set.dpr;
    ctx.setTransform(set.dpr, 0, 0, set.dpr, 0, 0);
    ctx.clearRect(0, 0, tw, h);
    this.render(ctx, set.anchor + (k * tw) / unit, set.anchor + ((k + 1) * tw) / unit, set.scale, tw / set.dpr);
    set.tiles.set(k, tile);
    this.drawn++;
  }

  // keep at most MAX_TILES, dropping those farthest from the view
  trim(k0, k1) {
    const tiles = this.set.tiles;
    if (tiles.size <= MAX_TILES) return;
    const far = (k) => (k < k0 ? k0 - k : k > k1 ? k - k1 : 0);
    const order = [...tiles.keys()].sort((a, b) => far(b) - far(a));
    for (const k of order.slice(0, tiles.size - MAX_TILES)) {
      if (this.pool.length < POOL) this.pool.push(tiles.get(k));
      tiles.delete(k);
    }
  }

  // the content of the last whole frame (its tiles, put together once the scale changes: not each frame), and its
  // view, for the frames that wait on tiles at the new scale
  keepFrame() {
    const view = this.view, { k0, k1, origin } = this.span(view), tw = this.tileWidth(view);
    const w = Math.ceil(view.width * view.dpr), h = Math.ceil(view.height * view.dpr);
    const snap = this.snap || (this.snap = { canvas: document.createElement("canvas") });
    if (snap.canvas.width !== w || snap.canvas.height !== h) [snap.canvas.width, snap.canvas.height] = [w, h];
    const ctx = snap.canvas.getContext("2d");
    ctx.clearRect(0, 0, w, h);
    for (let k = k0; k <= k1; k++) if (this.set.tiles.has(k)) ctx.drawImage(this.set.tiles.get(k), k * tw - origin, 0);
    Object.assign(snap, { t0: view.t0, scale: view.scale, dpr: view.dpr, height: view.height });
  }

  // the last whole frame moved and stretched to this view's time axis: a stand-in until the tiles are drawn
  drawStretched(ctx, view) {
    const snap = this.snap;
    if (!snap || snap.dpr !== view.dpr || snap.height !== view.height) return;
    const x = view.left * view.dpr + (snap.t0 - view.t0) * view.scale * view.dpr;
    ctx.drawImage(snap.canvas, x, 0, snap.canvas.width * (view.scale / snap.scale), snap.canvas.height);
  }
}
