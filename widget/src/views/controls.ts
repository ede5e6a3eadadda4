// The controls, in a column that stays in view beside the views: presets first, then the normalization, the
// input, the gradient and the sample shown. A value the kernel would refuse is marked (aria-invalid) with its
// reason and not sent; a control the kernel refused is marked the same way.
import { divisors, fmtEps, h } from "../dom";
import type { Store, Traits } from "../store";
import { PRESETS } from "./presets";

interface Rule {
  trait: keyof Traits & string;
  label: string;
  attrs: Record<string, string>;
  parse: (s: string) => number;
  /** null, or what is wrong */
  check: (v: number) => string | null;
}

const finite = (v: number): string | null => (Number.isFinite(v) ? null : "must be a number");
const RULES: Rule[] = [
  { trait: "offset", label: "Offset", attrs: { step: "any" }, parse: Number, check: finite },
  { trait: "scale", label: "Scale", attrs: { step: "any" }, parse: Number, check: (v) => finite(v) ?? (v > 0 ? null : "must be greater than 0") },
  { trait: "channel_spread", label: "Channel spread", attrs: { step: "any" }, parse: Number, check: (v) => finite(v) ?? (v >= 0 ? null : "must be 0 or more") },
  { trait: "seed", label: "Seed", attrs: { step: "1" }, parse: Number, check: (v) => (Number.isInteger(v) && v >= 0 ? null : "must be a whole number, 0 or more") },
  { trait: "batch", label: "Batch size N", attrs: { step: "1" }, parse: Number, check: (v) => (Number.isInteger(v) && v >= 1 && v <= 32 ? null : "must be a whole number from 1 to 32") },
];
const testid = (trait: string): string => trait.replace("_", "-");

type Field = { wrap: HTMLElement; input: HTMLElement; error: HTMLElement; trait: string };

function field(id: string, label: string, input: HTMLElement, trait: string, extra?: Node): Field {
  input.id = `${id}-${input.dataset.testid ?? trait}`;
  const error = h("span", { class: "nw-field-error", id: `${input.id}-error`, "data-testid": `${input.dataset.testid ?? trait}-error`, hidden: "" });
  input.setAttribute("aria-describedby", error.id);
  const wrap = h("div", { class: "nw-field" }, h("label", { for: input.id }, label), input, ...(extra ? [extra] : []), error);
  return { wrap, input, error, trait };
}

function select(tid: string, options: [string, string][]): HTMLSelectElement {
  const s = h("select", { "data-testid": tid });
  for (const [v, t] of options) s.append(h("option", { value: v }, t));
  return s;
}

function setOptions(s: HTMLSelectElement, opts: [string, string][], value: string): void {
  const same = s.options.length === opts.length && opts.every(([v], i) => s.options[i]?.value === v);
  if (!same) s.replaceChildren(...opts.map(([v, t]) => h("option", { value: v }, t)));
  s.value = value;
}

function presetButtons(store: Store): HTMLElement {
  const box = h("div", { class: "nw-presets", role: "group", "aria-label": "Presets" });
  for (const p of PRESETS) {
    const b = h("button", { type: "button", "data-testid": `preset-${p.id}`, "data-generated": String(p.generated) }, p.label);
    b.addEventListener(
      "click",
      () => {
        const traits = p.traits(store);
        for (const t of Object.keys(traits)) store.invalid.delete(t);
        store.send({ ...traits, ...(p.select ? { selected: p.select, sample: p.select[0] } : {}) });
        store.lesson = { title: p.label, text: p.text(store) };
        store.emit(["lesson", "selection", "status", "controls"]);
      },
      { signal: store.signal },
    );
    box.append(b);
  }
  return box;
}

interface Els {
  form: HTMLFormElement;
  numGroups: HTMLSelectElement;
  epsLog: HTMLInputElement;
  epsValue: HTMLOutputElement;
  epsZero: HTMLInputElement;
  silu: HTMLInputElement;
  pattern: HTMLSelectElement;
  outlier: HTMLSelectElement;
  dtype: HTMLSelectElement;
  layout: HTMLSelectElement;
  gradMode: HTMLSelectElement;
  sample: HTMLSelectElement;
  numbers: Map<string, HTMLInputElement>;
  fields: Field[];
}

function build(store: Store, id: string): Els {
  const signal = store.signal;
  const on = (e: EventTarget, type: string, f: () => void): void => e.addEventListener(type, f, { signal });
  const fields: Field[] = [];
  const add = (f: Field): HTMLElement => (fields.push(f), f.wrap);

  const numGroups = select("num-groups", []);
  on(numGroups, "change", () => store.send({ num_groups: Number(numGroups.value) }));
  const epsLog = h("input", { type: "range", min: "-10", max: "0", step: "0.1", "data-testid": "eps" });
  const epsValue = h("output", { class: "nw-mono", "data-testid": "eps-value" });
  const epsZero = h("input", { type: "checkbox", "data-testid": "eps-zero", id: `${id}-eps-zero` });
  const sendEps = (): void => store.send({ eps: epsZero.checked ? 0 : Number((10 ** Number(epsLog.value)).toPrecision(3)) });
  on(epsLog, "input", () => (epsValue.textContent = fmtEps(10 ** Number(epsLog.value))));
  on(epsLog, "change", sendEps);
  on(epsZero, "change", sendEps);
  const silu = h("input", { type: "checkbox", "data-testid": "silu" });
  on(silu, "change", () => store.send({ silu: silu.checked }));
  const pattern = select("pattern", [["blobs", "smooth blobs"], ["edges", "edges"], ["stripes", "stripes"], ["noise", "noise"]]);
  on(pattern, "change", () => store.send({ pattern: pattern.value }));
  const outlier = select("outlier-channel", [["-1", "none"]]);
  on(outlier, "change", () => store.send({ outlier_channel: Number(outlier.value) }));
  const dtype = select("dtype", [["float32", "float32"], ["float16", "float16"], ["bfloat16", "bfloat16"]]);
  on(dtype, "change", () => store.send({ dtype: dtype.value }));
  const layout = select("layout", [["nchw", "NCHW"], ["nhwc", "NHWC (channels-last)"]]);
  on(layout, "change", () => store.send({ memory_layout: layout.value }));
  const gradMode = select("grad-mode", [["ones", "ones"], ["random", "random"], ["loss", "loss = Σy²/2 (dy = y)"], ["painted", "painted (draw on dy)"]]);
  on(gradMode, "change", () => store.send({ grad_mode: gradMode.value }));
  const sample = select("sample", []);
  on(sample, "change", () => store.select(Number(sample.value), store.sel()[1]));
  const numbers = new Map<string, HTMLInputElement>();
  const numeric = RULES.map((r) => {
    const input = h("input", { type: "number", "data-testid": testid(r.trait), ...r.attrs });
    numbers.set(r.trait, input);
    const f = field(id, r.label, input, r.trait);
    on(input, "change", () => {
      const v = r.parse(input.value);
      const why = input.value.trim() === "" ? "must not be empty" : r.check(v);
      if (why === null) store.invalid.delete(r.trait);
      else store.invalid.set(r.trait, `${r.label} ${why} (got ${input.value.trim() || "nothing"}); not applied`);
      if (why === null) store.send({ [r.trait]: v });
      store.emit(["status"]);
    });
    return f;
  });
  const byTrait = new Map(numeric.map((f) => [f.trait, f]));
  const form = h(
    "form",
    { class: "nw-controls", "aria-label": "Explorer controls", "data-testid": "controls" },
    h("fieldset", {}, h("legend", {}, "Lessons"), presetButtons(store)),
    h(
      "fieldset",
      {},
      h("legend", {}, "Normalization"),
      add(field(id, "Groups G", numGroups, "num_groups")),
      add(field(id, "eps", epsLog, "eps", h("span", { class: "nw-eps" }, epsValue, h("label", { for: epsZero.id, class: "nw-inline" }, epsZero, "eps = 0")))),
      add(field(id, "SiLU after GroupNorm", silu, "silu")),
    ),
    h("fieldset", { "data-testid": "input-controls" }, h("legend", {}, "Input x"), add(field(id, "Pattern", pattern, "pattern")), ...["offset", "scale", "channel_spread"].map((t) => add(byTrait.get(t)!)), add(field(id, "Outlier channel", outlier, "outlier_channel")), add(byTrait.get("seed")!)),
    h("fieldset", {}, h("legend", {}, "Batch and storage"), add(byTrait.get("batch")!), add(field(id, "dtype", dtype, "dtype")), add(field(id, "Layout", layout, "memory_layout"))),
    h("fieldset", {}, h("legend", {}, "Gradient"), add(field(id, "Upstream gradient dy", gradMode, "grad_mode")), add(field(id, "Sample shown", sample, "sample"))),
  );
  form.addEventListener("submit", (e) => e.preventDefault(), { signal });
  return { form, numGroups, epsLog, epsValue, epsZero, silu, pattern, outlier, dtype, layout, gradMode, sample, numbers, fields };
}

function sync(store: Store, e: Els): void {
  const { numGroups, epsLog, epsValue, epsZero, silu, pattern, outlier, dtype, layout, gradMode, sample, numbers, fields, form } = e;
  const shape = store.get("shape") ?? [];
  const c = shape[1] ?? 0;
  setOptions(numGroups, divisors(c).map((d) => [String(d), `${d}  (${c / d} ch/group)`]), String(store.get("num_groups")));
  const eps = Number(store.get("eps"));
  epsZero.checked = eps === 0;
  if (eps > 0) epsLog.value = String(Math.log10(eps));
  epsLog.disabled = eps === 0;
  epsValue.textContent = fmtEps(eps);
  for (const [trait, input] of numbers)
    if (!store.invalid.has(trait) && (document.activeElement !== input || input.value === "")) input.value = String(store.get(trait));
  setOptions(outlier, [["-1", "none"], ...Array.from({ length: c }, (_, i): [string, string] => [String(i), `channel ${i}`])], String(store.get("outlier_channel")));
  pattern.value = String(store.get("pattern") ?? "blobs");
  dtype.value = String(store.get("dtype"));
  layout.value = String(store.get("memory_layout"));
  silu.checked = Boolean(store.get("silu"));
  gradMode.value = String(store.get("grad_mode"));
  const n = Number(store.get("batch") ?? shape[0] ?? 1);
  setOptions(sample, Array.from({ length: Math.max(1, n) }, (_, i): [string, string] => [String(i), `n = ${i}`]), String(store.sel()[0]));
  const generated = store.get("generated") !== false;
  for (const f of fields) if (["pattern", "offset", "scale", "channel_spread", "outlier_channel", "seed"].includes(f.trait)) (f.input as HTMLInputElement).disabled = !generated;
  for (const b of form.querySelectorAll<HTMLButtonElement>('[data-generated="true"]')) b.disabled = !generated;
}

function marks(store: Store, e: Els): void {
  const { fields } = e;
  const status = String(store.get("status") ?? "");
  const kernel = /^error:\s*(\w+):\s*(.*)$/.exec(status);
  for (const f of fields) {
    const why = store.invalid.get(f.trait) ?? (kernel && kernel[1] === f.trait ? `${kernel[2]} (refused by the kernel)` : null);
    f.input.setAttribute("aria-invalid", String(why !== null));
    f.error.textContent = why ?? "";
    f.error.hidden = why === null;
  }
}

export function controlsView(store: Store, id: string): HTMLElement {
  const e = build(store, id);
  store.on(["controls", "selection", "results"], () => sync(store, e));
  store.on(["status", "controls"], () => marks(store, e));
  return e.form;
}
