// The (N, C, spatial) cube of Wu & He's Figure 2: which elements share one mean and variance. Channels run across,
// samples go back; the highlighted unit (a group, a channel, a whole sample) is drawn at least MIN_UNIT wide, so
// BatchNorm's and InstanceNorm's one channel stays visible at C = 32 or 64.
const SVG = "http://www.w3.org/2000/svg";
const W = 112, H = 60, DEPTH = 34, MIN_UNIT = 8;

export type NormKind = "batch" | "layer" | "instance" | "group";

export interface CubeSpec {
  n: number; // batch size
  c: number; // channels
  groups: number;
  spatial: number; // number of spatial positions
  sel: [number, number]; // (n, g)
}

export const KINDS: { kind: NormKind; title: (s: CubeSpec) => string }[] = [
  { kind: "group", title: (s) => `GroupNorm (G = ${s.groups})` },
  { kind: "layer", title: () => "LayerNorm (G = 1)" },
  { kind: "instance", title: () => "InstanceNorm (G = C)" },
  { kind: "batch", title: () => "BatchNorm" },
];

/** The channels [c0, c1] of the highlighted unit, and whether it spans every sample (BatchNorm). */
function unit(kind: NormKind, s: CubeSpec): { c0: number; c1: number; allSamples: boolean } {
  const cg = s.c / s.groups;
  const c0 = s.sel[1] * cg; // the selected group's first channel stands for "the channel" under IN and BN
  if (kind === "group") return { c0, c1: c0 + cg - 1, allSamples: false };
  if (kind === "layer") return { c0: 0, c1: s.c - 1, allSamples: false };
  return { c0, c1: c0, allSamples: kind === "batch" };
}

function highlighted(kind: NormKind, s: CubeSpec, n: number, c: number): boolean {
  const u = unit(kind, s);
  return (u.allSamples || n === s.sel[0]) && c >= u.c0 && c <= u.c1;
}

/** What the highlighted set is, in words (the diagram's text alternative). */
export function describe(kind: NormKind, s: CubeSpec): string {
  const cg = s.c / s.groups;
  const [sn, sg] = s.sel;
  const c0 = sg * cg;
  switch (kind) {
    case "group":
      return `GroupNorm: sample ${sn}, channels ${c0} to ${c0 + cg - 1}, all ${s.spatial} positions (${cg * s.spatial} elements) share one mean and rstd`;
    case "layer":
      return `LayerNorm: sample ${sn}, all ${s.c} channels and ${s.spatial} positions (${s.c * s.spatial} elements)`;
    case "instance":
      return `InstanceNorm: sample ${sn}, channel ${c0}, ${s.spatial} positions (${s.spatial} elements)`;
    case "batch":
      return `BatchNorm: channel ${c0} over all ${s.n} samples and ${s.spatial} positions (${s.n * s.spatial} elements); it changes with N`;
  }
}

function el<K extends keyof SVGElementTagNameMap>(name: K, attrs: Record<string, string | number>): SVGElementTagNameMap[K] {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

/** Channel -> x on the front face: the highlighted unit at least MIN_UNIT wide, the other channels share the rest. */
function axis(s: CubeSpec, c0: number, c1: number): (c: number) => number {
  const inside = c1 - c0 + 1;
  const natural = (W * inside) / s.c;
  if (natural >= MIN_UNIT || inside === s.c) return (c) => (W * c) / s.c;
  const rest = (W - MIN_UNIT) / (s.c - inside);
  return (c) => (c <= c0 ? c * rest : c <= c1 + 1 ? c0 * rest + ((c - c0) * MIN_UNIT) / inside : c0 * rest + MIN_UNIT + (c - c1 - 1) * rest);
}

/** One small oblique cube: front face C (across) by spatial (down), samples going back. */
export function cube(kind: NormKind, s: CubeSpec): SVGSVGElement {
  const nDraw = Math.max(1, Math.min(s.n, 16));
  const step = DEPTH / nDraw;
  const svg = el("svg", { viewBox: `0 0 ${W + DEPTH + 22} ${H + DEPTH + 14}`, class: "nw-cube-svg", role: "img" });
  svg.setAttribute("aria-label", describe(kind, s));
  const u = unit(kind, s);
  const x = axis(s, u.c0, u.c1);
  const spans: [number, number][] = [[0, u.c0 - 1], [u.c0, u.c1], [u.c1 + 1, s.c - 1]];
  const x0 = 14, y0 = DEPTH + 4;
  for (let n = nDraw - 1; n >= 0; n--) {
    const ox = x0 + n * step, oy = y0 - n * step;
    for (const [a, b] of spans) {
      if (b < a) continue;
      const cls = highlighted(kind, s, n, a) ? "nw-cube-on" : "nw-cube-off";
      const xa = ox + x(a), xb = ox + x(b + 1);
      const where = { "data-n": n, "data-c0": a, "data-c1": b };
      svg.appendChild(el("polygon", { class: cls, points: `${xa},${oy} ${xb},${oy} ${xb + step},${oy - step} ${xa + step},${oy - step}`, ...where }));
      svg.appendChild(el("rect", { class: cls, x: xa, y: oy, width: xb - xa, height: H, ...where }));
    }
    const xr = ox + W;
    const side = highlighted(kind, s, n, s.c - 1) ? "nw-cube-on" : "nw-cube-off";
    svg.appendChild(el("polygon", { class: `${side} nw-cube-side`, points: `${xr},${oy} ${xr + step},${oy - step} ${xr + step},${oy - step + H} ${xr},${oy + H}` }));
    svg.appendChild(el("rect", { class: "nw-cube-outline", x: ox, y: oy, width: W, height: H }));
  }
  // the groups as bands on the front face, where they are at least 3 units apart
  const cg = s.c / s.groups;
  for (let g = 1; g < s.groups; g++) {
    const gx = x0 + x(g * cg);
    if (x(g * cg) - x((g - 1) * cg) >= 3) svg.appendChild(el("line", { class: "nw-cube-band", x1: gx, y1: y0, x2: gx, y2: y0 + H }));
  }
  const t = (tx: number, ty: number, text: string, extra: Record<string, string | number> = {}): void => {
    const e = el("text", { x: tx, y: ty, class: "nw-cube-axis", ...extra });
    e.textContent = text;
    svg.appendChild(e);
  };
  t(x0 + W / 2, y0 + H + 9, "C", { "text-anchor": "middle" });
  t(x0 + W + DEPTH / 2 + 6, y0 - DEPTH / 2 + 2, "N");
  t(x0 - 1, y0 + H / 2, "H,W", { "text-anchor": "middle", transform: `rotate(-90 ${x0 - 1} ${y0 + H / 2})`, dy: -2 });
  return svg;
}

/** What a hovered part of the cube is: sample n, channels c0..c1, and whether it shares the selected statistics. */
export function cellInfo(kind: NormKind, s: CubeSpec, n: number, c0: number, c1: number): string {
  const cg = s.c / s.groups;
  const channels = c0 === c1 ? `channel ${c0}` : `channels ${c0}–${c1}`;
  const groups = kind === "group" ? ` (group ${Math.floor(c0 / cg)}${Math.floor(c1 / cg) !== Math.floor(c0 / cg) ? `–${Math.floor(c1 / cg)}` : ""})` : "";
  const shares = highlighted(kind, s, n, c0);
  const name = KINDS.find((k) => k.kind === kind)?.title(s) ?? kind;
  return `${name}: sample ${n}, ${channels}${groups}, all ${s.spatial} positions\n${shares ? "shares" : "does not share"} one mean and variance with the highlighted set`;
}
