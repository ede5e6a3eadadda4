// An (N, G) array as a grid of cells: rows are samples, columns groups. Click or arrow keys select a group.
import { cssColor, scaleOf } from "../color";
import { arrowKeys, clamp, fmt, h, sizeCanvas } from "../dom";
import { dxZero } from "../numerics";
import type { Store } from "../store";

export interface Heatmap {
  el: HTMLElement;
  draw: () => void;
}

/** Values shown for `name`: ‖dx‖ of a group whose dx is zero up to rounding is shown as 0. */
function shown(store: Store, name: string): Float32Array | null {
  const a = store.results.get(name)?.data;
  if (a === undefined) return null;
  if (name !== "dx_norm") return a;
  const z = dxZero(store).zero;
  return a.map((v, i) => (z[i] ? 0 : v));
}

export function tipOf(store: Store, n: number, g: number): string {
  const geo = store.geo;
  if (geo === null) return "";
  const i = n * geo.g + g;
  const v = (name: string): string => fmt(store.results.get(name)?.data[i]);
  const zero = dxZero(store).zero[i] ? ` (0 up to rounding: ${v("dx_norm")})` : "";
  return `n = ${n}, g = ${g} (channels ${g * geo.cg}–${(g + 1) * geo.cg - 1})\nmean = ${v("mean")}\nrstd = ${v("rstd")}\n‖dx‖ = ${zero ? "0" + zero : v("dx_norm")}`;
}

export function heatmap(store: Store, name: string, label: string): Heatmap {
  const canvas = h("canvas", { class: "nw-heatmap", "data-testid": `heatmap-${name}`, tabindex: "0", role: "img" });
  const caption = h("figcaption", {});
  const el = h("figure", { class: "nw-figure" }, canvas, caption);
  const signal = store.signal;
  let cell: [number, number] = [8, 8];
  const cellAt = (ev: MouseEvent): [number, number] | null => {
    const geo = store.geo;
    if (geo === null) return null;
    const box = canvas.getBoundingClientRect();
    const g = Math.floor(((ev.clientX - box.left) / box.width) * geo.g);
    const n = Math.floor(((ev.clientY - box.top) / box.height) * geo.n);
    return n >= 0 && n < geo.n && g >= 0 && g < geo.g ? [n, g] : null;
  };
  canvas.addEventListener(
    "mousemove",
    (ev) => {
      const p = cellAt(ev);
      if (p === null) return store.tip.hide();
      store.tip.show(ev, tipOf(store, p[0], p[1]));
      if (store.hover?.[0] !== p[0] || store.hover?.[1] !== p[1]) {
        store.hover = p;
        store.emit(["hover"]);
      }
    },
    { signal },
  );
  canvas.addEventListener(
    "mouseleave",
    () => {
      store.tip.hide();
      store.hover = null;
      store.emit(["hover"]);
    },
    { signal },
  );
  canvas.addEventListener(
    "click",
    (ev) => {
      const p = cellAt(ev);
      if (p) store.select(p[0], p[1]);
    },
    { signal },
  );
  arrowKeys(canvas, signal, () => store.sel(), () => [store.geo?.n ?? 1, store.geo?.g ?? 1], (p) => store.select(p[0], p[1]));

  function draw(): void {
    const geo = store.geo;
    const vals = shown(store, name);
    if (geo === null || vals === null) {
      caption.textContent = `${label}: not in the results`;
      return;
    }
    cell = [clamp(Math.floor(80 / geo.n), 4, 18), clamp(Math.floor(200 / geo.g), 4, 24)];
    const [ch, cw] = cell;
    const ctx = sizeCanvas(canvas, geo.g * cw, geo.n * ch);
    const sc = scaleOf(vals);
    if (ctx) {
      for (let n = 0; n < geo.n; n++)
        for (let g = 0; g < geo.g; g++) {
          ctx.fillStyle = cssColor(sc.words[sc.index(vals[n * geo.g + g] ?? NaN)] ?? 0);
          ctx.fillRect(g * cw, n * ch, cw, ch);
        }
      const [sn, sg] = store.sel();
      // the selected sample's row, then the selected group: white over black, visible on every colour
      ctx.lineWidth = 1;
      ctx.strokeStyle = "rgba(255,255,255,0.8)";
      ctx.strokeRect(0.5, sn * ch + 0.5, geo.g * cw - 1, ch - 1);
      for (const [style, w] of [["#000", 4], ["#fff", 2]] as const) {
        ctx.strokeStyle = style;
        ctx.lineWidth = w;
        ctx.strokeRect(sg * cw + 1, sn * ch + 1, cw - 2, ch - 2);
      }
    }
    const range = sc.flat ? `all ${fmt(sc.hi)} (equal up to rounding)` : `from ${fmt(sc.lo)} to ${fmt(sc.hi)}`;
    canvas.setAttribute("aria-label", `${label} per group, ${geo.n} samples by ${geo.g} groups, ${range}. Arrow keys move the selection.`);
    canvas.dataset.cellW = String(cw);
    canvas.dataset.cellH = String(ch);
    caption.textContent = `${label}, ${range}`;
  }
  return { el, draw };
}
