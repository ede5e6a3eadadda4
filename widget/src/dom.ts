// Small DOM and number helpers shared by every view.

export const fmt = (v: number | undefined): string => (v === undefined ? "-" : Number.isFinite(v) ? Number(v.toPrecision(7)).toString() : String(v));
export const fmtE = (v: number): string => (Number.isFinite(v) ? v.toExponential(2) : String(v));
export const fmtEps = (v: number): string => (v === 0 ? "0" : v < 1e-3 ? v.toExponential(2) : v.toPrecision(3));
export const at = (a: ArrayLike<number> | undefined | null, i: number): number => (a == null ? NaN : (a[i] ?? NaN));
export const clamp = (v: number, lo: number, hi: number): number => Math.min(hi, Math.max(lo, v));

export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Record<string, string> = {}, ...kids: (Node | string)[]): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
}

/** Sets an element's text only when it differs (an unchanged text node costs the page no layout). */
export function setText(el: Element, text: string): void {
  if (el.textContent !== text) el.textContent = text;
}

export function divisors(c: number): number[] {
  const out: number[] = [];
  for (let d = 1; d <= c; d++) if (c % d === 0) out.push(d);
  return out;
}

export function figure(testid: string, body: Node, caption: HTMLElement): HTMLElement {
  return h("figure", { class: "nw-figure", "data-testid": testid }, body, caption);
}

/** A titled section of the views (always shown). */
export function section(title: string, testid: string, ...kids: Node[]): { el: HTMLElement; title: HTMLElement } {
  const t = h("h3", {}, title);
  const el = h("section", { class: "nw-section", "data-testid": testid, "aria-label": title }, t, ...kids);
  return { el, title: t };
}

/** A section a learner opens: a <details> that the views keep (its open state survives every redraw). */
export function fold(title: string, testid: string, ...kids: Node[]): { el: HTMLDetailsElement; title: HTMLElement } {
  const t = h("span", {}, title);
  const el = h("details", { class: "nw-fold", "data-testid": testid }, h("summary", {}, t), ...kids);
  return { el, title: t };
}

/** `draw` for the contents of a closed section runs when the section opens, not before (a closed section costs
 *  nothing on a recompute); returns the function to call instead of `draw`. */
export function whenOpen(details: HTMLDetailsElement, signal: AbortSignal, draw: () => void): () => void {
  let stale = false;
  details.addEventListener(
    "toggle",
    () => {
      if (details.open && stale) {
        stale = false;
        draw();
      }
    },
    { signal },
  );
  return () => {
    if (details.open) draw();
    else stale = true;
  };
}

/** One tooltip per Explorer, placed next to the pointer inside the Explorer's root. */
export class Tooltip {
  readonly el = h("div", { class: "nw-tooltip", role: "tooltip", hidden: "" });
  constructor(private readonly root: HTMLElement) {}
  show(ev: MouseEvent, text: string): void {
    this.el.textContent = text;
    this.el.hidden = false;
    const box = this.root.getBoundingClientRect();
    this.el.style.left = `${ev.clientX - box.left + 14}px`;
    this.el.style.top = `${ev.clientY - box.top + 14}px`;
  }
  hide(): void {
    this.el.hidden = true;
  }
}

/** A canvas drawn at its displayed size times devicePixelRatio: returns a context in CSS pixels. */
export function sizeCanvas(canvas: HTMLCanvasElement, w: number, hgt: number): CanvasRenderingContext2D | null {
  const dpr = Math.max(1, window.devicePixelRatio || 1);
  const W = Math.max(1, Math.round(w * dpr)), H = Math.max(1, Math.round(hgt * dpr));
  if (canvas.width !== W) canvas.width = W;
  if (canvas.height !== H) canvas.height = H;
  canvas.style.width = `${w}px`;
  canvas.style.height = `${hgt}px`;
  const ctx = canvas.getContext("2d");
  if (!ctx) return null;
  ctx.setTransform(W / w, 0, 0, H / hgt, 0, 0);
  ctx.imageSmoothingEnabled = false;
  ctx.clearRect(0, 0, w, hgt);
  return ctx;
}

/** Arrow keys on a focused element move `from()` (row, column) within rows x cols and hand the cell to `go`. */
export function arrowKeys(el: HTMLElement, signal: AbortSignal, from: () => [number, number], size: () => [number, number], go: (p: [number, number]) => void): void {
  const step: Record<string, [number, number]> = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
  el.addEventListener(
    "keydown",
    (e) => {
      const m = step[e.key];
      if (!m) return;
      e.preventDefault();
      const [r, c] = from(), [rows, cols] = size();
      go([clamp(r + m[0], 0, rows - 1), clamp(c + m[1], 0, cols - 1)]);
    },
    { signal },
  );
}
