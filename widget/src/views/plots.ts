// Small SVG bar charts (histograms, per-channel bars) in the Explorer's style, with the value under the pointer in
// the tooltip. Drawn by hand: a chart is tens of elements, and a general plotting library cost about 15 ms a
// redraw on a slow machine (and most of the bundle).
import { fmt } from "../dom";
import type { Store } from "../store";

const SVG = "http://www.w3.org/2000/svg";
const HEIGHT = 140;
const MARGIN = { top: 18, right: 12, bottom: 30 };

export interface Bar {
  x1: number;
  x2: number;
  y: number;
  fill: string;
}

export interface Small {
  el: SVGSVGElement;
  /** data x under a client x coordinate */
  xAt: (clientX: number) => number;
}

function node<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number>, text?: string): SVGElementTagNameMap[K] {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

/** About `count` round tick values (1, 2 or 5 times a power of ten) covering [lo, hi]. */
export function ticks(lo: number, hi: number, count: number): number[] {
  if (!(hi > lo) || !Number.isFinite(lo) || !Number.isFinite(hi)) return Number.isFinite(lo) ? [lo] : [];
  const raw = (hi - lo) / Math.max(1, count);
  const p = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw) ?? 10 * p;
  const out: number[] = [];
  for (let k = Math.ceil(lo / step); k * step <= hi + step * 1e-9; k++) out.push(Number((k * step).toPrecision(12)));
  return out;
}

/** A bar chart of `bars` (x1 to x2, height y from 0) `width` px wide, with axes, a grid and `desc` as its label. */
export function barChart(width: number, marginLeft: number, desc: string, xLabel: string, yLabel: string, bars: Bar[]): Small {
  let x0 = Infinity, x1 = -Infinity, y0 = 0, y1 = 0;
  for (const b of bars) {
    if (Number.isFinite(b.x1)) x0 = Math.min(x0, b.x1);
    if (Number.isFinite(b.x2)) x1 = Math.max(x1, b.x2);
    if (Number.isFinite(b.y)) {
      y0 = Math.min(y0, b.y);
      y1 = Math.max(y1, b.y);
    }
  }
  if (!(x1 > x0)) {
    x0 = Number.isFinite(x0) ? x0 - 0.5 : 0;
    x1 = x0 + 1;
  }
  if (!(y1 > y0)) y1 = y0 + 1;
  const left = marginLeft, right = width - MARGIN.right, top = MARGIN.top, bottom = HEIGHT - MARGIN.bottom;
  const sx = (v: number): number => left + ((v - x0) / (x1 - x0)) * (right - left);
  const sy = (v: number): number => bottom - ((v - y0) / (y1 - y0)) * (bottom - top);
  const svg = node("svg", { width, height: HEIGHT, viewBox: `0 0 ${width} ${HEIGHT}`, role: "img", "aria-label": desc, class: "nw-chart" });
  const grid = node("g", { class: "nw-chart-grid" }), axes = node("g", { class: "nw-chart-axes" }), marks = node("g", {});
  for (const t of ticks(y0, y1, 4)) {
    grid.append(node("line", { x1: left, x2: right, y1: sy(t), y2: sy(t) }));
    axes.append(node("text", { x: left - 4, y: sy(t), "text-anchor": "end", "dominant-baseline": "middle" }, fmt(t)));
  }
  for (const t of ticks(x0, x1, Math.max(2, Math.floor((right - left) / 60)))) {
    axes.append(node("line", { x1: sx(t), x2: sx(t), y1: bottom, y2: bottom + 4 }));
    axes.append(node("text", { x: sx(t), y: bottom + 14, "text-anchor": "middle" }, fmt(t)));
  }
  axes.append(node("text", { x: right, y: HEIGHT - 3, "text-anchor": "end" }, `${xLabel} →`));
  axes.append(node("text", { x: 2, y: 10 }, `↑ ${yLabel}`));
  for (const b of bars) {
    if (!Number.isFinite(b.y) || !Number.isFinite(b.x1) || !Number.isFinite(b.x2)) continue;
    const a = sx(b.x1), c = sx(b.x2), inset = Math.min(0.5, (c - a) / 4);
    const ya = sy(Math.max(0, b.y)), yb = sy(Math.min(0, b.y));
    marks.append(node("rect", { x: a + inset, width: Math.max(0, c - a - 2 * inset), y: ya, height: Math.max(0, yb - ya), fill: b.fill }));
  }
  marks.append(node("line", { class: "nw-chart-zero", x1: left, x2: right, y1: sy(0), y2: sy(0) }));
  svg.append(grid, marks, axes);
  const xAt = (clientX: number): number => {
    const box = svg.getBoundingClientRect();
    const px = ((clientX - box.left) / Math.max(1, box.width)) * width;
    return x0 + ((px - left) / (right - left)) * (x1 - x0);
  };
  return { el: svg, xAt };
}

/** Hovering `small` shows `text(x)` for the data x under the pointer (nothing where it returns null). */
export function hover(store: Store, small: Small, text: (x: number) => string | null): void {
  const signal = store.signal;
  small.el.addEventListener(
    "mousemove",
    (ev) => {
      const t = text(small.xAt(ev.clientX));
      if (t === null) store.tip.hide();
      else store.tip.show(ev, t);
    },
    { signal },
  );
  small.el.addEventListener("mouseleave", () => store.tip.hide(), { signal });
}
