// The (N, C, spatial) cube of Wu & He's Figure 2: which elements share one mean and variance.
const SVG = "http://www.w3.org/2000/svg";

export type NormKind = "batch" | "layer" | "instance" | "group";

export interface CubeSpec {
  n: number; // batch size
  c: number; // channels
  groups: number;
  spatial: number; // number of spatial positions
  sel: [number, number]; // (n, g)
}

export const KINDS: { kind: NormKind; title: (s: CubeSpec) => string }[] = [
  { kind: "batch", title: () => "BatchNorm" },
  { kind: "layer", title: () => "LayerNorm (G = 1)" },
  { kind: "instance", title: () => "InstanceNorm (G = C)" },
  { kind: "group", title: (s) => `GroupNorm (G = ${s.groups})` },
];

function highlighted(kind: NormKind, s: CubeSpec, n: number, c: number): boolean {
  const cg = s.c / s.groups;
  const [sn, sg] = s.sel;
  const sc = sg * cg; // the selected group's first channel stands for "the channel" under IN and BN
  switch (kind) {
    case "group":
      return n === sn && Math.floor(c / cg) === sg;
    case "layer":
      return n === sn;
    case "instance":
      return n === sn && c === sc;
    case "batch":
      return c === sc;
  }
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

/** One small oblique cube: front face C (across) by spatial (down), samples going back. */
export function cube(kind: NormKind, s: CubeSpec): SVGSVGElement {
  const W = 96, H = 64, depth = 36;
  const nDraw = Math.max(1, Math.min(s.n, 16));
  const step = depth / nDraw;
  const svg = el("svg", { viewBox: `0 0 ${W + depth + 22} ${H + depth + 14}`, width: W + depth + 22, height: H + depth + 14, role: "img" });
  svg.setAttribute("aria-label", describe(kind, s));
  // at most 32 drawn columns: a column stands for `per` consecutive channels and lights up if any of them does
  const cols = Math.min(s.c, 32);
  const per = Math.ceil(s.c / cols);
  const lit = (n: number, col: number): boolean => {
    for (let c = col * per; c < Math.min(s.c, (col + 1) * per); c++) if (highlighted(kind, s, n, c)) return true;
    return false;
  };
  const cw = W / cols;
  const x0 = 14, y0 = depth + 4;
  for (let n = nDraw - 1; n >= 0; n--) {
    const ox = x0 + n * step, oy = y0 - n * step;
    for (let c = 0; c < cols; c++) {
      const cls = lit(n, c) ? "nw-cube-on" : "nw-cube-off";
      const x = ox + c * cw;
      // top face strip, then front face column
      const where = { "data-n": n, "data-c0": c * per, "data-c1": Math.min(s.c, (c + 1) * per) - 1 };
      svg.appendChild(el("polygon", { class: cls, points: `${x},${oy} ${x + cw},${oy} ${x + cw + step},${oy - step} ${x + step},${oy - step}`, ...where }));
      svg.appendChild(el("rect", { class: cls, x, y: oy, width: cw, height: H, ...where }));
    }
    // right side face of the slab
    const xr = ox + W;
    const cls = lit(n, cols - 1) ? "nw-cube-on" : "nw-cube-off";
    svg.appendChild(el("polygon", { class: `${cls} nw-cube-side`, points: `${xr},${oy} ${xr + step},${oy - step} ${xr + step},${oy - step + H} ${xr},${oy + H}` }));
    svg.appendChild(el("rect", { class: "nw-cube-outline", x: ox, y: oy, width: W, height: H }));
  }
  const t = (x: number, y: number, text: string, extra: Record<string, string | number> = {}): void => {
    const e = el("text", { x, y, class: "nw-cube-axis", ...extra });
    e.textContent = text;
    svg.appendChild(e);
  };
  t(x0 + W / 2, y0 + H + 9, "C", { "text-anchor": "middle" });
  t(x0 + W + depth / 2 + 6, y0 - depth / 2 + 2, "N");
  t(x0 - 1, y0 + H / 2, "H,W", { "text-anchor": "middle", transform: `rotate(-90 ${x0 - 1} ${y0 + H / 2})`, dy: -2 });
  return svg;
}

/** What a hovered column of the cube is: sample n, channels c0..c1, and whether it shares the selected statistics. */
export function cellInfo(kind: NormKind, s: CubeSpec, n: number, c0: number, c1: number): string {
  const cg = s.c / s.groups;
  const channels = c0 === c1 ? `channel ${c0}` : `channels ${c0}–${c1}`;
  const groups = kind === "group" ? ` (group ${Math.floor(c0 / cg)}${Math.floor(c1 / cg) !== Math.floor(c0 / cg) ? `–${Math.floor(c1 / cg)}` : ""})` : "";
  let shares = false;
  for (let c = c0; c <= c1; c++) if (highlighted(kind, s, n, c)) shares = true;
  const name = KINDS.find((k) => k.kind === kind)?.title(s) ?? kind;
  return `${name}: sample ${n}, ${channels}${groups}, all ${s.spatial} positions\n${shares ? "shares" : "does not share"} one mean and variance with the highlighted set`;
}
