// What the numbers mean: g = dL/dx̂ from the results, and when dx is zero up to rounding (and why).
import { at } from "./dom";
import { groupValues, type Store } from "./store";

/** Unit roundoff of float32, in which every dtype's statistics and gradients are accumulated. */
export const ACC_UNIT = 2 ** -24;
/** How many units of rounding, times √M, a value of dx may hold from rounding alone. */
const ROUNDING_UNITS = 8;

/** g = dL/dx̂ of an element of channel `ch` (dy·w, times SiLU′(x̂·w + b) when SiLU is on), with the kernel's w and b. */
export function upstream(store: Store): (ch: number, xh: number, dyk: number) => number {
  const weight = store.results.get("weight")?.data, bias = store.results.get("bias")?.data;
  const silu = Boolean(store.param("silu"));
  return (ch, xh, dyk) => {
    const w = weight ? at(weight, ch) : 1, b = bias ? at(bias, ch) : 0;
    let gk = dyk * w;
    if (silu) {
      const z = xh * w + b;
      const sg = 1 / (1 + Math.exp(-z));
      gk *= sg * (1 + z * (1 - sg));
    }
    return gk;
  };
}

export interface Zero {
  /** per (n, g): 1 where every |dx| of the group is within rounding of zero */
  zero: Uint8Array;
  /** per (n, g): the size below which dx is rounding (8·u·√M·rstd·max|g|·(1 + max|x̂|), u = 2⁻²⁴) */
  floor: Float64Array;
  /** every group is zero up to rounding */
  all: boolean;
  /** the largest |dx| of the groups called zero */
  worst: number;
  /** why dx is zero, in words (when `all`) */
  reason: string;
}

interface GroupScan {
  floor: number;
  gmin: number;
  gmax: number;
  dymax: number;
}

function scanGroup(store: Store, n: number, g: number): GroupScan | null {
  const geo = store.geo;
  if (geo === null) return null;
  const xs = groupValues(geo, store.results.get("x"), n, g), dys = groupValues(geo, store.results.get("dy"), n, g);
  if (xs === null || dys === null) return null;
  const i = n * geo.g + g;
  const mu = at(store.results.get("mean")?.data, i), rs = at(store.results.get("rstd")?.data, i);
  const up = upstream(store);
  let gmin = Infinity, gmax = -Infinity, xmax = 0, dymax = 0;
  for (let c = 0; c < geo.cg; c++) {
    const ch = g * geo.cg + c;
    for (let k = c * geo.s; k < (c + 1) * geo.s; k++) {
      const xh = ((xs[k] ?? NaN) - mu) * rs;
      const dyk = dys[k] ?? NaN;
      const gk = up(ch, xh, dyk);
      if (gk < gmin) gmin = gk;
      if (gk > gmax) gmax = gk;
      if (Math.abs(xh) > xmax) xmax = Math.abs(xh);
      if (Math.abs(dyk) > dymax) dymax = Math.abs(dyk);
    }
  }
  const gabs = Math.max(Math.abs(gmin), Math.abs(gmax));
  const floor = ROUNDING_UNITS * ACC_UNIT * Math.sqrt(xs.length) * rs * gabs * (1 + xmax);
  return { floor, gmin, gmax, dymax };
}

/** Which groups' dx are zero up to float32 rounding. Groups of samples that were not sent are judged by their
 *  ‖dx‖ against the largest floor of the sent ones. */
export function dxZero(store: Store): Zero {
  return store.cached("dxZero", () => {
    const geo = store.geo;
    const count = geo ? geo.n * geo.g : 0;
    const zero = new Uint8Array(count), floor = new Float64Array(count);
    const dx = store.results.get("dx"), norm = store.results.get("dx_norm")?.data;
    let all = count > 0, worst = 0, anyDy = false, constant = true, sentFloor = 0;
    for (let n = 0; geo && n < geo.n; n++)
      for (let g = 0; g < geo.g; g++) {
        const i = n * geo.g + g;
        const scan = scanGroup(store, n, g);
        const vals = groupValues(geo, dx, n, g);
        let big = 0;
        if (scan && vals) {
          for (const v of vals) big = Math.max(big, Math.abs(v));
          floor[i] = scan.floor;
          sentFloor = Math.max(sentFloor, scan.floor);
          anyDy ||= scan.dymax > 0;
          constant &&= scan.gmax - scan.gmin <= 1e-6 * Math.max(Math.abs(scan.gmax), Math.abs(scan.gmin));
        } else {
          floor[i] = sentFloor * Math.sqrt(geo.cg * geo.s);
          big = at(norm, i);
        }
        zero[i] = big <= floor[i] ? 1 : 0;
        if (zero[i]) worst = Math.max(worst, big);
        else all = false;
      }
    let reason = "every value is below the rounding of the terms it is computed from";
    if (!anyDy) reason = String(store.param("grad_mode")) === "painted" ? "dy = 0: nothing is painted yet" : "dy = 0";
    else if (constant) reason = "dy·w is the same for every element of a group, so the loss changes with x only through Σx̂, which is 0 in every group";
    return { zero, floor, all, worst, reason };
  });
}

/** The sentence a view shows for dx = 0 (or null when dx is not zero everywhere). */
export function zeroSentence(store: Store): string | null {
  const z = dxZero(store);
  if (!z.all) return null;
  return `dx = 0 up to float32 rounding (every |dx| ≤ ${z.worst === 0 ? "0" : z.worst.toExponential(1)}), because ${z.reason}.`;
}
