// The title, the device, the status (never "up to date" while a control is refused), and the lesson of the moment.
import { h } from "../dom";
import type { Store } from "../store";
import { DEFAULT_LESSON } from "./presets";

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
  function draw(): void {
    const s = statusText(store);
    el.closest(".nw-explorer")?.classList.toggle("nw-busy", String(store.get("status")) === "computing");
    status.classList.toggle("nw-error", s.error);
    status.textContent = s.text;
    device.textContent = String(store.get("device") ?? "");
  }
  function drawLesson(): void {
    const l = store.lesson ?? DEFAULT_LESSON;
    lessonTitle.textContent = `${l.title}:`;
    lessonText.textContent = l.text;
  }
  store.on(["status", "results"], draw, true);
  store.on(["lesson"], drawLesson, true);
  return el;
}
