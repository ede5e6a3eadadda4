// Painting the upstream gradient (grad_mode "painted"): one C x S mask, used as dy of every sample, sent to the
// kernel as binary when a stroke ends.
import { h } from "../dom";
import type { Store } from "../store";
import { elementAt } from "./tiles";
import type { Picture } from "./images";

function maskFrom(store: Store, size: number): Float32Array {
  const mask = new Float32Array(size);
  const raw = store.get("dy_paint");
  const bytes = raw instanceof DataView ? new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength) : raw instanceof ArrayBuffer ? new Uint8Array(raw) : ArrayBuffer.isView(raw) ? new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength) : null;
  if (bytes && bytes.byteLength === 4 * size) new Uint8Array(mask.buffer).set(bytes);
  return mask;
}

export function painter(store: Store, p: Picture, box: HTMLElement, redraw: () => void): { sync: () => void } {
  const signal = store.signal;
  const note = h("p", { class: "nw-note", "data-testid": "paint-note" });
  const clear = h("button", { type: "button", "data-testid": "paint-clear" }, "Clear dy");
  let value = -1;
  let last: [number, number] | null = null;
  const on = (): boolean => String(store.get("grad_mode")) === "painted" && store.paint !== null;
  const send = (): void => {
    // a copy: the kernel's bytes must not change under it while the next stroke paints
    if (store.paint) store.send({ dy_paint: new DataView(store.paint.slice().buffer) });
  };
  const dabAt = (x: number, y: number): void => {
    const e = p.tiles && elementAt(p.tiles, x, y);
    if (e && store.paint && store.geo) store.paint[e[0] * store.geo.s + e[1]] = value;
  };
  const dab = (ev: MouseEvent): void => {
    const box = p.canvas.getBoundingClientRect();
    const x = ev.clientX - box.left, y = ev.clientY - box.top;
    // a line from the last point, so a fast stroke leaves no gaps
    const [x0, y0] = last ?? [x, y];
    const steps = Math.max(1, Math.ceil(Math.hypot(x - x0, y - y0)));
    for (let k = 0; k <= steps; k++) dabAt(x0 + ((x - x0) * k) / steps, y0 + ((y - y0) * k) / steps);
    last = [x, y];
    redraw();
  };
  p.canvas.addEventListener(
    "pointerdown",
    (ev) => {
      if (!on()) return;
      ev.preventDefault();
      value = ev.shiftKey || ev.button === 2 ? 0 : 1;
      last = null;
      p.canvas.setPointerCapture?.(ev.pointerId);
      dab(ev);
    },
    { signal },
  );
  p.canvas.addEventListener("pointermove", (ev) => value >= 0 && dab(ev), { signal });
  const end = (): void => {
    if (value < 0) return;
    value = -1;
    last = null;
    send();
  };
  p.canvas.addEventListener("pointerup", end, { signal });
  p.canvas.addEventListener("pointercancel", end, { signal });
  p.canvas.addEventListener(
    "keydown",
    (e) => {
      if (!on() || (e.key !== " " && e.key !== "Enter") || !store.paint || !store.geo) return;
      e.preventDefault();
      const [c, s] = store.element();
      const i = c * store.geo.s + s;
      store.paint[i] = store.paint[i] ? 0 : 1;
      send();
      redraw();
    },
    { signal },
  );
  clear.addEventListener(
    "click",
    () => {
      store.paint?.fill(0);
      send();
      redraw();
    },
    { signal },
  );
  function sync(): void {
    const geo = store.geo;
    const painted = String(store.get("grad_mode")) === "painted" && geo !== null;
    if (!painted) store.paint = null;
    else if (store.paint === null || store.paint.length !== geo.c * geo.s) store.paint = maskFrom(store, geo.c * geo.s);
    p.canvas.classList.toggle("nw-paint", painted);
    if (!painted || geo === null) return box.replaceChildren();
    const who = geo.n === 1 ? "sample 0" : `every sample (n = 0…${geo.n - 1}), not only this one`;
    note.textContent = `Drag on the dy image to paint dy = 1 (Shift: erase). The painting is dy of ${who}; the kernel recomputes when you let go.`;
    box.replaceChildren(note, h("div", { class: "nw-buttons" }, clear));
  }
  return { sync };
}
