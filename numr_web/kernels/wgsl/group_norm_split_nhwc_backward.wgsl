// GroupNorm backward, split plan for channels-last memory (C % 4 == 0): the cut of
// group_norm_split_nhwc.wgsl (a thread owns KQ <= 4 adjacent channel quads over a tile of
// positions of one sample) and the formulas of group_norm_backward.wgsl.
//
//   partials: per (sample, tile, quad) ds, db and sum xc_s, one lane per channel, to PART
//             (three vec4 per quad).  REFINE = true (SILU only): sum xc_s alone, for threads
//             with a lane whose group has |mean| rstd > REFINE_MEAN_ABOVE (the others exit),
//             to restore the mean's low part first.
//   combine:  one thread per group, channel by channel, tiles in order (fixed order, bitwise
//             repeatable): REFINE: zlo -> COEF.w; else per channel (ds, db) -> DSDB, then the
//             group's coefficients -> COEF = (c0, c1, mean_lo, zlo).
//   dx:       dx = s (w rstd_s dz + c1_s xc_s + c0_s) over the same cut, per-channel terms in registers.
// dweight and dbias come from DSDB and COEF (group_norm_dweight.wgsl), as for the other plans.
// Constants: NHWC = true, VEC = 4, SILU, AFFINE, WG, KQ, REFINE.  The combine entry point and
// dz: group_norm_split_grad.wgsl; the cut: group_norm_split_tiles.wgsl.
//!include group_norm_common.wgsl
//!include group_norm_coef.wgsl
//!include group_norm_split_tiles.wgsl
//!include group_norm_grad.wgsl
//!include group_norm_split_grad.wgsl
@group(0) @binding(0) var<storage, read> X: array<ST_X>;
@group(0) @binding(1) var<storage, read> DY: array<ST_DY>;
@group(0) @binding(2) var<storage, read_write> DX: array<ST_DX>;
@group(0) @binding(3) var<storage, read> W: array<f32>;
@group(0) @binding(4) var<storage, read> B: array<f32>;
@group(0) @binding(5) var<storage, read> MEAN: array<f32>;
@group(0) @binding(6) var<storage, read> RSTD: array<f32>;
@group(0) @binding(7) var<storage, read_write> WS: array<vec4<f32>>;  // workspace: PART from 0, DSDB at p.dsdb_at, COEF at p.coef_at
@group(0) @binding(8) var<uniform> p: Params;

// What quad q's lanes need, one lane per channel: xc_s = x * sc - ms; z = xc_s * scale + shift
// (SILU); dx = s (alpha * dz + c1 * xc_s + c0), alpha, c1 and c0 in units divided by s; go: some
// lane's group needs the REFINE sum.
struct Quad { sc: vec4<f32>, ms: vec4<f32>, scale: vec4<f32>, shift: vec4<f32>, alpha: vec4<f32>,
              c0: vec4<f32>, c1: vec4<f32>, go: bool }

fn quad_of(nl: u32, q: u32) -> Quad {
  let lg = lane_groups(nl, q);
  let mean = vec4<f32>(MEAN[lg.x], MEAN[lg.y], MEAN[lg.z], MEAN[lg.w]);
  let rstd = vec4<f32>(RSTD[lg.x], RSTD[lg.y], RSTD[lg.z], RSTD[lg.w]);
  var o: Quad;
  o.sc = rstd_scale4(rstd);
  o.ms = mean * o.sc;
  let c = 4u * q;
  let w = lane_w(c);
  o.scale = w * over_scale4(rstd, o.sc);
  o.alpha = o.scale;
  var zlo = vec4<f32>(0.0);
  if (SILU && !REFINE) {
    zlo = vec4<f32>(WS[p.coef_at + lg.x].w, WS[p.coef_at + lg.y].w, WS[p.coef_at + lg.z].w,
                    WS[p.coef_at + lg.w].w);
  }
  o.shift = lane_b(c) - zlo * o.scale;
  o.go = refine(mean.x, rstd.x) || refine(mean.y, rstd.y) || refine(mean.z, rstd.z) ||
         refine(mean.w, rstd.w);
  return o;
}

// quad_of plus the group coefficients c0, c1 (dx pass)
fn quad_dx(nl: u32, q: u32) -> Quad {
  var o = quad_of(nl, q);
  let lg = lane_groups(nl, q);
  let k = transpose(mat4x4<f32>(WS[p.coef_at + lg.x], WS[p.coef_at + lg.y], WS[p.coef_at + lg.z],
                                WS[p.coef_at + lg.w]));
  o.c0 = k[0];
  o.c1 = k[1];
  return o;
}

// One quad's step of the sums from its x and dy: columns 0 ds, 1 db, 2 sum xc_s (REFINE:
// column 2 only).
fn step_sums(acc: ptr<function, mat3x4<f32>>, x: vec4<f32>, dy: vec4<f32>, k: Quad) {
  let xc = x * k.sc - k.ms;
  (*acc)[2] += xc;
  if (!REFINE) {
    let dz = dz_of(dy, xc, k.scale, k.shift);
    (*acc)[0] += dz * xc;
    (*acc)[1] += dz;
  }
}

// x and dy of quads u and u + 1 (u even: quads in pairs, one 16-byte unit each with 16-bit
// _x8 storage); dy is not read in the REFINE pass
fn ld_pair(u: u32) -> mat4x4<f32> {
  let x = ld8_X(u >> 1u);
  var dy = mat2x4<f32>();
  if (!REFINE) { dy = ld8_DY(u >> 1u); }
  return mat4x4<f32>(x[0], x[1], dy[0], dy[1]);
}

// The KQ <= 4 quads of a thread are spelled out with constant indices (see
// group_norm_split_nhwc.wgsl); `if (KQ > j)` is a constant condition.
@compute @workgroup_size(WG)
fn partials(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
  let tid = thread_index(wid, nwg, lid);
  if (tid >= p.items) { return; }
  let cu = cut_of(tid);
  let Q = p.C >> 2u;
  let k0 = quad_of(cu.nl, cu.q0);
  var k1 = k0;
  var k2 = k0;
  var k3 = k0;
  if (KQ > 1u) { k1 = quad_of(cu.nl, cu.q0 + 1u); }
  if (KQ > 2u) {
    k2 = quad_of(cu.nl, cu.q0 + 2u);
    k3 = quad_of(cu.nl, cu.q0 + 3u);
  }
  if (REFINE && !(k0.go || k1.go || k2.go || k3.go)) { return; }
  var a0 = mat3x4<f32>();
  var a1 = mat3x4<f32>();
  var a2 = mat3x4<f32>();
  var a3 = mat3x4<f32>();
  var u = cu.u;
  for (var t = cu.t0; t < cu.t1; t++) {
    if (KQ > 1u) {
      let m = ld_pair(u);
      step_sums(&a0, m[0], m[2], k0);
      step_sums(&a1, m[1], m[3], k1);
      if (KQ > 2u) {
        let n = ld_pair(u + 2u);
        step_sums(&a2, n[0], n[2], k2);
        step_sums(&a3, n[1], n[3], k3);
      }
    } else {
      var dy = vec4<f32>();
      if (!REFINE) { dy = ld_DY(u); }
      step_sums(&a0, ld_X(u), dy, k0);
    }
    u += Q;
  }
  let slot = ((cu.nl * p.P + cu.pc) * Q + cu.q0) * 3u;
  for (var i = 0u; i < 3u; i++) {
    WS[slot + i] = a0[i];
    if (KQ > 1u) { WS[slot + 3u + i] = a1[i]; }
    if (KQ > 2u) {
      WS[slot + 6u + i] = a2[i];
      WS[slot + 9u + i] = a3[i];
    }
  }
}

// Channel c's partial component f (0 ds, 1 db, 2 xc_s) totalled over the tiles, in order,
// two-level (blocks of 32).
fn channel_total(nl: u32, c: u32, f: u32) -> f32 {
  let Q = p.C >> 2u;
  var s = 0.0;
  var pc = 0u;
  loop {
    if (pc >= p.P) { break; }
    let bend = min(pc + 32u, p.P);
    var b = 0.0;
    for (; pc < bend; pc++) { b += WS[((nl * p.P + pc) * Q + (c >> 2u)) * 3u + f][c & 3u]; }
    s += b;
  }
  return s;
}

// combine's totals (group_norm_split_grad.wgsl): channel j's (ds, db, sum xc_s); the group's
// sum xc_s channel by channel (REFINE)
fn channel_sums(gl: u32, j: u32) -> vec3<f32> {
  let nl = gl / p.G;
  let c = (p.g_first + gl) % p.G * p.Cg + j;
  return vec3<f32>(channel_total(nl, c, 0u), channel_total(nl, c, 1u), channel_total(nl, c, 2u));
}
fn group_resid(gl: u32) -> f32 {
  let nl = gl / p.G;
  let c0 = (p.g_first + gl) % p.G * p.Cg;
  var res = 0.0;
  for (var j = 0u; j < p.Cg; j++) { res += channel_total(nl, c0 + j, 2u); }
  return res;
}

fn dx_of(x: vec4<f32>, dy: vec4<f32>, k: Quad) -> vec4<f32> {
  let xc = x * k.sc - k.ms;
  return times_pow2_4(k.alpha * dz_of(dy, xc, k.scale, k.shift) + k.c1 * xc + k.c0, k.sc);
}

// dx_of for quads in unscaled units (k.sc == 1: nothing is rescaled, nothing can turn subnormal).
fn dx_plain(x: vec4<f32>, dy: vec4<f32>, k: Quad) -> vec4<f32> {
  let xc = x - k.ms;
  return k.alpha * dz_of(dy, xc, k.scale, k.shift) + k.c1 * xc + k.c0;
}

// The thread's steps [t0, t1) from element u: dx_of where `scaled` (a literal at each call site), else dx_plain.
fn dx_steps(t0: u32, t1: u32, u0: u32, k0: Quad, k1: Quad, k2: Quad, k3: Quad, scaled: bool) -> u32 {
  let Q = p.C >> 2u;
  var u = u0;
  for (var t = t0; t < t1; t++) {
    if (KQ > 1u) {  // quads in pairs, as in partials
      let m = ld_pair(u);
      if (scaled) {
        st8_DX(u >> 1u, mat2x4<f32>(dx_of(m[0], m[2], k0), dx_of(m[1], m[3], k1)));
      } else {
        st8_DX(u >> 1u, mat2x4<f32>(dx_plain(m[0], m[2], k0), dx_plain(m[1], m[3], k1)));
      }
      if (KQ > 2u) {
        let n = ld_pair(u + 2u);
        if (scaled) {
          st8_DX((u >> 1u) + 1u, mat2x4<f32>(dx_of(n[0], n[2], k2), dx_of(n[1], n[3], k3)));
        } else {
          st8_DX((u >> 1u) + 1u, mat2x4<f32>(dx_plain(n[0], n[2], k2), dx_plain(n[1], n[3], k3)));
        }
      }
    } else if (scaled) {
      st_DX(u, dx_of(ld_X(u), ld_DY(u), k0));
    } else {
      st_DX(u, dx_plain(ld_X(u), ld_DY(u), k0));
    }
    u += Q;
  }
  return u;
}

@compute @workgroup_size(WG)
fn dx(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
      @builtin(local_invocation_index) lid: u32) {
  let tid = thread_index(wid, nwg, lid);
  if (tid >= p.items) { return; }
  let cu = cut_of(tid);
  let k0 = quad_dx(cu.nl, cu.q0);
  var k1 = k0;
  var k2 = k0;
  var k3 = k0;
  if (KQ > 1u) { k1 = quad_dx(cu.nl, cu.q0 + 1u); }
  if (KQ > 2u) {
    k2 = quad_dx(cu.nl, cu.q0 + 2u);
    k3 = quad_dx(cu.nl, cu.q0 + 3u);
  }
  // rescaled quads' steps (none where every lane's sc is 1), then plain ones: two loops, not a branch
  // in one (SwiftShader runs a branch's body for every lane, masked: group_norm_pow2.wgsl)
  let one = vec4<f32>(1.0);
  let plain = all(k0.sc == one) && all(k1.sc == one) && all(k2.sc == one) && all(k3.sc == one);
  let t_scaled = select(cu.t1, cu.t0, plain);
  let u = dx_steps(cu.t0, t_scaled, cu.u, k0, k1, k2, k3, true);
  dx_steps(t_scaled, cu.t1, u, k0, k1, k2, k3, false);
}
