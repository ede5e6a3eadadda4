// GroupNorm backward, the "thread" plan: one invocation per (n, g) group, WG groups per
// workgroup, NCHW rows of HW % 4 == 0 (with U8, 16-bit storage in 16-byte units and HW % 8 == 0:
// steps of 8 elements).  Same formulas and scaled units as
// group_norm_backward.wgsl (group_norm_coef.wgsl): a first sweep takes the per-channel sums
// ds = sum dz*xc and db = sum dz (to DSDB, for dweight and dbias) and sum xc (the saved mean's
// lost low part), channel by channel; COEF gets (c0, c1, mean_lo, zlo); a second sweep writes
// dx.  With SILU and |mean| * rstd > REFINE_MEAN_ABOVE a sweep over x restores the mean's low
// part before z is rebuilt.  No barriers; every sum has a fixed order.
//!include group_norm_common.wgsl
//!include group_norm_coef.wgsl
//!include group_norm_grad.wgsl
//!include group_norm_backward_io.wgsl
//!include group_norm_thread_group.wgsl

// sum (x s - ms) over the nv steps from b4, in blocks of 128 elements per lane.
fn resid_sum(b4: u32, nv: u32, ms: f32, sc: f32) -> f32 {
  var r = vec4<f32>(0.0);
  var u = 0u;
  loop {
    if (u >= nv) { break; }
    let bend = min(u + select(32u, 16u, U8), nv);
    var b = vec4<f32>(0.0);
    for (; u < bend; u++) {
      if (U8) {
        let m = ld8_X(b4 + u);
        b += m[0] * sc - ms;
        b += m[1] * sc - ms;
      } else {
        b += ld_X(b4 + u) * sc - ms;
      }
    }
    r += b;
  }
  return dot(r, vec4<f32>(1.0));
}

// The first sweep's sums of one vec4: (sum dz * xc, sum dz, sum xc) in ``acc``'s columns.
fn sweep_sums(acc: ptr<function, mat3x4<f32>>, x: vec4<f32>, dy: vec4<f32>, gr: GradGroup, scale: vec4<f32>,
              shift: vec4<f32>) {
  let xc = x * gr.sc - gr.ms;
  let dz = dz_of(dy, xc, scale, shift);
  (*acc)[0] += dz * xc;
  (*acc)[1] += dz;
  (*acc)[2] += xc;
}

// dx of one vec4 from the group's coefficients cf (c0_s, c1_s) and a lane's alpha = w * rstd_s.
fn dx_of(x: vec4<f32>, dy: vec4<f32>, gr: GradGroup, scale: vec4<f32>, shift: vec4<f32>, alpha: vec4<f32>,
         cf: vec3<f32>) -> vec4<f32> {
  let xc = x * gr.sc - gr.ms;
  return times_pow2_4(alpha * dz_of(dy, xc, scale, shift) + cf.y * xc + cf.x, vec4<f32>(gr.sc));
}

// dx_of for a group in unscaled units (gr.sc == 1: nothing is rescaled, nothing can turn subnormal).
fn dx_plain(x: vec4<f32>, dy: vec4<f32>, gr: GradGroup, scale: vec4<f32>, shift: vec4<f32>, alpha: vec4<f32>,
            cf: vec3<f32>) -> vec4<f32> {
  let xc = x - gr.ms;
  return alpha * dz_of(dy, xc, scale, shift) + cf.y * xc + cf.x;
}

// dx of step u: dx_of where the group is rescaled (`scaled`, a literal at each call site), else dx_plain.
fn write_step(u: u32, gr: GradGroup, scale: vec4<f32>, shift: vec4<f32>, alpha: vec4<f32>, cf: vec3<f32>,
              scaled: bool) {
  if (U8) {
    let xm = ld8_X(u);
    let dm = ld8_DY(u);
    if (scaled) {
      st8_DX(u, mat2x4<f32>(dx_of(xm[0], dm[0], gr, scale, shift, alpha, cf),
                            dx_of(xm[1], dm[1], gr, scale, shift, alpha, cf)));
    } else {
      st8_DX(u, mat2x4<f32>(dx_plain(xm[0], dm[0], gr, scale, shift, alpha, cf),
                            dx_plain(xm[1], dm[1], gr, scale, shift, alpha, cf)));
    }
  } else if (scaled) {
    st_DX(u, dx_of(ld_X(u), ld_DY(u), gr, scale, shift, alpha, cf));
  } else {
    st_DX(u, dx_plain(ld_X(u), ld_DY(u), gr, scale, shift, alpha, cf));
  }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let tg = thread_group(wid, nwg, lid);
  if (tg.gl >= p.ngroups) { return; }
  let gg = tg.gg;
  let gr = grad_group(gg);
  let nv = tg.nv;
  let hw = tg.hw;
  let b4 = tg.first;

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
    let uend = u + hw;
    loop {
      if (u >= uend) { break; }
      let bend = min(u + select(32u, 16u, U8), uend);
      var blk = mat3x4<f32>(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));  // block sums, as acc above
      for (; u < bend; u++) {
        if (U8) {
          let xm = ld8_X(u);
          let dm = ld8_DY(u);
          sweep_sums(&blk, xm[0], dm[0], gr, scale, shift);
          sweep_sums(&blk, xm[1], dm[1], gr, scale, shift);
        } else {
          sweep_sums(&blk, ld_X(u), ld_DY(u), gr, scale, shift);
        }
      }
      ds += blk[0];
      db += blk[1];
      res += blk[2];
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
    let alpha = lane_w(ch) * gr.rstd_s;
    let uend = u + hw;
    // a rescaled group's steps (none where gr.sc == 1), then a plain one's: two loops, not a branch in
    // one (SwiftShader runs a branch's body for every lane, masked: group_norm_pow2.wgsl)
    let scaled_end = select(uend, u, gr.sc == 1.0);
    for (; u < scaled_end; u++) { write_step(u, gr, scale, shift, alpha, cf, true); }
    for (; u < uend; u++) { write_step(u, gr, scale, shift, alpha, cf, false); }
  }
}
