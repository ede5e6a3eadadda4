// The GroupNorm Explorer's front-end (anywidget ESM). It draws what numr_web/explorer.py computed and sends
// control changes back; it runs no kernels. The contract: docs/explorer-contract.md.
import type { AnyModel, RenderProps } from "@anywidget/types";
import * as Plot from "@observablehq/plot";
import { interpolateViridis, interpolateRdBu } from "d3-scale-chromatic";
import { decodeResults, parseMeta, type NdArray, type Results } from "./decode";
import { KINDS, cellInfo, cube, describe, type CubeSpec } from "./cube";

interface Traits {
  shape: number[];
  device: string;
  status: string;
  results: unknown;
  input_data: unknown;
  results_meta: unknown;
  num_groups: number;
  eps: number;
  offset: number;
  scale: number;
  channel_spread: number;
  outlier_channel: number;
  seed: number;
  dtype: string;
  memory_layout: string;
  silu: boolean;
  grad_mode: string;
  batch: number;
  sample: number;
  selected: number[];
  element: number[];
  dy_paint: unknown;
  [key: string]: unknown;
}
type Model = AnyModel<Traits>;

/** Tolerances of the backward's invariants, relative to the scale of the summed terms (see `invariants`). */
export const INVARIANT_TOL: Record<string, number> = { float32: 1e-5, float16: 2e-3, bfloat16: 1.6e-2 };

let instances = 0;

const fmt = (v: number | undefined): string => (v === undefined ? "-" : Number.isFinite(v) ? Number(v.toPrecision(7)).toString() : String(v));
const fmtE = (v: number): string => (Number.isFinite(v) ? v.toExponential(2) : String(v));
const fmtEps = (v: number): string => (v === 0 ? "0" : v < 1e-3 ? v.toExponential(2) : v.toPrecision(3));
const at = (a: ArrayLike<number> | undefined, i: number): number => (a === undefined ? NaN : (a[i] ?? NaN));

function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Record<string, string> = {}, ...kids: (Node | string)[]): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
}

function divisors(c: number): number[] {
  const out: number[] = [];
  for (let d = 1; d <= c; d++) if (c % d === 0) out.push(d);
  return out;
}

/** Everything a redraw needs, taken from the decoded results (their shapes win over the controls' traits, which may be ahead). */
interface View {
  r: Results;
  n: number; // batch of the statistics
  g: number;
  c: number;
  s: number; // spatial positions
  cg: number;
  sent: number; // samples of x/y/dy/dx sent
  sel: [number, number];
}

function viewOf(model: Model, r: Results): View | null {
  const mean = r.get("mean");
  const x = r.get("x");
  const shape = model.get("shape");
  if (mean === undefined || mean.shape.length !== 2) return null;
  const [n = 0, g = 0] = mean.shape;
  const full = x?.shape ?? shape;
  const c = full[1] ?? shape[1] ?? 0;
  const s = full.slice(2).reduce((a, b) => a * b, 1);
  if (n <= 0 || g <= 0 || c <= 0 || c % g !== 0) return null;
  const raw = model.get("selected");
  const sn = Math.min(Math.max(0, Math.trunc(Number(raw?.[0] ?? 0)) || 0), n - 1);
  const sg = Math.min(Math.max(0, Math.trunc(Number(raw?.[1] ?? 0)) || 0), g - 1);
  return { r, n, g, c, s, cg: c / g, sent: x?.shape[0] ?? 0, sel: [sn, sg] };
}

/** d3's interpolators give "#rrggbb" or "rgb(r, g, b)". */
function parseColor(css: string): [number, number, number] {
  const hex = /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(css);
  if (hex) return [parseInt(hex[1] ?? "0", 16), parseInt(hex[2] ?? "0", 16), parseInt(hex[3] ?? "0", 16)];
  const m = /rgb\((\d+), ?(\d+), ?(\d+)\)/.exec(css);
  return m ? [Number(m[1]), Number(m[2]), Number(m[3])] : [255, 0, 255];
}

function colorOf(interp: (t: number) => string, lo: number, hi: number): (v: number) => [number, number, number] {
  const cache = new Map<number, [number, number, number]>();
  return (v) => {
    const t = hi > lo ? Math.min(1, Math.max(0, (v - lo) / (hi - lo))) : 0.5;
    const k = Number.isFinite(t) ? Math.round(t * 255) : -1;
    let rgb = cache.get(k);
    if (rgb === undefined) {
      rgb = k < 0 ? [128, 128, 128] : parseColor(interp(k / 255));
      cache.set(k, rgb);
    }
    return rgb;
  };
}

function extent(a: ArrayLike<number>): [number, number] {
  let lo = Infinity, hi = -Infinity;
  for (let i = 0; i < a.length; i++) {
    const v = a[i] ?? NaN;
    if (Number.isFinite(v)) {
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  }
  return lo <= hi ? [lo, hi] : [0, 0];
}

/** A small Observable Plot chart in the Explorer's style (theme colours, a zero rule), described by `desc`. */
function smallPlot(width: number, marginLeft: number, desc: string, xLabel: string, yLabel: string, marks: Plot.Markish[]): SVGSVGElement | HTMLElement {
  return Plot.plot({
    width,
    height: 150,
    marginLeft,
    ariaLabel: desc,
    style: { background: "transparent", color: "currentColor", fontSize: "10px" },
    x: { label: xLabel },
    y: { label: yLabel, grid: true },
    marks: [...marks, Plot.ruleY([0])],
  });
}

function figure(caption: string, ...body: Node[]): HTMLElement {
  return h("figure", { class: "nw-figure" }, ...body, h("figcaption", {}, caption));
}

function render({ model, el }: RenderProps<Traits>): () => void {
  const ac = new AbortController();
  const signal = ac.signal;
  const id = `nw-explorer-${++instances}`;
  let hover: [number, number] | null = null;
  let results: Results = new Map();
  let meta: ReturnType<typeof parseMeta> = null;
  /** A parameter the shown results were computed with: from results_meta when the Python side put it there, else the trait (which may already be ahead of the results). */
  const param = (name: "eps" | "dtype" | "silu"): unknown => (meta !== null && name in meta.extra ? meta.extra[name] : model.get(name));

  const root = h("div", { class: "nw-explorer", id });
  const tooltip = h("div", { class: "nw-tooltip", role: "tooltip", hidden: "" });
  const title = h("h2", { class: "nw-title" }, "GroupNorm Explorer");
  const device = h("span", { class: "nw-device", "data-testid": "device" });
  const status = h("div", { class: "nw-status", role: "status", "aria-live": "polite", "data-testid": "status" });
  const controls = h("form", { class: "nw-controls", "aria-label": "Explorer controls" });
  const body = h("div", { class: "nw-body" });
  root.append(h("header", { class: "nw-header" }, title, device), status, controls, body, tooltip);
  el.replaceChildren(root);

  const send = (name: keyof Traits & string, value: unknown): void => {
    model.set(name, value);
    model.save_changes();
  };

  // ---- controls -------------------------------------------------------------------------------------------
  const field = (label: string, input: HTMLElement, extra?: Node): HTMLElement => {
    const fid = `${id}-${input.dataset.testid ?? label}`;
    input.id = fid;
    return h("div", { class: "nw-field" }, h("label", { for: fid }, label), input, ...(extra ? [extra] : []));
  };
  const select = (testid: string, options: [string, string][]): HTMLSelectElement => {
    const s = h("select", { "data-testid": testid });
    for (const [v, t] of options) s.append(h("option", { value: v }, t));
    return s;
  };
  const number = (testid: string, attrs: Record<string, string>): HTMLInputElement => h("input", { type: "number", "data-testid": testid, ...attrs });
  const on = (e: EventTarget, type: string, f: (ev: Event) => void): void => e.addEventListener(type, f, { signal });
  /** Listeners of the drawn views: dropped at the next redraw, with the elements they were on. */
  let drawn = new AbortController();
  const onDraw = (e: EventTarget, type: string, f: (ev: Event) => void): void => e.addEventListener(type, f, { signal: drawn.signal });

  const numGroups = select("num-groups", []);
  on(numGroups, "change", () => send("num_groups", Number(numGroups.value)));

  const epsLog = h("input", { type: "range", min: "-10", max: "0", step: "0.1", "data-testid": "eps" });
  const epsValue = h("output", { class: "nw-mono", "data-testid": "eps-value" });
  const epsZero = h("input", { type: "checkbox", "data-testid": "eps-zero" });
  const epsZeroId = `${id}-eps-zero`;
  epsZero.id = epsZeroId;
  const sendEps = (): void => send("eps", epsZero.checked ? 0 : Number((10 ** Number(epsLog.value)).toPrecision(3)));
  on(epsLog, "input", () => (epsValue.textContent = fmtEps(10 ** Number(epsLog.value))));
  on(epsLog, "change", sendEps);
  on(epsZero, "change", sendEps);

  const numeric = (name: keyof Traits & string, testid: string, attrs: Record<string, string>, parse: (s: string) => number): HTMLInputElement => {
    const i = number(testid, attrs);
    on(i, "change", () => {
      const v = parse(i.value);
      if (Number.isFinite(v) && i.checkValidity()) send(name, v);
    });
    return i;
  };
  const offset = numeric("offset", "offset", { step: "any" }, Number);
  const scale = numeric("scale", "scale", { step: "any", min: "1e-6" }, Number);
  const spread = numeric("channel_spread", "channel-spread", { step: "any", min: "0" }, Number);
  const seed = numeric("seed", "seed", { step: "1", min: "0" }, (s) => Math.trunc(Number(s)));
  const batch = numeric("batch", "batch", { step: "1", min: "1", max: "16" }, (s) => Math.trunc(Number(s)));
  const outlier = select("outlier-channel", [["-1", "none"]]);
  on(outlier, "change", () => send("outlier_channel", Number(outlier.value)));
  const dtype = select("dtype", [["float32", "float32"], ["float16", "float16"], ["bfloat16", "bfloat16"]]);
  on(dtype, "change", () => send("dtype", dtype.value));
  const layout = select("layout", [["nchw", "NCHW"], ["nhwc", "NHWC (channels-last)"]]);
  on(layout, "change", () => send("memory_layout", layout.value));
  const silu = h("input", { type: "checkbox", "data-testid": "silu" });
  on(silu, "change", () => send("silu", silu.checked));
  const gradMode = select("grad-mode", [["ones", "ones"], ["random", "random"], ["loss", "loss = sum(y²)/2 (dy = y)"], ["painted", "painted (draw on the dy image)"]]);
  on(gradMode, "change", () => send("grad_mode", gradMode.value));
  const sample = select("sample", []);
  on(sample, "change", () => send("sample", Number(sample.value)));

  controls.append(
    field("Groups G", numGroups),
    field("eps", epsLog, h("span", { class: "nw-eps" }, epsValue, h("label", { for: epsZeroId, class: "nw-inline" }, epsZero, "eps = 0"))),
    field("Offset", offset),
    field("Scale", scale),
    field("Per-channel spread", spread),
    field("Outlier channel", outlier),
    field("Seed", seed),
    field("dtype", dtype),
    field("Layout", layout),
    field("SiLU after GroupNorm", silu),
    field("Upstream gradient dy", gradMode),
    field("Sample shown", sample),
  );
  on(controls, "submit", (e) => e.preventDefault());

  const setOptions = (s: HTMLSelectElement, opts: [string, string][], value: string): void => {
    const same = s.options.length === opts.length && opts.every(([v], i) => s.options[i]?.value === v);
    if (!same) s.replaceChildren(...opts.map(([v, t]) => h("option", { value: v }, t)));
    s.value = value;
  };
  const setIfIdle = (i: HTMLInputElement, v: string): void => {
    if (document.activeElement !== i || i.closest(`#${id}`) === null) i.value = v;
    else if (i.value === "") i.value = v;
  };

  function syncControls(): void {
    const shape = model.get("shape") ?? [];
    const c = shape[1] ?? 0;
    const g = Number(model.get("num_groups"));
    setOptions(numGroups, divisors(c).map((d) => [String(d), `${d}  (${c / d} ch/group)`]), String(g));
    const eps = Number(model.get("eps"));
    epsZero.checked = eps === 0;
    if (eps > 0) epsLog.value = String(Math.log10(eps));
    epsLog.disabled = eps === 0;
    epsValue.textContent = fmtEps(eps);
    setIfIdle(offset, String(model.get("offset")));
    setIfIdle(scale, String(model.get("scale")));
    setIfIdle(spread, String(model.get("channel_spread")));
    setIfIdle(seed, String(model.get("seed")));
    const n = Number(model.get("batch") ?? shape[0] ?? 1);
    setIfIdle(batch, String(n));
    const oc: [string, string][] = [["-1", "none"]];
    for (let i = 0; i < c; i++) oc.push([String(i), `channel ${i}`]);
    setOptions(outlier, oc, String(model.get("outlier_channel")));
    dtype.value = String(model.get("dtype"));
    layout.value = String(model.get("memory_layout"));
    silu.checked = Boolean(model.get("silu"));
    gradMode.value = String(model.get("grad_mode"));
    const so: [string, string][] = [];
    for (let i = 0; i < Math.max(1, n); i++) so.push([String(i), `n = ${i}`]);
    setOptions(sample, so, String(model.get("sample")));
  }

  // ---- status ---------------------------------------------------------------------------------------------
  function drawStatus(): void {
    const s = String(model.get("status") ?? "");
    const meta = parseMeta(model.get("results_meta"));
    root.classList.toggle("nw-busy", s === "computing");
    status.classList.toggle("nw-error", s.startsWith("error"));
    status.textContent = s === "computing" ? "Computing…" : s.startsWith("error") ? `Error: ${s.replace(/^error:\s*/, "")}` : `Up to date (results v${meta?.version ?? "-"})`;
    device.textContent = String(model.get("device") ?? "");
  }

  // ---- canvas heatmap of an (N, G) array ------------------------------------------------------------------
  function heatmap(v: View, name: string, label: string): HTMLElement {
    const a = v.r.get(name);
    if (a === undefined) return h("p", {}, `${name}: not in the results`);
    const cw = Math.max(6, Math.min(28, Math.floor(360 / v.g)));
    const ch = Math.max(6, Math.min(28, Math.floor(160 / v.n)));
    const canvas = h("canvas", { class: "nw-heatmap", "data-testid": `heatmap-${name}`, tabindex: "0", role: "img" });
    canvas.width = v.g * cw;
    canvas.height = v.n * ch;
    canvas.dataset.cellW = String(cw);
    canvas.dataset.cellH = String(ch);
    const [lo, hi] = extent(a.data);
    canvas.setAttribute("aria-label", `${label} heatmap, ${v.n} samples by ${v.g} groups, from ${fmt(lo)} to ${fmt(hi)}; the table of per-group statistics has the values. Arrow keys move the selection.`);
    const ctx = canvas.getContext("2d");
    if (ctx) {
      const color = colorOf(interpolateViridis, lo, hi);
      for (let n = 0; n < v.n; n++)
        for (let g = 0; g < v.g; g++) {
          const [r, gg, b] = color(at(a.data, n * v.g + g));
          ctx.fillStyle = `rgb(${r},${gg},${b})`;
          ctx.fillRect(g * cw, n * ch, cw, ch);
        }
      const mark = (p: [number, number] | null, style: string, w: number): void => {
        if (!p) return;
        ctx.strokeStyle = style;
        ctx.lineWidth = w;
        ctx.strokeRect(p[1] * cw + w / 2, p[0] * ch + w / 2, cw - w, ch - w);
      };
      mark(v.sel, "#ff2d55", 2);
      mark(hover, "#ffffff", 1);
    }
    const cellAt = (ev: MouseEvent): [number, number] | null => {
      const box = canvas.getBoundingClientRect();
      const g = Math.floor(((ev.clientX - box.left) / box.width) * v.g);
      const n = Math.floor(((ev.clientY - box.top) / box.height) * v.n);
      return n >= 0 && n < v.n && g >= 0 && g < v.g ? [n, g] : null;
    };
    onDraw(canvas, "mousemove", (e) => {
      const ev = e as MouseEvent;
      const p = cellAt(ev);
      if (p === null) return hideTip();
      const mean = v.r.get("mean"), rstd = v.r.get("rstd"), dxn = v.r.get("dx_norm");
      const i = p[0] * v.g + p[1];
      showTip(ev, `n = ${p[0]}, g = ${p[1]} (channels ${p[1] * v.cg}–${(p[1] + 1) * v.cg - 1})\nmean = ${fmt(at(mean?.data, i))}\nrstd = ${fmt(at(rstd?.data, i))}\n‖dx‖ = ${fmt(at(dxn?.data, i))}`);
      if (hover?.[0] !== p[0] || hover?.[1] !== p[1]) {
        hover = p;
        drawCubes();
      }
    });
    onDraw(canvas, "mouseleave", () => {
      hideTip();
      hover = null;
      drawCubes();
    });
    onDraw(canvas, "click", (e) => {
      const p = cellAt(e as MouseEvent);
      if (p) select_(p);
    });
    arrowKeys(canvas, v.sel, v.n, v.g, select_);
    return figure(`${label} per (n, g): rows n = 0…${v.n - 1}, columns g = 0…${v.g - 1}; colour from ${fmt(lo)} (dark) to ${fmt(hi)} (yellow). Click a cell to select it.`, canvas);
  }

  /** Arrow keys on a focused grid canvas move `from` (row, column) within rows x cols and hand the cell to `go`,
   *  which redraws and puts the focus back on the canvas. */
  function arrowKeys(canvas: HTMLCanvasElement, from: [number, number], rows: number, cols: number, go: (p: [number, number], focus?: string) => void): void {
    const step: Record<string, [number, number]> = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    onDraw(canvas, "keydown", (e) => {
      const m = step[(e as KeyboardEvent).key];
      if (!m) return;
      e.preventDefault();
      go([Math.min(rows - 1, Math.max(0, from[0] + m[0])), Math.min(cols - 1, Math.max(0, from[1] + m[1]))], canvas.dataset.testid);
    });
  }

  let refocus: string | undefined;
  /** Selects group p; the change event redraws (once, in a microtask) and puts the focus back on `focus`. */
  function select_(p: [number, number], focus?: string): void {
    refocus = focus;
    send("selected", [p[0], p[1]]);
  }
  function showTip(ev: MouseEvent, text: string): void {
    tooltip.textContent = text;
    tooltip.hidden = false;
    const box = root.getBoundingClientRect();
    tooltip.style.left = `${ev.clientX - box.left + 14}px`;
    tooltip.style.top = `${ev.clientY - box.top + 14}px`;
  }
  function hideTip(): void {
    tooltip.hidden = true;
  }

  // ---- sections -------------------------------------------------------------------------------------------
  function section(title: string, testid: string, ...kids: Node[]): HTMLElement {
    return h("section", { class: "nw-section", "data-testid": testid, "aria-label": title }, h("h3", {}, title), ...kids);
  }

  function statsTable(v: View): HTMLElement {
    const mean = v.r.get("mean"), rstd = v.r.get("rstd");
    const t = h("table", { class: "nw-table", "data-testid": "group-stats" }, h("caption", {}, "Per-group statistics"));
    t.append(h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "n"), h("th", { scope: "col" }, "g"), h("th", { scope: "col" }, "mean"), h("th", { scope: "col" }, "rstd"))));
    const tb = h("tbody");
    for (let n = 0; n < v.n; n++)
      for (let g = 0; g < v.g; g++) {
        const i = n * v.g + g;
        const tr = h("tr", {}, h("td", {}, String(n)), h("td", {}, String(g)), h("td", {}, fmt(at(mean?.data, i))), h("td", {}, fmt(at(rstd?.data, i))));
        if (n === v.sel[0] && g === v.sel[1]) tr.className = "nw-selected";
        tb.append(tr);
      }
    t.append(tb);
    return h("details", { class: "nw-details" }, h("summary", {}, `Table of mean and rstd (${v.n * v.g} groups)`), t);
  }

  function groupValues(v: View, a: NdArray | undefined, n: number, g: number): Float32Array | null {
    if (a === undefined || n >= (a.shape[0] ?? 0)) return null;
    const start = (n * v.c + g * v.cg) * v.s;
    return a.data.subarray(start, start + v.cg * v.s);
  }

  /** Counts of `vals` in `count` equal bins over [lo, hi] (the last bin closed), non-finite values left out:
   *  binned here in one pass, so Plot draws 30 rectangles instead of binning thousands of values. */
  function bins(vals: Float32Array, lo: number, hi: number, count: number): { x1: number; x2: number; y: number }[] {
    const width = hi > lo ? (hi - lo) / count : 1;
    const n = new Uint32Array(count);
    for (const v of vals) {
      if (!Number.isFinite(v)) continue;
      const k = Math.min(count - 1, Math.max(0, Math.floor((v - lo) / width)));
      n[k] = (n[k] ?? 0) + 1;
    }
    return Array.from(n, (y, k) => ({ x1: lo + k * width, x2: k === count - 1 && hi > lo ? hi : lo + (k + 1) * width, y }));
  }

  function histogram(vals: Float32Array | null, label: string, testid: string): HTMLElement {
    if (vals === null) return h("p", { class: "nw-note" }, `${label}: sample not sent (only the first samples of large tensors are).`);
    const [lo, hi] = extent(vals);
    let sum = 0;
    for (const x of vals) sum += x;
    const data = bins(vals, lo, hi, 30);
    const desc = `Histogram of ${label}: ${vals.length} values from ${fmt(lo)} to ${fmt(hi)}, average ${fmt(sum / vals.length)}, in 30 equal bins`;
    const plot = smallPlot(300, 44, desc, label, "count", [
      Plot.rectY(data, { x1: "x1", x2: "x2", y: "y", insetLeft: 0.5, insetRight: 0.5, fill: "var(--jp-brand-color1, #1976d2)" }),
    ]);
    const f = figure(desc, plot);
    f.dataset.testid = testid;
    f.dataset.counts = data.map((d) => d.y).join(" ");
    return f;
  }

  /** 256 packed RGBA colours (little-endian ABGR words) for `putImageData` through a Uint32Array, plus grey for NaN at 256. */
  function lut(interp: (t: number) => string): Uint32Array {
    const out = new Uint32Array(257);
    for (let k = 0; k < 256; k++) {
      const [r, g, b] = parseColor(interp(k / 255));
      out[k] = (255 << 24) | (b << 16) | (g << 8) | r;
    }
    out[256] = (255 << 24) | (128 << 16) | (128 << 8) | 128;
    return out;
  }
  const VIRIDIS = lut(interpolateViridis);
  const RDBU = lut((t) => interpolateRdBu(1 - t));

  /** The position index s of a sample's spatial axes as "i, j" (row-major over the spatial shape). */
  function spatialIndex(v: View, s: number): string {
    const dims = (v.r.get("x")?.shape ?? model.get("shape") ?? []).slice(2);
    const idx: number[] = [];
    for (let d = dims.length - 1; d >= 0; d--) {
      const size = dims[d] ?? 1;
      idx.unshift(s % size);
      s = Math.floor(s / size);
    }
    return idx.join(", ");
  }

  /** The worked example's element [c, s]: the `element` trait when it lies in the selected group, else the group's first. */
  function elementOf(v: View): [number, number] {
    const raw = model.get("element") ?? [];
    const c = Math.trunc(Number(raw[0])), s = Math.trunc(Number(raw[1]));
    const g = v.sel[1];
    if (Number.isFinite(c) && Number.isFinite(s) && Math.floor(c / v.cg) === g && c >= 0 && c < v.c && s >= 0 && s < v.s) return [c, s];
    return [g * v.cg, 0];
  }

  /** Draws `vals` (C x S, row-major) onto `canvas` at `px` x `rh` pixels a value: one native-size ImageData
   *  scaled by drawImage (no per-pixel loop over the scaled size), group edges and the chosen element on top. */
  function paintImage(canvas: HTMLCanvasElement, vals: ArrayLike<number>, v: View, px: number, rh: number, mark: [number, number] | null): [number, number] {
    const [lo, hi] = extent(vals);
    const ctx = canvas.getContext("2d");
    if (!ctx) return [lo, hi];
    const m = Math.max(Math.abs(lo), Math.abs(hi));
    const zeroCentred = lo < 0 && hi > 0;
    const [a, b, colors] = zeroCentred ? [-m, m, RDBU] : [lo, hi, VIRIDIS];
    const span = b > a ? 255 / (b - a) : 0;
    const img = new ImageData(v.s, v.c);
    const words = new Uint32Array(img.data.buffer);
    for (let i = 0; i < v.c * v.s; i++) {
      const x = vals[i] ?? NaN;
      const k = x === x && Number.isFinite(x) ? (span > 0 ? Math.round(Math.min(255, Math.max(0, (x - a) * span))) : 128) : 256;
      words[i] = colors[k] ?? 0;
    }
    const native = document.createElement("canvas");
    native.width = v.s;
    native.height = v.c;
    native.getContext("2d")?.putImageData(img, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(native, 0, 0, v.s * px, v.c * rh);
    if (rh >= 3) {
      ctx.fillStyle = "#000";
      for (let c = v.cg; c < v.c; c += v.cg) ctx.fillRect(0, c * rh, canvas.width, 1);
    }
    if (mark) {
      ctx.strokeStyle = "#ff2d55";
      ctx.lineWidth = 2;
      ctx.strokeRect(mark[1] * px - 1, mark[0] * rh - 1, px + 2, rh + 2);
    }
    return [lo, hi];
  }

  /** Painted upstream gradient (grad_mode "painted"): the mask being painted, C x S, sent to the kernel as binary. */
  let paint: Float32Array | null = null;
  function paintMask(v: View): Float32Array {
    if (paint === null || paint.length !== v.c * v.s) {
      paint = new Float32Array(v.c * v.s);
      const raw = model.get("dy_paint");
      const bytes = raw instanceof DataView ? new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength) : raw instanceof ArrayBuffer ? new Uint8Array(raw) : ArrayBuffer.isView(raw) ? new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength) : null;
      if (bytes && bytes.byteLength === 4 * v.c * v.s) new Uint8Array(paint.buffer).set(bytes);
    }
    return paint;
  }
  function sendPaint(): void {
    // a copy: the kernel's bytes must not change under it while the next stroke paints
    send("dy_paint", new DataView(paintMask(cubeView ?? (viewOf(model, results) as View)).slice().buffer));
  }

  const imageCache = new Map<string, { src: Float32Array; key: string; canvas: HTMLCanvasElement; range: [number, number] }>();
  function image(v: View, name: string, n: number, label: string): HTMLElement {
    const painting = name === "dy" && String(model.get("grad_mode")) === "painted";
    const a = v.r.get(name);
    if (!painting && (a === undefined || n >= (a.shape[0] ?? 0))) return h("p", { class: "nw-note" }, `${label}: sample ${n} was not sent.`);
    const vals = painting ? paintMask(v) : (a as NdArray).data.subarray(n * v.c * v.s, (n + 1) * v.c * v.s);
    const px = Math.max(1, Math.min(8, Math.floor(520 / v.s)));
    const rh = Math.max(1, Math.min(8, Math.floor(260 / v.c)));
    const el = elementOf(v);
    const mark = (): [number, number] | null => (n === v.sel[0] ? el : null);
    // an image whose values and marks did not change (x and dy on a G change) keeps its drawn canvas
    const key = `${n}|${v.c}|${v.s}|${v.cg}|${px}|${rh}|${mark()?.join(",") ?? ""}`;
    const hit = painting ? undefined : imageCache.get(name);
    const reuse = hit !== undefined && hit.src === a?.data && hit.key === key;
    const canvas = reuse ? hit.canvas : h("canvas", { class: painting ? "nw-image nw-paint" : "nw-image", role: "img", tabindex: "0", "data-testid": `image-${name}` });
    let lo: number, hi: number;
    if (reuse) {
      [lo, hi] = hit.range;
    } else {
      canvas.width = v.s * px;
      canvas.height = v.c * rh;
      canvas.dataset.px = String(px);
      canvas.dataset.rh = String(rh);
      [lo, hi] = paintImage(canvas, vals, v, px, rh, mark());
      if (a !== undefined && !painting) imageCache.set(name, { src: a.data, key, canvas, range: [lo, hi] });
    }
    const how = painting ? "Drag to paint dy = 1 (Shift: erase); the kernel recomputes when you let go. " : "Click an element to follow it in the worked example; arrow keys move it. ";
    const desc = `${label} of sample ${n}: ${v.c} channels (rows, groups of ${v.cg}) by ${v.s} positions (columns); values from ${fmt(lo)} to ${fmt(hi)}${lo < 0 && hi > 0 ? " (blue negative, red positive)" : ""}. ${how}`;
    canvas.setAttribute("aria-label", desc);
    const cellAt = (ev: MouseEvent): [number, number] | null => {
      const box = canvas.getBoundingClientRect();
      const s = Math.floor(((ev.clientX - box.left) / box.width) * v.s);
      const c = Math.floor(((ev.clientY - box.top) / box.height) * v.c);
      return c >= 0 && c < v.c && s >= 0 && s < v.s ? [c, s] : null;
    };
    const choose = (p: [number, number], focus?: string): void => {
      refocus = focus;
      model.set("selected", [n, Math.floor(p[0] / v.cg)]);
      model.set("element", [p[0], p[1]]);
      model.save_changes();
    };
    onDraw(canvas, "mousemove", (e) => {
      const ev = e as MouseEvent;
      const p = cellAt(ev);
      if (p === null) return hideTip();
      const i = p[0] * v.s + p[1];
      const lines = [`${name}[${n}, ${p[0]}, ${spatialIndex(v, p[1])}] = ${fmt(at(vals, i))}`, `channel ${p[0]}, group ${Math.floor(p[0] / v.cg)}, position ${p[1]}`];
      for (const other of ["x", "y", "dy", "dx"]) {
        if (other === name) continue;
        const o = v.r.get(other);
        if (o !== undefined && n < (o.shape[0] ?? 0)) lines.push(`${other} = ${fmt(at(o.data, (n * v.c + p[0]) * v.s + p[1]))}`);
      }
      showTip(ev, lines.join("\n"));
    });
    onDraw(canvas, "mouseleave", hideTip);
    if (painting) {
      let value = -1;
      let last: [number, number] | null = null;
      const mask = vals;
      const dab = (p: [number, number]): void => {
        // a line from the last point, so a fast stroke leaves no gaps
        const [c0, s0] = last ?? p;
        const steps = Math.max(Math.abs(p[0] - c0), Math.abs(p[1] - s0), 1);
        for (let k = 0; k <= steps; k++) {
          const c = Math.round(c0 + ((p[0] - c0) * k) / steps), s = Math.round(s0 + ((p[1] - s0) * k) / steps);
          mask[c * v.s + s] = value;
        }
        last = p;
        paintImage(canvas, mask, v, px, rh, mark());
      };
      onDraw(canvas, "pointerdown", (e) => {
        const ev = e as PointerEvent;
        const p = cellAt(ev);
        if (p === null) return;
        ev.preventDefault();
        value = ev.shiftKey || ev.button === 2 ? 0 : 1;
        last = null;
        canvas.setPointerCapture?.(ev.pointerId);
        dab(p);
      });
      onDraw(canvas, "pointermove", (e) => {
        if (value < 0) return;
        const p = cellAt(e as MouseEvent);
        if (p) dab(p);
      });
      const end = (): void => {
        if (value < 0) return;
        value = -1;
        last = null;
        sendPaint();
      };
      onDraw(canvas, "pointerup", end);
      onDraw(canvas, "pointercancel", end);
      onDraw(canvas, "keydown", (e) => {
        const k = (e as KeyboardEvent).key;
        if (k !== " " && k !== "Enter") return;
        e.preventDefault();
        const i = el[0] * v.s + el[1];
        mask[i] = mask[i] ? 0 : 1;
        sendPaint();
        paintImage(canvas, mask, v, px, rh, mark());
      });
    } else {
      onDraw(canvas, "click", (e) => {
        const p = cellAt(e as MouseEvent);
        if (p) choose(p);
      });
    }
    arrowKeys(canvas, el, v.c, v.s, choose);
    const f = figure(desc, canvas);
    if (painting) {
      const mask = vals;
      const clear = h("button", { type: "button", "data-testid": "paint-clear" }, "Clear dy");
      onDraw(clear, "click", () => {
        mask.fill(0);
        sendPaint();
        paintImage(canvas, mask, v, px, rh, mark());
      });
      f.append(h("div", { class: "nw-buttons" }, clear));
    }
    return f;
  }

  function bars(v: View, name: string, label: string): HTMLElement {
    const a = v.r.get(name);
    if (a === undefined) return h("p", {}, `${name}: not in the results`);
    const data = Array.from(a.data, (y, c) => ({ c, y, odd: Math.floor(c / v.cg) % 2 === 1 }));
    const [lo, hi] = extent(a.data);
    const desc = `${label} per channel, ${v.c} bars (alternate shades mark the ${v.g} groups), from ${fmt(lo)} to ${fmt(hi)}`;
    const plot = smallPlot(320, 52, desc, "channel", label, [
      Plot.rectY(data, { x1: "c", x2: (d: { c: number }) => d.c + 1, y: "y", fill: (d: { odd: boolean }) => (d.odd ? "var(--jp-brand-color2, #64b5f6)" : "var(--jp-brand-color1, #1976d2)"), inset: 0.2 }),
    ]);
    const f = figure(desc, plot);
    f.dataset.testid = `bars-${name}`;
    return f;
  }

  /** The backward's invariants per group, where the closed form gives dx = rstd * (g - mean(g) - xhat * mean(g*xhat)), g = dL/dxhat:
   *  sum(dx) = 0 exactly, and sum(dx * xhat) = eps * rstd^2 * rstd * sum(g * xhat) (zero only at eps = 0).
   *  Each is measured against rstd * ||g|| * sqrt(M), the size of the terms summed (w = 1, b = 0 unless results carry weight/bias). */
  function invariants(v: View): HTMLElement {
    const dxSum = v.r.get("dx_sum"), dxDot = v.r.get("dx_dot_xhat"), rstd = v.r.get("rstd"), mean = v.r.get("mean");
    const x = v.r.get("x"), dy = v.r.get("dy");
    const dt = String(param("dtype"));
    const tol = INVARIANT_TOL[dt] ?? 1e-5;
    const eps = Number(param("eps"));
    const m = v.cg * v.s;
    const upstream = upstreamOf(v);
    let worstSum = 0, worstDot = 0, checked = 0;
    let whereSum = "", whereDot = "";
    const nCheck = Math.min(v.n, v.sent);
    for (let n = 0; n < nCheck; n++)
      for (let g = 0; g < v.g; g++) {
        const i = n * v.g + g;
        const xs = groupValues(v, x, n, g), dys = groupValues(v, dy, n, g);
        if (xs === null || dys === null) continue;
        const mu = at(mean?.data, i), rs = at(rstd?.data, i);
        let gg = 0, gx = 0;
        for (let k = 0; k < xs.length; k++) {
          const xh = (at(xs, k) - mu) * rs;
          const gk = upstream(g, k, xh, at(dys, k));
          gg += gk * gk;
          gx += gk * xh;
        }
        const sc = rs * Math.sqrt(gg) * Math.sqrt(m);
        if (!(sc > 0)) continue;
        checked++;
        const es = Math.abs(at(dxSum?.data, i)) / sc;
        const ed = Math.abs(at(dxDot?.data, i) - eps * rs * rs * rs * gx) / sc;
        if (!(es <= worstSum)) {
          worstSum = es;
          whereSum = `(n ${n}, g ${g})`;
        }
        if (!(ed <= worstDot)) {
          worstDot = ed;
          whereDot = `(n ${n}, g ${g})`;
        }
      }
    const row = (testid: string, what: string, worst: number, where: string): HTMLElement => {
      const ok = checked > 0 && worst <= tol;
      return h(
        "tr",
        { "data-testid": testid, "data-pass": String(ok) },
        h("td", { class: ok ? "nw-pass" : "nw-fail", "aria-label": ok ? "pass" : "fail" }, ok ? "✓ pass" : "✗ fail"),
        h("td", { class: "nw-left" }, what),
        h("td", { class: "nw-mono", "data-testid": `${testid}-worst` }, checked > 0 ? fmtE(worst) : "-"),
        h("td", { class: "nw-mono nw-left" }, where),
        h("td", { class: "nw-mono" }, `≤ ${fmtE(tol)}`),
      );
    };
    const t = h(
      "table",
      { class: "nw-table", "data-testid": "invariants" },
      h("caption", {}, `Backward invariants over ${checked} groups of the ${nCheck} samples sent (${dt}; tolerance relative to rstd·‖g‖·√M, M = ${m})`),
      h("thead", {}, h("tr", {}, ...["", "invariant", "worst", "where", "tolerance"].map((s) => h("th", { scope: "col" }, s)))),
      h(
        "tbody",
        {},
        row("inv-dx-sum", "Σ dx = 0 in every group", worstSum, whereSum),
        row("inv-dx-dot-xhat", "Σ dx·x̂ = eps·rstd³·Σ g·x̂ (dx ⟂ x̂ when eps = 0)", worstDot, whereDot),
      ),
    );
    return h(
      "div",
      {},
      t,
      h("p", { class: "nw-note" }, "g = dL/dx̂ = dy·w (times SiLU′(x̂·w + b) when SiLU is on), with the weight w and bias b the kernel used. dx ⟂ x̂ holds only as eps → 0: with dy = y (the loss mode) nearly all of dx is this eps term."),
    );
  }

  /** g = dL/dx̂ of element k of group g's values (dy·w, times SiLU′(x̂·w + b) when SiLU is on), with the kernel's w and b. */
  function upstreamOf(v: View): (g: number, k: number, xh: number, dyk: number) => number {
    const weight = v.r.get("weight")?.data, bias = v.r.get("bias")?.data;
    const silu = Boolean(param("silu"));
    return (g, k, xh, dyk) => {
      const ch = g * v.cg + Math.floor(k / v.s);
      const w = weight ? at(weight, ch) : 1, b = bias ? at(bias, ch) : 0;
      let gk = dyk * w;
      if (silu) {
        const z = xh * w + b;
        const sg = 1 / (1 + Math.exp(-z));
        gk *= sg * (1 + z * (1 - sg));
      }
      return gk;
    };
  }

  function workedExample(v: View): HTMLElement {
    const [n, g] = v.sel;
    const i = n * v.g + g;
    const mean = at(v.r.get("mean")?.data, i), rstd = at(v.r.get("rstd")?.data, i);
    const eps = Number(param("eps"));
    const variance = 1 / (rstd * rstd) - eps;
    const c0 = g * v.cg;
    const box = h("div", { class: "nw-worked", "data-testid": "worked-example" });
    const line = (testid: string, lhs: string, rhs: string, value: number): HTMLElement =>
      h("div", { class: "nw-step" }, h("span", { class: "nw-lhs" }, lhs), h("span", { class: "nw-rhs" }, rhs), h("span", { class: "nw-mono nw-val", "data-testid": testid }, fmt(value)));
    box.append(
      h("p", {}, `Group (n = ${n}, g = ${g}): channels ${c0}…${c0 + v.cg - 1} of sample ${n}, M = ${v.cg} × ${v.s} = ${v.cg * v.s} elements.`),
      line("we-mean", "mean μ", "= Σx / M", mean),
      line("we-rstd", "rstd", "= 1 / √(var + eps)", rstd),
      line("we-var", "var", `= 1/rstd² − eps (eps = ${eps})`, variance),
    );
    const xs = groupValues(v, v.r.get("x"), n, g), ys = groupValues(v, v.r.get("y"), n, g);
    const dys = groupValues(v, v.r.get("dy"), n, g), dxs = groupValues(v, v.r.get("dx"), n, g);
    if (xs === null) {
      box.append(h("p", { class: "nw-note" }, `Sample ${n}'s elements were not sent; select a group of the first ${v.sent} samples.`));
      return box;
    }
    const [ec, es] = elementOf(v);
    const k = (ec - c0) * v.s + es;
    const w = at(v.r.get("weight")?.data, ec), b = at(v.r.get("bias")?.data, ec);
    const ww = Number.isFinite(w) ? w : 1, bb = Number.isFinite(b) ? b : 0;
    const xk = at(xs, k);
    const xhat = (xk - mean) * rstd;
    const z = xhat * ww + bb;
    const silu = Boolean(param("silu"));
    const yExp = silu ? z / (1 + Math.exp(-z)) : z;
    const yGot = at(ys ?? undefined, k);
    box.append(
      h("p", { "data-testid": "we-element" }, `One element: x[${n}, ${ec}, ${spatialIndex(v, es)}] (channel ${ec}, position ${es}; click an image to choose another).`),
      line("we-x", "x", "", xk),
      line("we-xhat", "x̂", "= (x − μ) · rstd", xhat),
      line("we-y-expected", "y", silu ? `= SiLU(x̂·w + b), w = ${fmt(ww)}, b = ${fmt(bb)}` : `= x̂·w + b, w = ${fmt(ww)}, b = ${fmt(bb)}`, yExp),
      line("we-y", "y from the kernel", "", yGot),
      line("we-y-diff", "difference", "", yGot - yExp),
    );
    if (dys !== null && dxs !== null) {
      // the closed-form backward for this element, from the group's dy and x (float64 in JS)
      const upstream = upstreamOf(v);
      let sumG = 0, sumGX = 0;
      for (let j = 0; j < xs.length; j++) {
        const xh = (at(xs, j) - mean) * rstd;
        const gj = upstream(g, j, xh, at(dys, j));
        sumG += gj;
        sumGX += gj * xh;
      }
      const m = xs.length;
      const gk = upstream(g, k, xhat, at(dys, k));
      const dxExp = rstd * (gk - sumG / m - (xhat * sumGX) / m);
      const dxGot = at(dxs, k);
      box.append(
        line("we-dy", "dy", "", at(dys, k)),
        line("we-g", "g = dL/dx̂", silu ? "= dy · w · SiLU′(x̂·w + b)" : "= dy · w", gk),
        line("we-mean-g", "mean(g)", "over the group", sumG / m),
        line("we-mean-gx", "mean(g·x̂)", "over the group", sumGX / m),
        line("we-dx-expected", "dx", "= rstd · (g − mean(g) − x̂ · mean(g·x̂))", dxExp),
        line("we-dx", "dx from the kernel", "", dxGot),
        line("we-dx-diff", "difference", "", dxGot - dxExp),
      );
    }
    return box;
  }

  let cubeBox: HTMLElement | null = null;
  let cubeView: View | null = null;
  function drawCubes(): void {
    const v = cubeView;
    if (!cubeBox || !v) return;
    const spec: CubeSpec = { n: v.n, c: v.c, groups: v.g, spatial: v.s, sel: hover ?? v.sel };
    cubeBox.replaceChildren(
      ...KINDS.map(({ kind, title }) =>
        h("figure", { class: "nw-cube", "data-testid": `cube-${kind}`, "data-kind": kind }, cube(kind, spec), h("figcaption", {}, h("strong", {}, title(spec)), h("span", { class: "nw-sr-only" }, describe(kind, spec)))),
      ),
    );
  }
  /** Hover over the cubes: one delegated listener per drawn body (the cubes themselves redraw on every hover). */
  function cubeHover(box: HTMLElement): void {
    onDraw(box, "mousemove", (e) => {
      const t = (e.target as Element | null)?.closest("[data-n]");
      const kind = t?.closest("[data-kind]")?.getAttribute("data-kind");
      const v = cubeView;
      const k = KINDS.find((x) => x.kind === kind);
      if (!t || !k || !v) return hideTip();
      const spec: CubeSpec = { n: v.n, c: v.c, groups: v.g, spatial: v.s, sel: hover ?? v.sel };
      const num = (a: string): number => Number(t.getAttribute(a));
      showTip(e as MouseEvent, cellInfo(k.kind, spec, num("data-n"), num("data-c0"), num("data-c1")));
    });
    onDraw(box, "mouseleave", hideTip);
  }

  function bnVsGn(v: View): HTMLElement {
    const bn = v.r.get("bn_mean"), mean = v.r.get("mean");
    const cs = Math.min(v.c, 4), ns = Math.min(v.n, 3);
    const t = h("table", { class: "nw-table", "data-testid": "bn-gn" }, h("caption", {}, `BatchNorm's mean moves with N = ${v.n}; GroupNorm's per-sample mean does not`));
    const head = h("tr", {}, h("th", { scope: "col" }, "channel"), h("th", { scope: "col" }, "BN mean"));
    for (let n = 0; n < ns; n++) head.append(h("th", { scope: "col" }, `GN mean, n = ${n}`));
    const tb = h("tbody");
    for (let c = 0; c < cs; c++) {
      const tr = h("tr", {}, h("td", {}, String(c)), h("td", { class: "nw-mono" }, fmt(at(bn?.data, c))));
      for (let n = 0; n < ns; n++) tr.append(h("td", { class: "nw-mono" }, fmt(at(mean?.data, n * v.g + Math.floor(c / v.cg)))));
      tb.append(tr);
    }
    t.append(h("thead", {}, head), tb);
    return t;
  }

  function normButtons(v: View): HTMLElement {
    const b1 = h("button", { type: "button", "data-testid": "g-layer" }, "G = 1 (LayerNorm)");
    const bc = h("button", { type: "button", "data-testid": "g-instance" }, "G = C (InstanceNorm)");
    onDraw(b1, "click", () => send("num_groups", 1));
    onDraw(bc, "click", () => send("num_groups", v.c));
    return h("div", { class: "nw-buttons" }, b1, bc);
  }

  // ---- redraw ---------------------------------------------------------------------------------------------
  /** The arrays of an unchanged input_data buffer keep their identity across decodes (so their views can be kept). */
  let lastInput: { buffer: unknown; arrays: Map<string, { offset: number; arr: NdArray }> } = { buffer: null, arrays: new Map() };
  function decode(): void {
    meta = parseMeta(model.get("results_meta"));
    const input = model.get("input_data");
    results = decodeResults({ results: model.get("results"), input_data: input }, meta);
    const kept = new Map<string, { offset: number; arr: NdArray }>();
    for (const [name, info] of Object.entries(meta?.arrays ?? {})) {
      const arr = results.get(name);
      if (info.trait !== "input_data" || arr === undefined) continue;
      const prev = lastInput.buffer === input ? lastInput.arrays.get(name) : undefined;
      if (prev && prev.offset === info.offset && prev.arr.shape.join() === arr.shape.join()) results.set(name, prev.arr);
      kept.set(name, { offset: info.offset, arr: results.get(name) ?? arr });
    }
    lastInput = { buffer: input, arrays: kept };
  }

  /** Redraws every view from the decoded results. With `progressive` (new results arriving on a drawn view) the
   *  statistics section, which every control changes, is replaced at once and the other sections after the next frame
   *  is painted, so the table and heatmaps show the new numbers a frame sooner. `data-drawn` on the body says which results
   *  version every view shows. */
  // the other views: after the frame that paints the statistics (a rAF callback runs before that frame's paint,
  // so the work goes to a task queued from it); a newer redraw cancels a pending one
  let restFrame = 0;
  let restTask: ReturnType<typeof setTimeout> | undefined;
  const cancelRest = (): void => {
    cancelAnimationFrame(restFrame);
    clearTimeout(restTask);
  };
  function redraw(progressive = false): void {
    drawn.abort();
    drawn = new AbortController();
    cancelRest();
    drawStatus();
    hideTip();
    const v = viewOf(model, results);
    if (v === null) {
      cubeView = null;
      body.replaceChildren(h("p", { class: "nw-note", "data-testid": "empty" }, "No results yet."));
      body.dataset.drawn = String(meta?.version ?? "");
      return;
    }
    const [sn, sg] = v.sel;
    const sampleN = Math.min(Math.max(0, Number(model.get("sample")) || 0), v.n - 1);
    cubeView = v;
    cubeBox = h("div", { class: "nw-cubes" });
    cubeHover(cubeBox);
    const box = cubeBox;
    const place = (node: HTMLElement): void => {
      const old = body.querySelector(`:scope > [data-testid="${node.dataset.testid ?? ""}"]`);
      if (old) old.replaceWith(node);
      else body.append(node);
    };
    if (!body.querySelector(':scope > [data-testid="stats"]')) {
      body.replaceChildren();
      progressive = false;
    }
    place(section("Per-group statistics", "stats", h("div", { class: "nw-row" }, heatmap(v, "mean", "mean"), heatmap(v, "rstd", "rstd")), statsTable(v)));
    const rest = (): void => {
      place(section("Who shares statistics (Wu & He, Figure 2)", "cube", box, normButtons(v), h("div", { class: "nw-row" }, field("Batch size N", batch), bnVsGn(v))));
      place(
        section(
          `Selected group (n = ${sn}, g = ${sg})`,
          "selected",
          h("div", { class: "nw-row" }, histogram(groupValues(v, v.r.get("x"), sn, sg), "x", "hist-x"), histogram(groupValues(v, v.r.get("y"), sn, sg), "y", "hist-y")),
          workedExample(v),
        ),
      );
      place(
        section(
          `Sample n = ${sampleN}: input, output and gradients`,
          "images",
          h("div", { class: "nw-grid2" }, image(v, "x", sampleN, "Input x"), image(v, "y", sampleN, "Output y"), image(v, "dy", sampleN, "Upstream gradient dy"), image(v, "dx", sampleN, "Gradient dx")),
        ),
      );
      place(section("Gradients", "gradients", h("div", { class: "nw-row" }, bars(v, "dweight", "dweight"), bars(v, "dbias", "dbias"), heatmap(v, "dx_norm", "‖dx‖ per group")), invariants(v)));
      drawCubes();
      if (refocus) {
        const t = body.querySelector<HTMLElement>(`[data-testid="${refocus}"]`);
        t?.focus();
        refocus = undefined;
      }
      body.dataset.drawn = String(meta?.version ?? "");
    };
    if (progressive) restFrame = requestAnimationFrame(() => (restTask = setTimeout(() => signal.aborted || rest(), 0)));
    else rest();
  }

  // one redraw per burst of change events (a kernel message sets results, results_meta, shape and status together)
  let pending = false;
  let stale = false;
  const schedule = (decodeToo: boolean): void => {
    stale ||= decodeToo;
    if (pending) return;
    pending = true;
    queueMicrotask(() => {
      pending = false;
      if (signal.aborted) return;
      const fresh = stale;
      if (stale) decode();
      stale = false;
      redraw(fresh);
    });
  };
  const onResults = (): void => schedule(true);
  const onControls = (): void => {
    syncControls();
  };
  const onStatus = (): void => drawStatus();
  const onView = (): void => schedule(false);
  const controlTraits = ["shape", "num_groups", "eps", "offset", "scale", "channel_spread", "outlier_channel", "seed", "dtype", "memory_layout", "silu", "grad_mode", "batch", "sample"];
  const handlers: [string, () => void][] = [
    ["change:results", onResults],
    ["change:input_data", onResults],
    ["change:results_meta", onResults],
    ["change:status", () => (String(model.get("status")) === "computing" ? onStatus() : onView())],
    ["change:device", onStatus],
    ["change:selected", onView],
    ["change:sample", onView],
    ["change:element", onView],
    ["change:grad_mode", () => ((paint = null), onView())],
    ...controlTraits.map((t): [string, () => void] => [`change:${t}`, onControls]),
  ];
  for (const [ev, f] of handlers) model.on(ev, f);

  syncControls();
  decode();
  redraw();

  return () => {
    for (const [ev, f] of handlers) model.off(ev, f);
    cancelRest();
    drawn.abort();
    ac.abort();
  };
}

export default { render };
