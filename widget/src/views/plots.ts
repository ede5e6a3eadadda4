// Small Observable Plot charts in the Explorer's style, with the value under the pointer in the tooltip.
import * as Plot from "@observablehq/plot";
import type { Store } from "../store";

export interface Small {
  el: SVGSVGElement | HTMLElement;
  /** data x under a client x coordinate */
  xAt: (clientX: number) => number;
}

export function smallPlot(width: number, marginLeft: number, desc: string, xLabel: string, yLabel: string, marks: Plot.Markish[]): Small {
  const plot = Plot.plot({
    width,
    height: 140,
    marginLeft,
    ariaLabel: desc,
    style: { background: "transparent", color: "currentColor", fontSize: "10px" },
    x: { label: xLabel },
    y: { label: yLabel, grid: true },
    marks: [...marks, Plot.ruleY([0])],
  });
  const x = plot.scale("x");
  const xAt = (clientX: number): number => {
    const box = plot.getBoundingClientRect();
    const px = ((clientX - box.left) / Math.max(1, box.width)) * width;
    const [d0, d1] = (x?.domain ?? [0, 1]) as [number, number];
    const [r0, r1] = (x?.range ?? [0, width]) as [number, number];
    return d0 + ((px - r0) / (r1 - r0 || 1)) * (d1 - d0);
  };
  return { el: plot, xAt };
}

/** Hovering `small` shows `text(x)` for the data x under the pointer (nothing where it returns null). */
export function hover(store: Store, small: Small, text: (x: number) => string | null): void {
  const signal = store.signal;
  small.el.addEventListener(
    "mousemove",
    (e) => {
      const ev = e as MouseEvent;
      const t = text(small.xAt(ev.clientX));
      if (t === null) store.tip.hide();
      else store.tip.show(ev, t);
    },
    { signal },
  );
  small.el.addEventListener("mouseleave", () => store.tip.hide(), { signal });
}
