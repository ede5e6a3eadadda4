// The GroupNorm Explorer's front-end (anywidget ESM). It draws what numr_web/explorer/ computed and sends control
// changes back; it runs no kernels. The contract: docs/explorer-contract.md. One module per view (views/), over a
// shared Store (store.ts): each view redraws only when what it shows changed.
import type { RenderProps } from "@anywidget/types";
import { h } from "./dom";
import { Store, type Dep, type Traits } from "./store";
import { controlsView } from "./views/controls";
import { cubeView } from "./views/cube";
import { gradientsView } from "./views/gradients";
import { groupView } from "./views/group";
import { headerView } from "./views/header";
import { imagesView } from "./views/images";
import { invariantsView } from "./views/invariants";
import { statsView } from "./views/stats";

export { Store } from "./store";
export { INVARIANT_TOL } from "./views/invariants";
/** Each view on its own, for the front-end's unit tests: (store) -> element, drawn by `store.emit`. */
export const views = { statsView, cubeView, groupView, imagesView, gradientsView, invariantsView, headerView, controlsView };

let instances = 0;

const CONTROLS = ["shape", "num_groups", "eps", "offset", "scale", "channel_spread", "outlier_channel", "seed", "pattern", "dtype", "memory_layout", "silu", "grad_mode", "batch", "generated"];

function render({ model, el }: RenderProps<Traits>): () => void {
  const ac = new AbortController();
  const id = `nw-explorer-${++instances}`;
  const root = h("div", { class: "nw-explorer", id });
  const store = new Store(model, ac.signal, root);
  const body = h("div", { class: "nw-body" });
  // the core story in two stacks: the numbers (statistics, the selected group) beside the pictures (who shares, the sample)
  const core = h("div", { class: "nw-core" }, h("div", { class: "nw-col" }, statsView(store), groupView(store)), h("div", { class: "nw-col" }, cubeView(store), imagesView(store)));
  body.append(core, h("div", { class: "nw-more" }, gradientsView(store), invariantsView(store)));
  const main = h("div", { class: "nw-main" }, h("aside", { class: "nw-side" }, controlsView(store, id)), body);
  root.append(headerView(store), main, store.tip.el);
  el.replaceChildren(root);
  store.onDrawn = () => (body.dataset.drawn = String(store.meta?.version ?? ""));

  // one redraw per burst of change events (a kernel message sets results, results_meta, shape and status together)
  let pending = new Set<Dep>();
  let fresh = false;
  const schedule = (deps: Dep[], decode = false): void => {
    fresh ||= decode;
    const first = pending.size === 0;
    for (const d of deps) pending.add(d);
    if (!first) return;
    queueMicrotask(() => {
      if (ac.signal.aborted) return;
      const changed = [...pending];
      pending = new Set();
      if (fresh) store.decode();
      fresh = false;
      store.emit(changed);
    });
  };
  const handlers: [string, () => void][] = [
    ...["results", "input_data", "results_meta"].map((t): [string, () => void] => [`change:${t}`, () => schedule(["results", "status", "controls"], true)]),
    ["change:status", () => schedule(["status"])],
    ["change:device", () => schedule(["status"])],
    ...["selected", "sample", "element"].map((t): [string, () => void] => [`change:${t}`, () => schedule(["selection"])]),
    ...CONTROLS.map((t): [string, () => void] => [`change:${t}`, () => schedule(["controls"])]),
    ["change:grad_mode", () => schedule(["paint"])],
  ];
  for (const [ev, f] of handlers) model.on(ev, f);
  store.decode();
  store.emit(["results", "selection", "controls", "status", "lesson", "paint"]);

  return () => {
    for (const [ev, f] of handlers) model.off(ev, f);
    ac.abort();
  };
}

export default { render };
