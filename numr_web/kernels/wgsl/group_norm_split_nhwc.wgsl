// GroupNorm forward, split plan for channels-last memory ((N, *spatial, C) contiguous,
// C % 4 == 0): barrier-free dispatches in place of one workgroup per block of groups.
//
// A chunk holds whole samples; a sample's rows (one per spatial position) hold Q = C / 4
// channel quads.  Threads own KQ adjacent quads (a quad block) over a tile of consecutive
// positions of one sample, so that every step reads KQ * 16 contiguous bytes and the lanes of a
// SIMD batch (adjacent quad blocks) read adjacent bytes of the same row; the four lanes of a
// vec4 are four channels, each with its own group (K, scale).
//
//   partials: per (sample, tile, quad) the shifted sums (S1, S2), one lane per channel, to PART
//             (two vec4 per quad), shift K = the group's first element.
//   combine:  one thread per group totals its channels' lanes over the tiles (channel by
//             channel, tiles in order: fixed order, no atomics) and finishes the statistics
//             with group_norm_stats.wgsl, as the fused kernel does.  A group that needs a second
//             sum is summed again by its combine thread when INLINE_REDO (small groups), else
//             marked in AUX (w < 0: (k1, 0, 0, -s)) for the FIX passes (partials and combine
//             again; threads and groups with nothing marked exit at once).
//   apply:    y over the same (sample, tile, quad block) cut, per-channel scale and shift held
//             in registers: y = (x s - mean_hi s) * (w rstd_s) + (b - mean_lo_s w rstd_s).
//
// Params (group_norm_common.wgsl): A = quad blocks per row (Q / KQ), P = tiles per sample,
// items = threads of the chunk (samples * P * A), steps = positions per tile (the longest).
// Constants: NHWC = true, VEC = 4, SILU, AFFINE, WG, KQ, FIX, INLINE_REDO.
//!include group_norm_common.wgsl
//!include group_norm_stats.wgsl
//!include group_norm_split_tiles.wgsl
//!include group_norm_split_stats.wgsl
@group(0) @binding(0) var<storage, read> X: array<ST_X>;
@group(0) @binding(1) var<storage, read_write> Y: array<ST_Y>;
@group(0) @binding(2) var<storage, read> W: array<f32>;
@group(0) @binding(3) var<storage, read> B: array<f32>;
@group(0) @binding(4) var<storage, read_write> MEAN: array<f32>;
@group(0) @binding(5) var<storage, read_write> RSTD: array<f32>;
@group(0) @binding(6) var<storage, read_write> AUX: array<vec4<f32>>;   // (mean_hi, mean_lo_s, rstd_s, s) per group
@group(0) @binding(7) var<storage, read_write> PART: array<vec4<f32>>;  // (S1, S2) per (sample, tile, quad)
@group(0) @binding(8) var<uniform> p: Params;

fn x_at(e: u32) -> f32 { return ld_X(e >> 2u)[e & 3u]; }

// The group's shift K and scale: its first element and 1, or (FIX) the marked redo's.
// Returns (k, s, go): go = 0 when FIX and the group needs no second sum.
fn shift_of(gg: u32) -> vec3<f32> {
  if (FIX) { return marked_shift(gg); }
  let gl = gg - p.g_first;
  let nl = gl / p.G;
  return vec3<f32>(x_at(p.x_base + nl * p.HW * p.C + (gl % p.G) * p.Cg), 1.0, 1.0);
}

// Shift and scale of quad q's lanes: (k * s, s) one lane per channel, and go (FIX: any lane marked).
struct QuadShift { ks: vec4<f32>, sc: vec4<f32>, go: f32 }

fn quad_shift(nl: u32, q: u32) -> QuadShift {
  let lg = lane_groups(nl, q);
  let a = shift_of(lg.x);
  let b = shift_of(lg.y);
  let c = shift_of(lg.z);
  let d = shift_of(lg.w);
  var o: QuadShift;
  o.sc = vec4<f32>(a.y, b.y, c.y, d.y);
  o.ks = vec4<f32>(a.x, b.x, c.x, d.x) * o.sc;
  o.go = max(max(a.z, b.z), max(c.z, d.z));
  return o;
}

// The KQ <= 4 quads of a thread are spelled out with constant indices (columns of mat4x4
// values): a loop over them with a runtime index kept the accumulators in per-lane memory on
// lavapipe.  `if (KQ > j)` is a constant condition.
@compute @workgroup_size(WG)
fn partials(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
  let tid = thread_index(wid, nwg, lid);
  if (tid >= p.items) { return; }
  let cu = cut_of(tid);
  let Q = p.C >> 2u;
  let h0 = quad_shift(cu.nl, cu.q0);
  var h1 = h0;
  var h2 = h0;
  var h3 = h0;
  if (KQ > 1u) { h1 = quad_shift(cu.nl, cu.q0 + 1u); }
  if (KQ > 2u) {
    h2 = quad_shift(cu.nl, cu.q0 + 2u);
    h3 = quad_shift(cu.nl, cu.q0 + 3u);
  }
  if (max(max(h0.go, h1.go), max(h2.go, h3.go)) == 0.0) { return; }
  var s1 = mat4x4<f32>();
  var s2 = mat4x4<f32>();
  // two-level sums (blocks of 32 positions), as in the fused kernel
  var t = cu.t0;
  var u = cu.u;
  loop {
    if (t >= cu.t1) { break; }
    let tend = min(t + 32u, cu.t1);
    var b1 = mat4x4<f32>();
    var b2 = mat4x4<f32>();
    for (; t < tend; t++) {
      // quads in pairs (8 elements, one 16-byte unit with 16-bit _x8 storage): u is even
      // whenever KQ is (Q even, x_base a multiple of 8)
      var x0: vec4<f32>;
      var x1: vec4<f32>;
      if (KQ > 1u) {
        let m = ld8_X(u >> 1u);
        x0 = m[0];
        x1 = m[1];
      } else {
        x0 = ld_X(u);
      }
      let d0 = x0 * h0.sc - h0.ks;
      b1[0] += d0;
      b2[0] += d0 * d0;
      if (KQ > 1u) {
        let d1 = x1 * h1.sc - h1.ks;
        b1[1] += d1;
        b2[1] += d1 * d1;
      }
      if (KQ > 2u) {
        let m = ld8_X((u >> 1u) + 1u);
        let d2 = m[0] * h2.sc - h2.ks;
        b1[2] += d2;
        b2[2] += d2 * d2;
        let d3 = m[1] * h3.sc - h3.ks;
        b1[3] += d3;
        b2[3] += d3 * d3;
      }
      u += Q;
    }
    s1 += b1;
    s2 += b2;
  }
  let slot = ((cu.nl * p.P + cu.pc) * Q + cu.q0) * 2u;
  PART[slot] = s1[0];
  PART[slot + 1u] = s2[0];
  if (KQ > 1u) {
    PART[slot + 2u] = s1[1];
    PART[slot + 3u] = s2[1];
  }
  if (KQ > 2u) {
    PART[slot + 4u] = s1[2];
    PART[slot + 5u] = s2[2];
    PART[slot + 6u] = s1[3];
    PART[slot + 7u] = s2[3];
  }
}

@compute @workgroup_size(WG)
fn combine(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
  let gl = thread_index(wid, nwg, lid);
  if (gl >= p.ngroups) { return; }
  let ks = shift_of(p.g_first + gl);
  if (ks.z == 0.0) { return; }
  let Q = p.C >> 2u;
  let nl = gl / p.G;
  let c0 = (gl % p.G) * p.Cg;
  // two-level sums (blocks of 32) over channel-by-channel, tile-by-tile partials
  var s = vec2<f32>(0.0);
  let count = p.Cg * p.P;
  var i = 0u;
  loop {
    if (i >= count) { break; }
    let bend = min(i + 32u, count);
    var b = vec2<f32>(0.0);
    for (; i < bend; i++) {
      let c = c0 + i / p.P;
      let slot = ((nl * p.P + i % p.P) * Q + (c >> 2u)) * 2u;
      b += vec2<f32>(PART[slot][c & 3u], PART[slot + 1u][c & 3u]);
    }
    s += b;
  }
  finish_group(gl, ks, s);
}

// A group's second sum (finish_group), by its combine thread: (S1, S2) of x sc - k, scalar
// loads, position by position.
fn redo_sums(gl: u32, k: f32, sc: f32) -> vec2<f32> {
  let e0 = p.x_base + gl / p.G * p.HW * p.C + (gl % p.G) * p.Cg;
  var t1 = 0.0;
  var t2 = 0.0;
  for (var t = 0u; t < p.HW; t++) {
    var b1 = 0.0;
    var b2 = 0.0;
    for (var ch = 0u; ch < p.Cg; ch++) {
      let d = x_at(e0 + t * p.C + ch) * sc - k;
      b1 += d;
      b2 += d * d;
    }
    t1 += b1;
    t2 += b2;
  }
  return vec2<f32>(t1, t2);
}

// y = (x s - mean_hi s) * scale + shift, lanes per channel: (s, mean_hi s, scale, shift) of quad q
fn quad_coef(nl: u32, q: u32) -> mat4x4<f32> {
  let lg = lane_groups(nl, q);
  let r = transpose(mat4x4<f32>(AUX[lg.x], AUX[lg.y], AUX[lg.z], AUX[lg.w]));
  let c = 4u * q;
  let scale = lane_w(c) * r[2];
  return mat4x4<f32>(r[3], r[0] * r[3], scale, lane_b(c) - r[1] * scale);
}

fn y_of(x: vec4<f32>, k: mat4x4<f32>) -> vec4<f32> {
  let y = (x * k[0] - k[1]) * k[2] + k[3];
  if (SILU) { return silu(y); }
  return y;
}

@compute @workgroup_size(WG)
fn apply(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
  let tid = thread_index(wid, nwg, lid);
  if (tid >= p.items) { return; }
  let cu = cut_of(tid);
  let Q = p.C >> 2u;
  let k0 = quad_coef(cu.nl, cu.q0);
  var k1 = k0;
  var k2 = k0;
  var k3 = k0;
  if (KQ > 1u) { k1 = quad_coef(cu.nl, cu.q0 + 1u); }
  if (KQ > 2u) {
    k2 = quad_coef(cu.nl, cu.q0 + 2u);
    k3 = quad_coef(cu.nl, cu.q0 + 3u);
  }
  var u = cu.u;
  for (var t = cu.t0; t < cu.t1; t++) {
    if (KQ > 1u) {  // quads in pairs, as in partials
      let m = ld8_X(u >> 1u);
      st8_Y(u >> 1u, mat2x4<f32>(y_of(m[0], k0), y_of(m[1], k1)));
      if (KQ > 2u) {
        let n = ld8_X((u >> 1u) + 1u);
        st8_Y((u >> 1u) + 1u, mat2x4<f32>(y_of(n[0], k2), y_of(n[1], k3)));
      }
    } else {
      st_Y(u, y_of(ld_X(u), k0));
    }
    u += Q;
  }
}
