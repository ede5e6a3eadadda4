// GroupNorm backward, the "thread" plan: one invocation per (n, g) group, WG groups per
// workgroup, NCHW rows of HW % 4 == 0.  Same formulas and scaled units as
// group_norm_backward.wgsl (group_norm_coef.wgsl): a first sweep takes the per-channel sums
// ds = sum dz*xc and db = sum dz (to DSDB, for dweight and dbias) and sum xc (the saved mean's
// lost low part), channel by channel; COEF gets (c0, c1, mean_lo, zlo); a second sweep writes
// dx.  With SILU and |mean| * rstd > REFINE_MEAN_ABOVE a sweep over x restores the mean's low
// part before z is rebuilt.  No barriers; every sum has a fixed order.
//!include group_norm_common.wgsl
//!include group_norm_coef.wgsl
//!include group_norm_grad.wgsl
//!include group_norm_backward_io.wgsl

// sum (x s - ms) over the nv vec4s from b4, in blocks of 32 steps.
fn resid_sum(b4: u32, nv: u32, ms: f32, sc: f32) -> f32 {
  var r = vec4<f32>(0.0);
  var u = 0u;
  loop {
    if (u >= nv) { break; }
    let bend = min(u + 32u, nv);
    var b = vec4<f32>(0.0);
    for (; u < bend; u++) { b += ld_X(b4 + u) * sc - ms; }
    r += b;
  }
  return dot(r, vec4<f32>(1.0));
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let gl = (wid.y * nwg.x + wid.x) * WG + lid;
  if (gl >= p.ngroups) { return; }
  let gg = p.g_first + gl;
  let gr = grad_group(gg);
  let nv = p.M >> 2u;
  let hw4 = p.HW >> 2u;
  let b4 = (p.x_base + gl * p.M) >> 2u;

  var zlo = 0.0;  // scaled units
  if (refine(gr.mean, gr.rstd)) {
    zlo = mean_low_part(gr.mean, resid_sum(b4, nv, gr.ms, gr.sc), p.inv_m, gr.sc);
  }

  var res = vec4<f32>(0.0);
  var sg = 0.0;
  var sgx = 0.0;
  var u = b4;
  for (var c = 0u; c < p.Cg; c++) {
    let ch = gr.g * p.Cg + c;
    let scale = lane_w(ch) * gr.rstd_s;
    let shift = lane_b(ch) - zlo * scale;
    var ds = vec4<f32>(0.0);
    var db = vec4<f32>(0.0);
    let uend = u + hw4;
    loop {
      if (u >= uend) { break; }
      let bend = min(u + 32u, uend);
      var bs = vec4<f32>(0.0);
      var bb = vec4<f32>(0.0);
      var br = vec4<f32>(0.0);
      for (; u < bend; u++) {
        let xc = ld_X(u) * gr.sc - gr.ms;
        let dz = dz_of(ld_DY(u), xc, scale, shift);
        bs += dz * xc;
        bb += dz;
        br += xc;
      }
      ds += bs;
      db += bb;
      res += br;
    }
    let dsv = dot(ds, vec4<f32>(1.0));
    let dbv = dot(db, vec4<f32>(1.0));
    WS[p.dsdb_at + gr.n * p.C + ch] = vec4<f32>(dsv, dbv, 0.0, 0.0);
    let w = lane_w(ch).x;
    sgx += w * dsv;
    sg += w * dbv;
  }
  let cf = backward_coefficients(gr.mean, gr.rstd, sgx, sg, dot(res, vec4<f32>(1.0)), p.inv_m, gr.sc);
  WS[p.coef_at + gg] = vec4<f32>(cf, zlo);

  u = b4;
  for (var c = 0u; c < p.Cg; c++) {
    let ch = gr.g * p.Cg + c;
    let scale = lane_w(ch) * gr.rstd_s;
    let shift = lane_b(ch) - zlo * scale;
    let alpha = lane_w(ch) * gr.rstd;
    let uend = u + hw4;
    for (; u < uend; u++) {
      let xc = ld_X(u) * gr.sc - gr.ms;
      let dz = dz_of(ld_DY(u), xc, scale, shift);
      st_DX(u, alpha * dz + cf.y * xc + cf.x);
    }
  }
}
