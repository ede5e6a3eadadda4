// GroupNorm backward, closed form from the saved mean and rstd, one workgroup
// per (n, g).  See group_norm_common.wgsl for the item decomposition.
//
// With xc = x - mean and dz = dy (or dy * silu'(z), z = rstd*w*xc + b); every sum is taken
// on xc_s = x * s - mean * s, s = rstd_scale(rstd) (group_norm_coef.wgsl; 1 for ordinary
// rstd), and mean_lo, ds and COEF's c1 are in those units:
//   per (n, c): ds = sum dz*xc, db = sum dz            -> DSDB (for dweight, dbias)
//   per (n, g): sg = sum_c w_c db, sgx = sum_c w_c ds, and mean_lo: the part of
//     the mean the float32-saved value lost, sum(xc)/M, trusted only within one
//     ulp of the saved mean (statistics a caller passes on purpose stay as given)
//   b = rstd (sgx - mean_lo sg) / M, a = sg / M
//   dx = rstd*w_c*dz + c1*xc + c0, c1 = -rstd^2 b, c0 = rstd^2 b mean_lo - rstd a
//   -> COEF = (c0, c1, mean_lo, zlo); dweight_c = sum_n rstd (ds - mean_lo db)
// With SILU and |mean| * rstd > REFINE_MEAN_ABOVE a first pass over the group's x finds
// mean_lo before z is rebuilt: shift = b - zlo * scale, zlo = mean_lo (else 0).
// Item partials go through global memory (PART), so any channel count works;
// every sum has a fixed order (deterministic, no atomics).
//!include group_norm_common.wgsl
//!include group_norm_coef.wgsl
//!include group_norm_grad.wgsl
//!include group_norm_backward_io.wgsl

var<workgroup> wg_coef: vec2<f32>;
var<workgroup> wg_res: array<f32, WG>;
var<workgroup> wg_zlo: f32;

// Per-thread sum of x * s - mean * s over the thread's items, in the order of the sums pass.
fn resid_part(lid: u32, gl: u32, n: u32, g: u32, ms: f32, s: f32) -> vec4<f32> {
  var res = vec4<f32>(0.0);
  for (var it = lid; it < p.items; it += WG) {
    let I = item_of(it, gl, n, g);
    for (var t = I.t0; t < I.t1; t++) {
      res += (load_x(I.base + t * I.tstride) * s - ms) * LMASK;
    }
  }
  return res;
}

// The workgroup's sum of its threads' wg_res entries, by thread 0, in thread order.
fn wg_total() -> f32 {
  var s = 0.0;
  for (var i = 0u; i < WG; i++) { s += wg_res[i]; }
  return s;
}

fn load_x(e: u32) -> vec4<f32> {
  if (VEC == 4u) { return ld_X(e >> 2u); }
  return vec4<f32>(ld_X(e >> 2u)[e & 3u], 0.0, 0.0, 0.0);
}
fn load_dy(e: u32) -> vec4<f32> {
  if (VEC == 4u) { return ld_DY(e >> 2u); }
  return vec4<f32>(ld_DY(e >> 2u)[e & 3u], 0.0, 0.0, 0.0);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let gl = wid.y * nwg.x + wid.x;
  if (gl >= p.ngroups) { return; }
  let gg = p.g_first + gl;
  let gr = grad_group(gg);

  var zlo = 0.0;  // scaled units
  if (SILU) {
    if (lid == 0u) { wg_zlo = select(0.0, 1.0, refine(gr.mean, gr.rstd)); }
    if (workgroupUniformLoad(&wg_zlo) != 0.0) {
      wg_res[lid] = dot(resid_part(lid, gl, gr.n, gr.g, gr.ms, gr.sc), vec4<f32>(1.0));
      workgroupBarrier();
      if (lid == 0u) { wg_zlo = mean_low_part(gr.mean, wg_total(), p.inv_m, gr.sc); }
      zlo = workgroupUniformLoad(&wg_zlo);
    }
  }

  var res = vec4<f32>(0.0);
  for (var it = lid; it < p.items; it += WG) {
    let I = item_of(it, gl, gr.n, gr.g);
    let scale = lane_w(I.ch) * gr.rstd_s;
    let shift = lane_b(I.ch) - zlo * scale;
    var ds = vec4<f32>(0.0);
    var db = vec4<f32>(0.0);
    for (var t = I.t0; t < I.t1; t++) {
      let e = I.base + t * I.tstride;
      let xc = load_x(e) * gr.sc - gr.ms;
      let dz = dz_of(load_dy(e), xc, scale, shift);
      ds += dz * xc;
      db += dz;
      res += xc * LMASK;
    }
    let slot = (gl * p.items + it) * 2u;
    WS[slot] = ds;
    WS[slot + 1u] = db;
  }
  wg_res[lid] = dot(res, vec4<f32>(1.0));
  workgroupBarrier();   // wg_res (workgroup memory) for thread 0
  storageBarrier();     // PART (storage) for every thread

  // Per-channel totals over the pieces, in piece order.
  for (var j = lid; j < p.Cg; j += WG) {
    var ds = 0.0;
    var db = 0.0;
    for (var pc = 0u; pc < p.P; pc++) {
      var it: u32;
      if (LANES_CH) {
        it = pc * p.A + j / 4u;
        let slot = (gl * p.items + it) * 2u;
        ds += WS[slot][j & 3u];
        db += WS[slot + 1u][j & 3u];
      } else {
        if (NHWC) { it = pc * p.A + j; } else { it = j * p.P + pc; }
        let slot = (gl * p.items + it) * 2u;
        ds += dot(WS[slot], vec4<f32>(1.0));
        db += dot(WS[slot + 1u], vec4<f32>(1.0));
      }
    }
    WS[p.dsdb_at + gr.n * p.C + gr.g * p.Cg + j] = vec4<f32>(ds, db, 0.0, 0.0);
  }
  storageBarrier();

  if (lid == 0u) {
    var sg = 0.0;
    var sgx = 0.0;
    for (var j = 0u; j < p.Cg; j++) {
      let c = gr.g * p.Cg + j;
      var w = 1.0;
      if (AFFINE) { w = W[c]; }
      let v = WS[p.dsdb_at + gr.n * p.C + c].xy;
      sgx += w * v.x;
      sg += w * v.y;
    }
    let cf = backward_coefficients(gr.mean, gr.rstd, sgx, sg, wg_total(), p.inv_m, gr.sc);
    WS[p.coef_at + gg] = vec4<f32>(cf, zlo);
    wg_coef = cf.xy;
  }
  let cf = workgroupUniformLoad(&wg_coef);

  if (APPLY) {
    for (var it = lid; it < p.items; it += WG) {
      let I = item_of(it, gl, gr.n, gr.g);
      let scale = lane_w(I.ch) * gr.rstd_s;
      let shift = lane_b(I.ch) - zlo * scale;
      let alpha = lane_w(I.ch) * gr.rstd_s;
      // a rescaled group's steps (none where gr.sc == 1), then a plain one's: two loops, not a branch
      // in one (SwiftShader runs a branch's body for every lane, masked: group_norm_pow2.wgsl)
      let t_scaled = select(I.t1, I.t0, gr.sc == 1.0);
      for (var t = I.t0; t < t_scaled; t++) {
        let u = (I.base + t * I.tstride) >> 2u;
        let xc = ld_X(u) * gr.sc - gr.ms;
        let dz = dz_of(ld_DY(u), xc, scale, shift);
        st_DX(u, times_pow2_4(alpha * dz + cf.y * xc + cf.x, vec4<f32>(gr.sc)));
      }
      for (var t = t_scaled; t < I.t1; t++) {
        let u = (I.base + t * I.tstride) >> 2u;
        let xc = ld_X(u) - gr.ms;
        st_DX(u, alpha * dz_of(ld_DY(u), xc, scale, shift) + cf.y * xc + cf.x);
      }
    }
  }
}
