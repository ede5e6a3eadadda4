// The split backward's shared parts (group_norm_split_backward.wgsl,
// group_norm_split_nhwc_backward.wgsl): the combine pass (entry point `combine`, one thread per
// group).  Needs group_norm_grad.wgsl (grad_group, refine, dz_of), MEAN, RSTD, W, WS,
// thread_index, the constants SILU, AFFINE, REFINE, and the kernel's channel_sums(gl, j) (channel j's totals
// (ds, db, sum xc_s)) and group_resid(gl) (the group's sum xc_s in the kernel's order: REFINE).

// Group gl of the chunk, channels in order (fixed order, bitwise repeatable): REFINE: zlo ->
// COEF.w; else per channel (ds, db) -> DSDB, then the group's coefficients ->
// COEF = (c0, c1, mean_lo, zlo), as the fused kernel's thread 0.
fn combine_group(gl: u32) {
  let gg = p.g_first + gl;
  let gr = grad_group(gg);
  if (REFINE) {
    var zlo = 0.0;
    if (refine(gr.mean, gr.rstd)) { zlo = mean_low_part(gr.mean, group_resid(gl), p.inv_m, gr.sc); }
    WS[p.coef_at + gg] = vec4<f32>(0.0, 0.0, 0.0, zlo);
    return;
  }
  var sg = 0.0;
  var sgx = 0.0;
  var res = 0.0;
  for (var j = 0u; j < p.Cg; j++) {
    let v = channel_sums(gl, j);
    res += v.z;
    let c = gr.g * p.Cg + j;
    WS[p.dsdb_at + gr.n * p.C + c] = vec4<f32>(v.x, v.y, 0.0, 0.0);
    var w = 1.0;
    if (AFFINE) { w = W[c]; }
    sgx += w * v.x;
    sg += w * v.y;
  }
  var zlo = 0.0;
  if (SILU) { zlo = WS[p.coef_at + gg].w; }
  let cf = backward_coefficients(gr.mean, gr.rstd, sgx, sg, res, p.inv_m, gr.sc);
  WS[p.coef_at + gg] = vec4<f32>(cf, zlo);
}

@compute @workgroup_size(WG)
fn combine(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
  let gl = thread_index(wid, nwg, lid);
  if (gl >= p.ngroups) { return; }
  combine_group(gl);
}
