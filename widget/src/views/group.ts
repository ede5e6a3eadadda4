// The selected group worked through: its statistics, one element from x to y, and the backward from dy to dx, each
// computed here (float64) from the group's values beside the kernel's number; and the group's histograms.
import { extent } from "../color";
import { at, fmt, fold, h, section, whenOpen } from "../dom";
import { dxZero, upstream } from "../numerics";
import { groupValues, type Store } from "../store";
import { barChart, hover } from "./plots";

type Line = [testid: string, lhs: string, rhs: string, value: number | string];

function lines(rows: Line[]): HTMLElement[] {
  return rows.map(([testid, lhs, rhs, value]) =>
    h("div", { class: "nw-step" }, h("span", { class: "nw-lhs" }, lhs), h("span", { class: "nw-rhs" }, rhs), h("span", { class: "nw-mono nw-val", "data-testid": testid }, typeof value === "string" ? value : fmt(value))),
  );
}

/** The position index s of a sample's spatial axes as "i, j" (row-major over the spatial shape). */
export function spatialIndex(dims: number[], s: number): string {
  const idx: number[] = [];
  for (let d = dims.length - 1; d >= 0; d--) {
    const size = dims[d] ?? 1;
    idx.unshift(s % size);
    s = Math.floor(s / size);
  }
  return idx.join(", ");
}

function forward(store: Store, xs: Float32Array, ys: Float32Array | null): { rows: Line[]; xhat: number; k: number } {
  const geo = store.geo!;
  const [n, g] = store.sel();
  const i = n * geo.g + g;
  const mean = at(store.results.get("mean")?.data, i), rstd = at(store.results.get("rstd")?.data, i);
  const [ec, es] = store.element();
  const k = (ec - g * geo.cg) * geo.s + es;
  const w = at(store.results.get("weight")?.data, ec), b = at(store.results.get("bias")?.data, ec);
  const ww = Number.isFinite(w) ? w : 1, bb = Number.isFinite(b) ? b : 0;
  const xk = at(xs, k);
  const xhat = (xk - mean) * rstd;
  const z = xhat * ww + bb;
  const silu = Boolean(store.param("silu"));
  const yExp = silu ? z / (1 + Math.exp(-z)) : z;
  const yGot = at(ys, k);
  const rows: Line[] = [
    ["we-x", `x[${n}, ${ec}, ${spatialIndex(geo.spatial, es)}]`, "", xk],
    ["we-xhat", "x̂", "= (x − μ) · rstd", xhat],
    ["we-y-expected", "y", silu ? `= SiLU(x̂·w + b), w = ${fmt(ww)}, b = ${fmt(bb)}` : `= x̂·w + b, w = ${fmt(ww)}, b = ${fmt(bb)}`, yExp],
    ["we-y", "y from the kernel", "", yGot],
    ["we-y-diff", "difference", "", yGot - yExp],
  ];
  return { rows, xhat, k };
}

function backward(store: Store, xs: Float32Array, dys: Float32Array, dxs: Float32Array, k: number, xhat: number): Line[] {
  const geo = store.geo!;
  const [n, g] = store.sel();
  const i = n * geo.g + g;
  const mean = at(store.results.get("mean")?.data, i), rstd = at(store.results.get("rstd")?.data, i);
  const up = upstream(store);
  const chOf = (j: number): number => g * geo.cg + Math.floor(j / geo.s);
  let sumG = 0, sumGX = 0;
  for (let j = 0; j < xs.length; j++) {
    const xh = (at(xs, j) - mean) * rstd;
    const gj = up(chOf(j), xh, at(dys, j));
    sumG += gj;
    sumGX += gj * xh;
  }
  const m = xs.length;
  const gk = up(chOf(k), xhat, at(dys, k));
  const dxExp = rstd * (gk - sumG / m - (xhat * sumGX) / m);
  const dxGot = at(dxs, k);
  const zero = dxZero(store).zero[i] === 1;
  const silu = Boolean(store.param("silu"));
  return [
    ["we-dy", "dy", "", at(dys, k)],
    ["we-g", "g = dL/dx̂", silu ? "= dy · w · SiLU′(x̂·w + b)" : "= dy · w", gk],
    ["we-mean-g", "mean(g)", "over the group", sumG / m],
    ["we-mean-gx", "mean(g·x̂)", "over the group", sumGX / m],
    ["we-dx-expected", "dx", "= rstd · (g − mean(g) − x̂ · mean(g·x̂))", zero ? "0" : dxExp],
    ["we-dx", "dx from the kernel", zero ? `${fmt(dxGot)}: float32 rounding` : "", zero ? "0" : dxGot],
    ["we-dx-diff", "difference", "", dxGot - dxExp],
  ];
}

function histogram(store: Store, vals: Float32Array | null, label: string, testid: string): HTMLElement {
  if (vals === null) return h("p", { class: "nw-note" }, `${label}: sample not sent (only the first samples of large tensors are).`);
  const [lo, hi] = extent(vals);
  const count = 30;
  const width = hi > lo ? (hi - lo) / count : 1;
  const n = new Uint32Array(count);
  for (const v of vals) if (Number.isFinite(v)) n[Math.min(count - 1, Math.max(0, Math.floor((v - lo) / width)))]! += 1;
  const data = Array.from(n, (y, k) => ({ x1: lo + k * width, x2: k === count - 1 && hi > lo ? hi : lo + (k + 1) * width, y }));
  let sum = 0;
  for (const x of vals) sum += x;
  const desc = `Histogram of ${label}: ${vals.length} values from ${fmt(lo)} to ${fmt(hi)}, average ${fmt(sum / vals.length)}, in ${count} equal bins`;
  const plot = barChart(260, 40, desc, label, "count", data.map((d) => ({ ...d, fill: "var(--jp-brand-color1, #1976d2)" })));
  hover(store, plot, (x) => {
    const k = Math.floor((x - lo) / width);
    const d = data[Math.min(count - 1, k)];
    return d === undefined || k < 0 || x > hi + width ? null : `${label} in [${fmt(d.x1)}, ${fmt(d.x2)}): ${d.y} values`;
  });
  const f = h("figure", { class: "nw-figure", "data-testid": testid, "data-counts": data.map((d) => d.y).join(" ") }, plot.el, h("figcaption", {}, desc));
  return f;
}

export function groupView(store: Store): HTMLElement {
  const head = h("p", { class: "nw-note" });
  const fwd = h("div", { class: "nw-worked" }), bwd = h("div", { class: "nw-worked" });
  const stats = h("div", { class: "nw-worked" });
  const bwdFold = fold("Backward, the same element: from dy to dx", "backward-fold", bwd);
  const box = h("div", { class: "nw-worked-box", "data-testid": "worked-example" }, head, stats, fwd, bwdFold.el);
  const hists = h("div", { class: "nw-row" });
  const histFold = fold("Histograms of the group's x and y", "hist-fold", hists);
  const { el, title } = section("Selected group", "selected", box, histFold.el);
  const drawHists = whenOpen(histFold.el, store.signal, () => {
    const geo = store.geo;
    if (geo === null) return;
    const [n, g] = store.sel();
    hists.replaceChildren(histogram(store, groupValues(geo, store.results.get("x"), n, g), "x", "hist-x"), histogram(store, groupValues(geo, store.results.get("y"), n, g), "y", "hist-y"));
  });

  function draw(): void {
    const geo = store.geo;
    if (geo === null) return;
    const [n, g] = store.sel();
    const i = n * geo.g + g;
    const c0 = g * geo.cg;
    title.textContent = `Selected group (n = ${n}, g = ${g})`;
    const mean = at(store.results.get("mean")?.data, i), rstd = at(store.results.get("rstd")?.data, i);
    const eps = Number(store.param("eps"));
    head.textContent = `Channels ${c0}…${c0 + geo.cg - 1} of sample ${n}: M = ${geo.cg} × ${geo.s} = ${geo.cg * geo.s} values share one mean and rstd.`;
    stats.replaceChildren(...lines([["we-mean", "mean μ", "= Σx / M", mean], ["we-rstd", "rstd", "= 1 / √(var + eps)", rstd], ["we-var", "var", `= 1/rstd² − eps (eps = ${eps})`, 1 / (rstd * rstd) - eps]]));
    const r = store.results;
    const xs = groupValues(geo, r.get("x"), n, g), ys = groupValues(geo, r.get("y"), n, g);
    const dys = groupValues(geo, r.get("dy"), n, g), dxs = groupValues(geo, r.get("dx"), n, g);
    drawHists();
    if (xs === null) {
      fwd.replaceChildren(h("p", { class: "nw-note", "data-testid": "we-element" }, `Sample ${n}'s values were not sent; select a group of the first ${geo.sent} samples.`));
      return bwd.replaceChildren();
    }
    const f = forward(store, xs, ys);
    const [ec, es] = store.element();
    fwd.replaceChildren(h("p", { "data-testid": "we-element" }, `One element, x[${n}, ${ec}, ${spatialIndex(geo.spatial, es)}] (click an image to follow another):`), ...lines(f.rows));
    if (dys === null || dxs === null) return bwd.replaceChildren();
    bwd.replaceChildren(...lines(backward(store, xs, dys, dxs, f.k, f.xhat)));
  }
  store.on(["results", "selection"], draw, el);
  return el;
}
