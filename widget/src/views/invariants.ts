// The backward's invariants per group, where dx = rstd·(g − mean(g) − x̂·mean(g·x̂)), g = dL/dx̂:
// Σdx = 0 exactly, and Σdx·x̂ = eps·rstd³·Σg·x̂ (zero only at eps = 0), each against rstd·‖g‖·√M.
import { at, fmtE, fold, h, whenOpen } from "../dom";
import { upstream } from "../numerics";
import { groupValues, type Store } from "../store";

/** Tolerances of the backward's invariants, relative to the scale of the summed terms. */
export const INVARIANT_TOL: Record<string, number> = { float32: 1e-5, float16: 2e-3, bfloat16: 1.6e-2 };

interface Worst {
  sum: number;
  dot: number;
  whereSum: string;
  whereDot: string;
  checked: number;
}

function worst(store: Store): Worst {
  const geo = store.geo!;
  const r = store.results;
  const dxSum = r.get("dx_sum")?.data, dxDot = r.get("dx_dot_xhat")?.data, rstd = r.get("rstd")?.data, mean = r.get("mean")?.data;
  const eps = Number(store.param("eps"));
  const up = upstream(store);
  const w: Worst = { sum: 0, dot: 0, whereSum: "", whereDot: "", checked: 0 };
  for (let n = 0; n < Math.min(geo.n, geo.sent); n++)
    for (let g = 0; g < geo.g; g++) {
      const i = n * geo.g + g;
      const xs = groupValues(geo, r.get("x"), n, g), dys = groupValues(geo, r.get("dy"), n, g);
      if (xs === null || dys === null) continue;
      const mu = at(mean, i), rs = at(rstd, i);
      let gg = 0, gx = 0;
      for (let k = 0; k < xs.length; k++) {
        const xh = (at(xs, k) - mu) * rs;
        const gk = up(g * geo.cg + Math.floor(k / geo.s), xh, at(dys, k));
        gg += gk * gk;
        gx += gk * xh;
      }
      const sc = rs * Math.sqrt(gg) * Math.sqrt(xs.length);
      if (!(sc > 0)) continue;
      w.checked++;
      const es = Math.abs(at(dxSum, i)) / sc, ed = Math.abs(at(dxDot, i) - eps * rs * rs * rs * gx) / sc;
      if (!(es <= w.sum)) [w.sum, w.whereSum] = [es, `(n ${n}, g ${g})`];
      if (!(ed <= w.dot)) [w.dot, w.whereDot] = [ed, `(n ${n}, g ${g})`];
    }
  return w;
}

export function invariantsView(store: Store): HTMLElement {
  const caption = h("caption");
  const tbody = h("tbody");
  const table = h("table", { class: "nw-table", "data-testid": "invariants" }, caption, h("thead", {}, h("tr", {}, ...["", "invariant", "worst", "where", "tolerance"].map((s) => h("th", { scope: "col" }, s)))), tbody);
  const note = "g = dL/dx̂ = dy·w (times SiLU′(x̂·w + b) when SiLU is on), with the weight w and bias b the kernel used. dx ⟂ x̂ holds only as eps → 0: with dy = y (the loss mode) nearly all of dx is this eps term.";
  const { el } = fold("The backward's invariants, checked in every group", "invariants-fold", table, h("p", { class: "nw-note" }, note));
  function draw(): void {
    const geo = store.geo;
    if (geo === null) return;
    const dt = String(store.param("dtype"));
    const tol = INVARIANT_TOL[dt] ?? 1e-5;
    const w = worst(store);
    const row = (testid: string, what: string, value: number, where: string): HTMLElement => {
      const ok = w.checked > 0 && value <= tol;
      return h(
        "tr",
        { "data-testid": testid, "data-pass": String(ok) },
        h("td", { class: ok ? "nw-pass" : "nw-fail", "aria-label": ok ? "pass" : "fail" }, ok ? "✓ pass" : "✗ fail"),
        h("td", { class: "nw-left" }, what),
        h("td", { class: "nw-mono", "data-testid": `${testid}-worst` }, w.checked > 0 ? fmtE(value) : "-"),
        h("td", { class: "nw-mono nw-left" }, where),
        h("td", { class: "nw-mono" }, `≤ ${fmtE(tol)}`),
      );
    };
    caption.textContent = `Over ${w.checked} groups of the ${Math.min(geo.n, geo.sent)} samples sent (${dt}; tolerance relative to rstd·‖g‖·√M, M = ${geo.cg * geo.s})`;
    tbody.replaceChildren(row("inv-dx-sum", "Σ dx = 0 in every group", w.sum, w.whereSum), row("inv-dx-dot-xhat", "Σ dx·x̂ = eps·rstd³·Σ g·x̂ (dx ⟂ x̂ when eps = 0)", w.dot, w.whereDot));
  }
  store.on(["results"], whenOpen(el, store.signal, draw), el);
  return el;
}
