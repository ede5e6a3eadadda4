// Colour scales: viridis for one-signed values, red-blue around zero for signed ones, grey for NaN.
import { interpolateRdBu, interpolateViridis } from "d3-scale-chromatic";

/** d3's interpolators give "#rrggbb" or "rgb(r, g, b)". */
export function parseColor(css: string): [number, number, number] {
  const hex = /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(css);
  if (hex) return [parseInt(hex[1] ?? "0", 16), parseInt(hex[2] ?? "0", 16), parseInt(hex[3] ?? "0", 16)];
  const m = /rgb\((\d+), ?(\d+), ?(\d+)\)/.exec(css);
  return m ? [Number(m[1]), Number(m[2]), Number(m[3])] : [255, 0, 255];
}

/** 256 packed RGBA colours (little-endian ABGR words, for ImageData through a Uint32Array) and grey at 256. */
function lut(interp: (t: number) => string): Uint32Array {
  const out = new Uint32Array(257);
  for (let k = 0; k < 256; k++) {
    const [r, g, b] = parseColor(interp(k / 255));
    out[k] = (255 << 24) | (b << 16) | (g << 8) | r;
  }
  out[256] = (255 << 24) | (128 << 16) | (128 << 8) | 128;
  return out;
}
export const VIRIDIS = lut(interpolateViridis);
export const RDBU = lut((t) => interpolateRdBu(1 - t));

export function extent(a: ArrayLike<number>): [number, number] {
  let lo = Infinity, hi = -Infinity;
  for (let i = 0; i < a.length; i++) {
    const v = a[i] ?? NaN;
    if (Number.isFinite(v)) {
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  }
  return lo <= hi ? [lo, hi] : [0, 0];
}

export interface Scale {
  lo: number;
  hi: number;
  diverging: boolean;
  /** the colour table index of a value (256: not finite) */
  index: (v: number) => number;
  words: Uint32Array;
  /** the values all lie within rounding of one value: drawn in one colour */
  flat: boolean;
}

/** A scale over `vals`: red-blue symmetric about 0 where they change sign, viridis otherwise. A spread of values
 *  smaller than `noise` (float rounding, not a signal) is not stretched to full contrast: it is drawn flat; the
 *  scale spans at least `minSpan`. */
export function scaleOf(vals: ArrayLike<number>, noise = 0, forceDiverging = false, minSpan = 0): Scale {
  const [lo, hi] = extent(vals);
  const diverging = forceDiverging || (lo < 0 && hi > 0);
  const m = Math.max(Math.abs(lo), Math.abs(hi));
  const floor = Math.max(noise, 1e-6 * m);
  // `minSpan`: values of a known size (a normalized y is about ±2) are not stretched when they are much smaller
  const bound = Math.max(m, noise, minSpan / 2);
  const [a, b] = diverging ? [-bound, bound] : [lo, Math.max(hi, lo + minSpan)];
  const flat = diverging ? m <= noise : hi - lo <= floor;
  const span = !flat && b > a ? 255 / (b - a) : 0;
  const words = diverging ? RDBU : VIRIDIS;
  const index = (v: number): number => (Number.isFinite(v) ? (span > 0 ? Math.round(Math.min(255, Math.max(0, (v - a) * span))) : diverging ? 128 : 128) : 256);
  return { lo, hi, diverging, index, words, flat };
}

export function cssColor(word: number): string {
  return `rgb(${word & 255},${(word >>> 8) & 255},${(word >>> 16) & 255})`;
}
