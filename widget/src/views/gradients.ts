// The gradients of the affine (dweight, dbias per channel) and ‖dx‖ per group, with dx = 0 said in words.
import { extent } from "../color";
import { fmt, fold, h, whenOpen } from "../dom";
import { zeroSentence } from "../numerics";
import type { Store } from "../store";
import { heatmap } from "./heatmap";
import { barChart, hover } from "./plots";

function bars(store: Store, name: string, label: string): HTMLElement {
  const geo = store.geo;
  const a = store.results.get(name);
  if (a === undefined || geo === null) return h("p", {}, `${name}: not in the results`);
  const [lo, hi] = extent(a.data);
  const desc = `${label} per channel, ${geo.c} bars (alternate shades mark the ${geo.g} groups), from ${fmt(lo)} to ${fmt(hi)}`;
  const shade = (c: number): string => (Math.floor(c / geo.cg) % 2 === 1 ? "var(--jp-brand-color2, #64b5f6)" : "var(--jp-brand-color1, #1976d2)");
  const plot = barChart(300, 52, desc, "channel", label, Array.from(a.data, (y, c) => ({ x1: c, x2: c + 1, y, fill: shade(c) })));
  hover(store, plot, (x) => {
    const c = Math.floor(x);
    return c < 0 || c >= geo.c ? null : `${label}[${c}] = ${fmt(a.data[c])}\nchannel ${c}, group ${Math.floor(c / geo.cg)}`;
  });
  return h("figure", { class: "nw-figure", "data-testid": `bars-${name}` }, plot.el, h("figcaption", {}, desc));
}

export function gradientsView(store: Store): HTMLElement {
  const norm = heatmap(store, "dx_norm", "‖dx‖ per group");
  const zero = h("p", { class: "nw-zero", "data-testid": "dx-zero", role: "note" });
  const row = h("div", { class: "nw-row" });
  const { el } = fold("Gradients: dweight, dbias and ‖dx‖ per group", "gradients", zero, row);
  function draw(): void {
    norm.draw();
    const z = zeroSentence(store);
    zero.textContent = z ?? "";
    zero.hidden = z === null;
    row.replaceChildren(norm.el, bars(store, "dweight", "dweight"), bars(store, "dbias", "dbias"));
  }
  store.on(["results", "selection"], whenOpen(el, store.signal, draw), el);
  return el;
}
