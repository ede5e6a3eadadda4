// The per-group statistics: mean and rstd as heatmaps, and the table of their values (kept open or closed).
import { at, fmt, fold, h, section, setText } from "../dom";
import type { Store } from "../store";
import { heatmap } from "./heatmap";

export function statsView(store: Store): HTMLElement {
  const mean = heatmap(store, "mean", "mean");
  const rstd = heatmap(store, "rstd", "rstd = 1/√(var + eps)");
  const tbody = h("tbody");
  const caption = h("caption", {}, "Per-group statistics");
  const table = h(
    "table",
    { class: "nw-table", "data-testid": "group-stats" },
    caption,
    h("thead", {}, h("tr", {}, ...["n", "g", "mean", "rstd"].map((t) => h("th", { scope: "col" }, t)))),
    tbody,
  );
  const tableFold = fold("Table of mean and rstd", "stats-table", h("div", { class: "nw-scroll" }, table));
  const note = h("p", { class: "nw-note" });
  const { el, title } = section("Statistics: one mean and rstd per (sample, group)", "stats", h("div", { class: "nw-row" }, mean.el, rstd.el), note, tableFold.el);

  function drawTable(): void {
    const geo = store.geo;
    if (geo === null) return tbody.replaceChildren();
    const m = store.results.get("mean")?.data, r = store.results.get("rstd")?.data;
    const [sn, sg] = store.sel();
    // the rows are kept and only their text changes: new rows would each cost a style recalculation against the
    // page's stylesheets (JupyterLab's are large), tens of ms for a few hundred rows on a slow machine
    const count = geo.n * geo.g;
    while (tbody.rows.length > count) tbody.lastElementChild?.remove();
    while (tbody.rows.length < count) tbody.append(h("tr", {}, h("td"), h("td"), h("td"), h("td")));
    for (let n = 0, i = 0; n < geo.n; n++)
      for (let g = 0; g < geo.g; g++, i++) {
        const tr = tbody.rows[i]!;
        setText(tr.cells[0]!, String(n));
        setText(tr.cells[1]!, String(g));
        setText(tr.cells[2]!, fmt(at(m, i)));
        setText(tr.cells[3]!, fmt(at(r, i)));
        tr.classList.toggle("nw-selected", n === sn && g === sg);
      }
    tableFold.title.textContent = `Table of mean and rstd (${count} groups)`;
  }
  function draw(): void {
    mean.draw();
    rstd.draw();
    drawTable();
    const geo = store.geo;
    title.textContent = geo ? `Statistics: one mean and rstd per (sample, group), ${geo.n} × ${geo.g}` : "Statistics";
    note.textContent = geo ? `A group: ${geo.cg} channel${geo.cg > 1 ? "s" : ""} × ${geo.s} positions of one sample. Click a cell to select it everywhere.` : "";
  }
  store.on(["results", "selection"], draw, el);
  return el;
}
