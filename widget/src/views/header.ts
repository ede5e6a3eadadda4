// The title, the device, the status (never "up to date" while a control is refused), and the lesson of the moment.
import { h } from "../dom";
import type { Store } from "../store";
import { DEFAULT_LESSON } from "./presets";

/** how long a recompute runs before the views dim */
export const BUSY_MS = 300;

export function statusText(store: Store): { text: string; error: boolean } {
  const s = String(store.get("status") ?? "");
  if (store.invalid.size > 0) return { text: `${[...store.invalid.values()].join("; ")}. The views show the last valid input.`, error: true };
  if (s === "computing") return { text: "Computing…", error: false };
  if (s.startsWith("error")) return { text: `Error: ${s.replace(/^error:\s*/, "")}`, error: true };
  return { text: `Up to date (results v${store.meta?.version ?? "-"})`, error: false };
}

export function headerView(store: Store): HTMLElement {
  const device = h("span", { class: "nw-device", "data-testid": "device" });
  const status = h("div", { class: "nw-status", role: "status", "aria-live": "polite", "data-testid": "status" });
  const lessonTitle = h("strong", {});
  const lessonText = h("span", {});
  const lesson = h("p", { class: "nw-lesson", "data-testid": "lesson", "aria-live": "polite" }, lessonTitle, " ", lessonText);
  const el = h("header", { class: "nw-header" }, h("div", { class: "nw-titlebar" }, h("h2", { class: "nw-title" }, "GroupNorm Explorer"), device, status), lesson);
  // the views dim only while a recompute takes longer than BUSY_MS: a quick one would only flicker, and the fade
  // (a frame of the whole body each step) would compete with the redraw on a slow machine
  let dim: ReturnType<typeof setTimeout> | undefined;
  const busy = (on: boolean): void => {
    el.closest(".nw-explorer")?.classList.toggle("nw-busy", on);
  };
  store.signal.addEventListener("abort", () => clearTimeout(dim));
  function draw(): void {
    const s = statusText(store);
    const computing = String(store.get("status")) === "computing";
    if (!computing) {
      clearTimeout(dim);
      dim = undefined;
      busy(false);
    } else if (dim === undefined) dim = setTimeout(() => busy(String(store.get("status")) === "computing"), BUSY_MS);
    status.classList.toggle("nw-error", s.error);
    status.textContent = s.text;
    device.textContent = String(store.get("device") ?? "");
  }
  function drawLesson(): void {
    const l = store.lesson ?? DEFAULT_LESSON;
    lessonTitle.textContent = `${l.title}:`;
    lessonText.textContent = l.text;
  }
  store.on(["status", "results"], draw);
  store.on(["lesson"], drawLesson);
  return el;
}
