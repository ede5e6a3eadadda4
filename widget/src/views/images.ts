// The selected sample as images: x, y, dy and dx, each channel a tile, the selected group outlined. Clicking an
// element follows it in the worked example; in the "painted" mode dragging on dy paints the upstream gradient.
import { scaleOf } from "../color";
import { arrowKeys, fmt, h, sizeCanvas } from "../dom";
import { dxZero, zeroSentence } from "../numerics";
import { sampleValues, type Store } from "../store";
import { spatialIndex } from "./group";
import { drawMarks, drawTiles, elementAt, tilesOf, type Tiles } from "./tiles";
import { painter } from "./paint";

const NAMES: [string, string][] = [["x", "Input x"], ["y", "Output y"], ["dy", "Upstream gradient dy"], ["dx", "Gradient dx"]];
/** the images' grid's width, as a ResizeObserver last saw it (reading clientWidth while drawing would force a
 *  layout of the whole page in every redraw) */
const gridWidth = new WeakMap<Element, number>();

/** an image's widest: half the images' grid (two a row), at most 300 CSS px */
function maxWidth(p: Picture): number {
  const grid = p.canvas.closest(".nw-images");
  const w = (grid && gridWidth.get(grid)) ?? 0;
  return w > 0 ? Math.min(300, Math.floor((w - 10) / 2)) : 232;
}

export interface Picture {
  canvas: HTMLCanvasElement;
  caption: HTMLElement;
  tiles: Tiles | null;
}

/** The values image `name` shows for sample n (dx: a group whose dx is zero up to rounding is drawn as 0). */
function valuesOf(store: Store, name: string, n: number): { vals: ArrayLike<number>; noise: number } | null {
  const geo = store.geo!;
  if (name === "dy" && String(store.get("grad_mode")) === "painted" && store.paint !== null) return { vals: store.paint, noise: 0 };
  const raw = sampleValues(geo, store.results.get(name), n);
  if (raw === null || name !== "dx") return raw && { vals: raw, noise: 0 };
  const z = dxZero(store);
  const per = geo.cg * geo.s;
  let noise = 0;
  const vals = raw.map((v, i) => {
    const k = n * geo.g + Math.floor(i / per);
    noise = Math.max(noise, z.floor[k] ?? 0);
    return z.zero[k] ? 0 : v;
  });
  return { vals, noise };
}

export function drawPicture(store: Store, p: Picture, name: string, label: string): void {
  const geo = store.geo;
  if (geo === null) return;
  const [n, g] = store.sel();
  const got = valuesOf(store, name, n);
  if (got === null) {
    p.tiles = null;
    sizeCanvas(p.canvas, 1, 1);
    p.caption.textContent = `${label}: sample ${n} was not sent (only the first ${geo.sent} samples of large tensors are).`;
    return;
  }
  const t = tilesOf(geo, maxWidth(p));
  p.tiles = t;
  const ctx = sizeCanvas(p.canvas, t.w, t.h);
  // y is normalized: drawn on at least ±2 (times the affine's largest |w|), so a y squashed toward 0 looks pale
  const w = store.results.get("weight")?.data;
  const span = name === "y" ? 4 * Math.max(1, ...(w ? Array.from(w, Math.abs) : [1])) : 0;
  const sc = scaleOf(got.vals, got.noise, name === "dx" || name === "dy", span);
  if (ctx) {
    drawTiles(ctx, t, geo.c, got.vals, (v) => sc.words[sc.index(v)] ?? 0);
    drawMarks(ctx, t, geo.cg, g, store.element());
  }
  p.canvas.dataset.geom = JSON.stringify({ tx: t.tx, ty: t.ty, tw: t.tw, th: t.th, rows: t.rows, cols: t.cols });
  const range = sc.flat || sc.lo === sc.hi ? `all ${fmt(name === "dx" && sc.flat ? 0 : sc.hi)}` : `${fmt(sc.lo)} to ${fmt(sc.hi)}${sc.diverging ? " (blue < 0 < red)" : ""}`;
  const zero = name === "dx" ? zeroSentence(store) : null;
  p.caption.textContent = zero ?? `${label}, sample ${n}: ${range}`;
  p.caption.dataset.testid = `caption-${name}`;
  p.canvas.setAttribute("aria-label", `${label} of sample ${n}: ${geo.c} channels as tiles, groups of ${geo.cg}, group ${g} outlined; values ${range}. ${zero ?? ""}`);
}

function tipText(store: Store, name: string, c: number, s: number): string {
  const geo = store.geo!;
  const n = store.sel()[0];
  const lines = [`channel ${c} (group ${Math.floor(c / geo.cg)}), position ${spatialIndex(geo.spatial, s)}`];
  const zero = dxZero(store).zero[n * geo.g + Math.floor(c / geo.cg)] === 1;
  for (const [other] of NAMES) {
    const a = sampleValues(geo, store.results.get(other), n);
    if (a === null) continue;
    const v = a[c * geo.s + s] ?? NaN;
    const shown = other === "dx" && zero ? `0 (${fmt(v)}: rounding)` : fmt(v);
    if (other === name) lines.unshift(`${other}[${n}, ${c}, ${spatialIndex(geo.spatial, s)}] = ${shown}`);
    else lines.push(`${other} = ${shown}`);
  }
  return lines.join("\n");
}

function listen(store: Store, p: Picture, name: string): void {
  const signal = store.signal;
  const at = (ev: MouseEvent): [number, number] | null => {
    const box = p.canvas.getBoundingClientRect();
    return p.tiles && elementAt(p.tiles, ev.clientX - box.left, ev.clientY - box.top);
  };
  p.canvas.addEventListener(
    "mousemove",
    (ev) => {
      const e = at(ev);
      if (e === null) return store.tip.hide();
      store.tip.show(ev, tipText(store, name, e[0], e[1]));
    },
    { signal },
  );
  p.canvas.addEventListener("mouseleave", () => store.tip.hide(), { signal });
  const choose = (e: [number, number]): void => store.select(store.sel()[0], Math.floor(e[0] / (store.geo?.cg ?? 1)), e);
  p.canvas.addEventListener(
    "click",
    (ev) => {
      const e = at(ev);
      if (e && !p.canvas.classList.contains("nw-paint")) choose(e);
    },
    { signal },
  );
  arrowKeys(p.canvas, signal, () => store.element(), () => [store.geo?.c ?? 1, store.geo?.s ?? 1], choose);
}

export function imagesView(store: Store): HTMLElement {
  const pictures = new Map<string, Picture>();
  const grid = h("div", { class: "nw-images" });
  for (const [name, label] of NAMES) {
    const canvas = h("canvas", { class: "nw-image", role: "img", tabindex: "0", "data-testid": `image-${name}`, "aria-label": label });
    const caption = h("figcaption", {});
    const p: Picture = { canvas, caption, tiles: null };
    pictures.set(name, p);
    grid.append(h("figure", { class: "nw-figure" }, canvas, caption));
    listen(store, p, name);
  }
  const paintBox = h("div", { class: "nw-paint-box" });
  const title = h("h3", {});
  const el = h("section", { class: "nw-section", "data-testid": "images", "aria-label": "The selected sample" }, title, grid, paintBox);
  const dy = pictures.get("dy")!;
  const paint = painter(store, dy, paintBox, () => drawPicture(store, dy, "dy", "Upstream gradient dy"));
  const drawnFrom = new Map<string, { data: unknown; key: string }>();
  function draw(): void {
    const geo = store.geo;
    if (geo === null) return;
    const [n, g] = store.sel();
    title.textContent = `Sample n = ${n}: x, y, dy and dx (group ${g} outlined)`;
    paint.sync();
    const painted = String(store.get("grad_mode")) === "painted";
    for (const [name, label] of NAMES) {
      const p = pictures.get(name)!;
      // an image whose values, layout and marks did not change keeps what it drew (x on an eps or SiLU change)
      const data = name === "dy" && painted ? store.paint : store.results.get(name)?.data;
      const key = `${n}|${g}|${store.element().join()}|${geo.c}|${geo.cg}|${geo.s}|${painted}`;
      const prev = drawnFrom.get(name);
      if (data !== undefined && prev?.data === data && prev.key === key) continue;
      drawPicture(store, p, name, label);
      drawnFrom.set(name, { data, key });
      p.canvas.dataset.draws = String(Number(p.canvas.dataset.draws ?? "0") + 1);
    }
  }
  store.on(["results", "selection", "paint"], draw, el);
  // a new width lays the tiles out again
  const ro = new ResizeObserver(([entry]) => {
    const w = Math.round(entry?.contentRect.width ?? 0);
    if (w === (gridWidth.get(grid) ?? 0)) return;
    gridWidth.set(grid, w);
    drawnFrom.clear();
    draw();
  });
  ro.observe(grid);
  store.signal.addEventListener("abort", () => ro.disconnect());
  store.on(["controls"], () => paint.sync());
  return el;
}
