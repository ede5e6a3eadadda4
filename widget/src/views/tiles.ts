// A sample (C x spatial) as an image: each channel a tile of its H x W plane (a strip for 1-D inputs), the tiles
// of a group side by side, a gap between groups that stays visible at any size.
import { clamp } from "../dom";
import type { Geo } from "../store";

export interface Tiles {
  rows: number; // a channel's rows (the spatial axes but the last)
  cols: number; // a channel's columns (the last spatial axis)
  tw: number; // tile width and height, CSS px
  th: number;
  tx: number[]; // each channel's tile's top-left corner, CSS px
  ty: number[];
  w: number; // the whole image
  h: number;
}

const PAD = 3; // room for the selection's outline

export function plane(spatial: number[]): [number, number] {
  if (spatial.length === 0) return [1, 1];
  return [spatial.slice(0, -1).reduce((a, b) => a * b, 1), spatial[spatial.length - 1] ?? 1];
}

export function tilesOf(geo: Geo, maxW: number): Tiles {
  const [rows, cols] = plane(geo.spatial);
  const strip = rows === 1;
  // tiles a row: whole groups where a group has at most 8 channels, else 8 (a group then spans rows)
  const perRow = strip ? 1 : Math.min(geo.c, geo.cg <= 8 ? geo.cg * Math.max(1, Math.floor(8 / geo.cg)) : 8);
  const gap = strip ? 0 : 1;
  const th0 = strip ? clamp(Math.floor(180 / geo.c), 2, 8) : 0;
  const ggap = strip ? (th0 >= 4 ? 2 : 1) : 3;
  const groupsPerRow = Math.max(1, Math.floor(perRow / geo.cg));
  const room = maxW - 2 * PAD - (perRow - 1) * gap - (groupsPerRow - 1) * ggap;
  const raw = room / (perRow * cols);
  // whole or half CSS pixels a value where they fit (crisp at a devicePixelRatio of 2), else what fits
  const px = raw >= 1 ? Math.min(8, Math.floor(raw * 2) / 2) : raw;
  const tw = px * cols, th = strip ? th0 : px * rows;
  const tx: number[] = [], ty: number[] = [];
  let y = PAD;
  for (let c = 0; c < geo.c; c++) {
    const k = c % perRow;
    if (c > 0 && k === 0) y += th + gap + (c % geo.cg === 0 ? ggap : 0);
    tx.push(PAD + k * (tw + gap) + Math.floor(k / geo.cg) * ggap);
    ty.push(y);
  }
  const w = Math.max(...tx) + tw + PAD, h = y + th + PAD;
  return { rows, cols, tw, th, tx, ty, w, h };
}

/** The element [c, s] under a point (CSS px inside the image), or null between tiles. */
export function elementAt(t: Tiles, x: number, y: number): [number, number] | null {
  for (let c = 0; c < t.tx.length; c++) {
    const dx = x - (t.tx[c] ?? 0), dy = y - (t.ty[c] ?? 0);
    if (dx < 0 || dy < 0 || dx >= t.tw || dy >= t.th) continue;
    const i = Math.floor((dy / t.th) * t.rows), j = Math.floor((dx / t.tw) * t.cols);
    return [c, i * t.cols + j];
  }
  return null;
}

/** Draws `vals` (C x S) as tiles with the colour words from `color`. */
export function drawTiles(ctx: CanvasRenderingContext2D, t: Tiles, c: number, vals: ArrayLike<number>, color: (v: number) => number): void {
  const img = new ImageData(t.cols, t.rows * c);
  const words = new Uint32Array(img.data.buffer);
  for (let i = 0; i < words.length; i++) words[i] = color(vals[i] ?? NaN);
  const native = document.createElement("canvas");
  native.width = t.cols;
  native.height = t.rows * c;
  native.getContext("2d")?.putImageData(img, 0, 0);
  for (let k = 0; k < c; k++) ctx.drawImage(native, 0, k * t.rows, t.cols, t.rows, t.tx[k] ?? 0, t.ty[k] ?? 0, t.tw, t.th);
}

/** Outlines group g's tiles and element [c, s]. */
export function drawMarks(ctx: CanvasRenderingContext2D, t: Tiles, cg: number, g: number, el: [number, number] | null): void {
  const c0 = g * cg, c1 = c0 + cg - 1;
  let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
  for (let c = c0; c <= c1; c++) {
    x0 = Math.min(x0, t.tx[c] ?? 0);
    y0 = Math.min(y0, t.ty[c] ?? 0);
    x1 = Math.max(x1, (t.tx[c] ?? 0) + t.tw);
    y1 = Math.max(y1, (t.ty[c] ?? 0) + t.th);
  }
  for (const [style, w] of [["#000", 3], ["#ff2d55", 2]] as const) {
    ctx.strokeStyle = style;
    ctx.lineWidth = w;
    ctx.strokeRect(x0 - 1.5, y0 - 1.5, x1 - x0 + 3, y1 - y0 + 3);
  }
  if (el === null) return;
  const [c, s] = el;
  const pw = t.tw / t.cols, ph = t.th / t.rows;
  const ex = (t.tx[c] ?? 0) + (s % t.cols) * pw, ey = (t.ty[c] ?? 0) + Math.floor(s / t.cols) * ph;
  const size = Math.max(5, pw + 2, ph + 2);
  for (const [style, w] of [["#000", 2.5], ["#fff", 1]] as const) {
    ctx.strokeStyle = style;
    ctx.lineWidth = w;
    ctx.strokeRect(ex + pw / 2 - size / 2, ey + ph / 2 - size / 2, size, size);
  }
}
