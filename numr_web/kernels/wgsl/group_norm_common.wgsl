// Shared by group_norm_forward.wgsl and group_norm_backward.wgsl.
//
// Constants spliced in by the launcher: NHWC (bool), VEC (1u or 4u),
// APPLY (bool: also write the elementwise output in the same workgroup),
// SILU (bool), AFFINE (bool), WG (workgroup size).
//
// One workgroup handles one (n, g) group.  The group is cut into "items": an
// item is one channel (or, channels-last with VEC = 4, a quad of adjacent
// channels) over a contiguous piece of the spatial positions.  Each thread
// walks whole items from front to back (contiguous per-thread ranges: software
// adapters run each SIMD batch through its whole loop, so GPU-style strided
// loops become strided streams there), and a second sweep over the same items
// finds them still in cache.
struct Params {
  C: u32, HW: u32, G: u32, Cg: u32,
  A: u32,        // items per piece: channels (VEC = 1 or NCHW) or channel quads (NHWC, VEC = 4)
  P: u32,        // pieces per channel row
  items: u32,    // A * P
  steps: u32,    // steps along one row: NCHW HW / VEC, NHWC HW
  x_base: u32,   // element offset of this chunk's first element inside the binding
  g_first: u32,  // global (n * G + g) index of the chunk's first group
  ngroups: u32,  // groups in this chunk
  M: u32,        // elements per group
  eps: f32,
  inv_m: f32,
  dsdb_at: u32,  // backward: where DSDB starts in WS (vec4s)
  coef_at: u32,  // backward: where COEF starts in WS (vec4s)
}

// Lanes of a vec4 are 4 channels (channels-last quads) rather than 4 positions of one channel.
const LANES_CH: bool = NHWC && (VEC == 4u);
// With VEC = 1 only lane x carries data.
const LMASK: vec4<f32> = select(vec4<f32>(1.0, 0.0, 0.0, 0.0), vec4<f32>(1.0), VEC == 4u);

struct Item { base: u32, tstride: u32, t0: u32, t1: u32, ch: u32 }

fn item_of(it: u32, gl: u32, n: u32, g: u32) -> Item {
  var a: u32;
  var pc: u32;
  if (NHWC) { pc = it / p.A; a = it % p.A; } else { a = it / p.P; pc = it % p.P; }
  let q = p.steps / p.P;
  let r = p.steps % p.P;
  let t0 = pc * q + min(pc, r);
  let t1 = t0 + q + select(0u, 1u, pc < r);
  var out: Item;
  out.t0 = t0;
  out.t1 = t1;
  if (NHWC) {
    let nl = n - p.g_first / p.G;
    out.base = p.x_base + nl * p.HW * p.C + g * p.Cg + a * VEC;
    out.tstride = p.C;
    out.ch = g * p.Cg + a * VEC;
  } else {
    out.base = p.x_base + gl * p.M + a * p.HW;
    out.tstride = VEC;
    out.ch = g * p.Cg + a;
  }
  return out;
}

// Per-lane affine parameters of an item (all lanes equal unless LANES_CH).
fn lane_w(c: u32) -> vec4<f32> {
  if (!AFFINE) { return vec4<f32>(1.0); }
  if (LANES_CH) { return vec4<f32>(W[c], W[c + 1u], W[c + 2u], W[c + 3u]); }
  return vec4<f32>(W[c]);
}
fn lane_b(c: u32) -> vec4<f32> {
  if (!AFFINE) { return vec4<f32>(0.0); }
  if (LANES_CH) { return vec4<f32>(B[c], B[c + 1u], B[c + 2u], B[c + 3u]); }
  return vec4<f32>(B[c]);
}

fn silu(z: vec4<f32>) -> vec4<f32> { return z / (1.0 + exp(-z)); }

// y from x with a group's statistics in scaled units (hs = mean_hi * s) and a lane's scale and shift
// (the split and thread kernels' output)
fn y_scaled(x: vec4<f32>, sc: f32, hs: f32, scale: vec4<f32>, shift: vec4<f32>) -> vec4<f32> {
  let y = (x * sc - hs) * scale + shift;
  if (SILU) { return silu(y); }
  return y;
}

// A quiet NaN, from values of which one is NaN or infinite (a runtime value: a NaN constant
// expression is a shader-creation error in WGSL).
fn nan_of(a: f32, b: f32) -> f32 {
  return bitcast<f32>(0x7fc00000u | (bitcast<u32>(a) & bitcast<u32>(b) & 0x80000000u));
}
