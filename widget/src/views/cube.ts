// Who shares statistics: GroupNorm beside LayerNorm, InstanceNorm and BatchNorm on the same tensor, the selected
// (or hovered) group highlighted; and BatchNorm's per-channel mean, which moves with the batch, beside GroupNorm's.
import { KINDS, cellInfo, cube, describe, type CubeSpec } from "../cube";
import { at, fmt, fold, h, section } from "../dom";
import type { Store } from "../store";

function bnVsGn(store: Store, tbody: HTMLElement, head: HTMLElement, caption: HTMLElement): void {
  const geo = store.geo;
  if (geo === null) return;
  const bn = store.results.get("bn_mean")?.data, mean = store.results.get("mean")?.data;
  const cs = Math.min(geo.c, 4), ns = Math.min(geo.n, 3);
  caption.textContent = `BatchNorm's mean moves with N = ${geo.n}; GroupNorm's per-sample mean does not`;
  head.replaceChildren(h("th", { scope: "col" }, "channel"), h("th", { scope: "col" }, "BN mean"));
  for (let n = 0; n < ns; n++) head.append(h("th", { scope: "col" }, `GN mean, n = ${n}`));
  const rows: HTMLElement[] = [];
  for (let c = 0; c < cs; c++) {
    const tr = h("tr", {}, h("td", {}, String(c)), h("td", { class: "nw-mono" }, fmt(at(bn, c))));
    for (let n = 0; n < ns; n++) tr.append(h("td", { class: "nw-mono" }, fmt(at(mean, n * geo.g + Math.floor(c / geo.cg)))));
    rows.push(tr);
  }
  tbody.replaceChildren(...rows);
}

export function cubeView(store: Store): HTMLElement {
  const box = h("div", { class: "nw-cubes" });
  const b1 = h("button", { type: "button", "data-testid": "g-layer" }, "G = 1 (LayerNorm)");
  const bc = h("button", { type: "button", "data-testid": "g-instance" }, "G = C (InstanceNorm)");
  const signal = store.signal;
  b1.addEventListener("click", () => store.send({ num_groups: 1 }), { signal });
  bc.addEventListener("click", () => store.send({ num_groups: store.geo?.c ?? 1 }), { signal });
  const tbody = h("tbody"), head = h("tr"), caption = h("caption");
  const table = h("table", { class: "nw-table", "data-testid": "bn-gn" }, caption, h("thead", {}, head), tbody);
  const bnFold = fold("BatchNorm against GroupNorm", "bn-fold", table, h("p", { class: "nw-note" }, "Change Batch size N (in the controls, under Batch and storage): BatchNorm's statistics of a channel are taken over the whole batch, so they move; GroupNorm's are taken per sample, so sample 0's stay."));
  const { el } = section("Who shares statistics (Wu & He, Figure 2)", "cube", box, h("div", { class: "nw-buttons" }, b1, bc), bnFold.el);

  const spec = (): CubeSpec | null => {
    const geo = store.geo;
    return geo ? { n: geo.n, c: geo.c, groups: geo.g, spatial: geo.s, sel: store.hover ?? store.sel() } : null;
  };
  box.addEventListener(
    "mousemove",
    (e) => {
      const t = (e.target as Element | null)?.closest("[data-n]");
      const kind = t?.closest("[data-kind]")?.getAttribute("data-kind");
      const k = KINDS.find((x) => x.kind === kind);
      const s = spec();
      if (!t || !k || !s) return store.tip.hide();
      const num = (a: string): number => Number(t.getAttribute(a));
      store.tip.show(e, cellInfo(k.kind, s, num("data-n"), num("data-c0"), num("data-c1")));
    },
    { signal },
  );
  box.addEventListener("mouseleave", () => store.tip.hide(), { signal });

  function draw(): void {
    const s = spec();
    if (s === null) return box.replaceChildren();
    box.replaceChildren(
      ...KINDS.map(({ kind, title }) =>
        h("figure", { class: "nw-cube", "data-testid": `cube-${kind}`, "data-kind": kind }, cube(kind, s), h("figcaption", {}, h("strong", {}, title(s)), h("span", { class: "nw-sr-only" }, describe(kind, s)))),
      ),
    );
  }
  store.on(["results", "selection", "hover"], draw, el);
  store.on(["results"], () => bnVsGn(store, tbody, head, caption));
  return el;
}
