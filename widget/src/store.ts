// The shared state every view reads: the decoded results, the one selection, the view-side UI state.
// Views subscribe to what they show (`on(deps, draw)`) and redraw only when one of those changed.
import type { AnyModel } from "@anywidget/types";
import { decodeResults, parseMeta, type NdArray, type Results, type ResultsMeta } from "./decode";
import { Tooltip, clamp } from "./dom";

export interface Traits {
  shape: number[];
  device: string;
  status: string;
  results: unknown;
  input_data: unknown;
  results_meta: unknown;
  num_groups: number;
  eps: number;
  offset: number;
  scale: number;
  channel_spread: number;
  outlier_channel: number;
  seed: number;
  pattern: string;
  generated: boolean;
  dtype: string;
  memory_layout: string;
  silu: boolean;
  grad_mode: string;
  batch: number;
  sample: number;
  selected: number[];
  element: number[];
  dy_paint: unknown;
  [key: string]: unknown;
}
export type Model = AnyModel<Traits>;

/** What changed: "results" (new numbers), "selection" (group, sample or element), "hover" (the hovered group),
 *  "controls" (a control trait), "status", "paint" (the painted dy), "lesson" (a preset's sentence). */
export type Dep = "results" | "selection" | "hover" | "controls" | "status" | "paint" | "lesson";

/** The sizes of the shown results (their shapes win over the controls' traits, which may be ahead). */
export interface Geo {
  n: number; // batch of the statistics
  g: number;
  c: number;
  s: number; // spatial positions
  cg: number; // channels per group
  sent: number; // samples of x/y/dy/dx sent
  spatial: number[];
}

interface Sub {
  deps: Set<Dep>;
  draw: () => void;
  el?: HTMLElement;
}

export class Store {
  results: Results = new Map();
  meta: ResultsMeta | null = null;
  geo: Geo | null = null;
  /** the group under the pointer in a heatmap (the cube follows it) */
  hover: [number, number] | null = null;
  /** grad_mode "painted": the mask being painted, C x S */
  paint: Float32Array | null = null;
  /** controls the view refused, with the reason (trait -> message) */
  readonly invalid = new Map<string, string>();
  lesson: { title: string; text: string } | null = null;
  readonly tip: Tooltip;
  private readonly subs: Sub[] = [];
  private memo = new Map<string, unknown>();
  private lastInput: { buffer: unknown; arrays: Map<string, { offset: number; arr: NdArray }> } = { buffer: null, arrays: new Map() };
  /** called after every view shows the current results */
  onDrawn: () => void = () => undefined;

  constructor(
    readonly model: Model,
    readonly signal: AbortSignal,
    root: HTMLElement,
  ) {
    this.tip = new Tooltip(root);
  }

  get<K extends keyof Traits & string>(name: K): Traits[K] {
    return this.model.get(name);
  }

  /** Sets traits and sends them in one message (the kernel recomputes once). */
  send(values: Partial<Traits>): void {
    for (const [k, v] of Object.entries(values)) this.model.set(k, v);
    this.model.save_changes();
  }

  /** A parameter the shown results were computed with: from results_meta, else the trait (which may be ahead). */
  param(name: "eps" | "dtype" | "silu" | "grad_mode"): unknown {
    return this.meta !== null && name in this.meta.extra ? this.meta.extra[name] : this.model.get(name);
  }

  /** The selected group (n, g), within the shown results. */
  sel(): [number, number] {
    const geo = this.geo;
    const raw = this.model.get("selected") ?? [];
    if (geo === null) return [0, 0];
    const n = clamp(Math.trunc(Number(raw[0] ?? 0)) || 0, 0, geo.n - 1);
    return [n, clamp(Math.trunc(Number(raw[1] ?? 0)) || 0, 0, geo.g - 1)];
  }

  /** The element [c, s] the worked example follows: the `element` trait when it lies in the selected group, else
   *  the group's first. */
  element(): [number, number] {
    const geo = this.geo;
    if (geo === null) return [0, 0];
    const raw = this.model.get("element") ?? [];
    const c = Math.trunc(Number(raw[0])), s = Math.trunc(Number(raw[1]));
    const g = this.sel()[1];
    if (Number.isFinite(c) && Number.isFinite(s) && Math.floor(c / geo.cg) === g && c >= 0 && c < geo.c && s >= 0 && s < geo.s) return [c, s];
    return [g * geo.cg, 0];
  }

  /** Selects group (n, g) everywhere: the sample shown is n (one selection for every view). */
  select(n: number, g: number, element?: [number, number]): void {
    this.send({ selected: [n, g], sample: n, ...(element ? { element: [element[0], element[1]] } : {}) });
  }

  /** A value computed once per results version (and `key`). */
  cached<T>(key: string, make: () => T): T {
    const k = `${this.meta?.version ?? ""}|${key}`;
    if (!this.memo.has(k)) {
      if (this.memo.size > 32) this.memo.clear();
      this.memo.set(k, make());
    }
    return this.memo.get(k) as T;
  }

  decode(): void {
    this.meta = parseMeta(this.model.get("results_meta"));
    const input = this.model.get("input_data");
    const results = decodeResults({ results: this.model.get("results"), input_data: input }, this.meta);
    // the arrays of an unchanged input_data buffer keep their identity (views keep what they drew from them)
    const kept = new Map<string, { offset: number; arr: NdArray }>();
    for (const [name, info] of Object.entries(this.meta?.arrays ?? {})) {
      const arr = results.get(name);
      if (info.trait !== "input_data" || arr === undefined) continue;
      const prev = this.lastInput.buffer === input ? this.lastInput.arrays.get(name) : undefined;
      if (prev && prev.offset === info.offset && prev.arr.shape.join() === arr.shape.join()) results.set(name, prev.arr);
      kept.set(name, { offset: info.offset, arr: results.get(name) ?? arr });
    }
    this.lastInput = { buffer: input, arrays: kept };
    this.results = results;
    this.memo.clear();
    this.geo = geoOf(results, this.model.get("shape") ?? []);
  }

  /** `draw` runs whenever one of `deps` changed. A view's `el` carries `data-drawn` = the results version it
   *  shows once it drew them. */
  on(deps: Dep[], draw: () => void, el?: HTMLElement): void {
    this.subs.push({ deps: new Set(deps), draw, ...(el ? { el } : {}) });
  }

  private run(s: Sub): void {
    const t0 = performance.now();
    s.draw();
    if (s.el && s.deps.has("results")) {
      s.el.dataset.drawn = String(this.meta?.version ?? "");
      s.el.dataset.drawMs = (performance.now() - t0).toFixed(1); // what the draw cost (scripts/explorer-latency)
    }
  }

  /** Draws the views that depend on what `changed`, all in this task: new results reach every view in the same
   *  frame (drawing the statistics a frame ahead of the rest cost the rest 50 ms in JupyterLab:
   *  docs/reports/2026-12-03-explorer-one-frame.md). */
  emit(changed: Dep[]): void {
    for (const s of this.subs) if (changed.some((d) => s.deps.has(d))) this.run(s);
    this.onDrawn();
  }
}

function geoOf(r: Results, shape: number[]): Geo | null {
  const mean = r.get("mean");
  const x = r.get("x");
  if (mean === undefined || mean.shape.length !== 2) return null;
  const [n = 0, g = 0] = mean.shape;
  const full = x?.shape ?? shape;
  const c = full[1] ?? shape[1] ?? 0;
  const spatial = full.slice(2);
  const s = spatial.reduce((a, b) => a * b, 1);
  if (n <= 0 || g <= 0 || c <= 0 || c % g !== 0) return null;
  return { n, g, c, s, cg: c / g, sent: x?.shape[0] ?? 0, spatial };
}

/** Group (n, g)'s values of a per-sample tensor (channels cg·g … of sample n), or null when n was not sent. */
export function groupValues(geo: Geo, a: NdArray | undefined, n: number, g: number): Float32Array | null {
  if (a === undefined || n >= (a.shape[0] ?? 0)) return null;
  const start = (n * geo.c + g * geo.cg) * geo.s;
  return a.data.subarray(start, start + geo.cg * geo.s);
}

/** Sample n of a per-sample tensor (C x S), or null when it was not sent. */
export function sampleValues(geo: Geo, a: NdArray | undefined, n: number): Float32Array | null {
  if (a === undefined || n >= (a.shape[0] ?? 0)) return null;
  return a.data.subarray(n * geo.c * geo.s, (n + 1) * geo.c * geo.s);
}
