// GroupNorm forward, the "thread" plan: one invocation per (n, g) group, WG groups per
// workgroup, NCHW rows of HW % 4 == 0 (a group is M / 4 contiguous vec4s).
//
// No barriers and no workgroup memory: each invocation sums its whole group, finishes the
// statistics with the fused kernel's numerics (group_norm_stats.wgsl: shifted sums, the same
// redo for a poor shift, overflow or underflow) and writes the output in a second sweep that
// finds the group in cache.  This is what CPU adapters run best for groups that fit the loop
// limit: a SIMD batch is WG groups side by side, each lane a long contiguous run (like
// copy_ranges), and nothing is paid per group but the statistics themselves.  Sums run in
// three levels (32 steps, 32 blocks, the rest) so that a long group keeps float32 rounding low.
// The launcher keeps M / 4 within STEP_CAP (lavapipe's loop watchdog counts every iteration).
//!include group_norm_common.wgsl
//!include group_norm_stats.wgsl
//!include group_norm_forward_io.wgsl

// (sum (x s - k s), sum (x s - k s)^2) over the nv vec4s from b4: run_sums (group_norm_stats.wgsl)
// over runs of 1024 steps, added in order (the third level).
fn group_sums(b4: u32, nv: u32, k: f32, sc: f32) -> vec2<f32> {
  let ks = k * sc;
  var s1 = vec4<f32>(0.0);
  var s2 = vec4<f32>(0.0);
  for (var u = 0u; u < nv; u += 1024u) {
    let m = run_sums(b4 + u, b4 + min(u + 1024u, nv), ks, sc);
    s1 += m[0];
    s2 += m[1];
  }
  return vec2<f32>(dot(s1, vec4<f32>(1.0)), dot(s2, vec4<f32>(1.0)));
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let gl = (wid.y * nwg.x + wid.x) * WG + lid;
  if (gl >= p.ngroups) { return; }
  let gg = p.g_first + gl;
  let g = gg % p.G;
  let nv = p.M >> 2u;
  let b4 = (p.x_base + gl * p.M) >> 2u;

  let k0 = ld_X(b4).x;
  let t = group_sums(b4, nv, k0, 1.0);
  var st = group_stat(k0, t.x, t.y, true);
  var sc = 1.0;
  if (st.w != 0.0) {
    let ks = redo_shift(st);
    sc = ks.y;
    let t2 = group_sums(b4, nv, ks.x, sc);
    st = group_stat(ks.x, t2.x, t2.y, false);
  }
  let aux = group_aux(st, sc);
  let mean_hi = aux.x;
  let mean_lo = aux.y;  // scaled units
  let rstd_s = aux.z;
  MEAN[gg] = (mean_hi * sc + mean_lo) / sc;
  RSTD[gg] = rstd_s * sc;
  AUX[gg] = vec4<f32>(mean_hi, mean_lo, rstd_s, sc);

  let hs = mean_hi * sc;
  let hw4 = p.HW >> 2u;
  var u = b4;
  for (var c = 0u; c < p.Cg; c++) {
    let ch = g * p.Cg + c;
    let scale = lane_w(ch) * rstd_s;
    let shift = lane_b(ch) - mean_lo * scale;
    let uend = u + hw4;
    for (; u < uend; u++) {
      var y = (ld_X(u) * sc - hs) * scale + shift;
      if (SILU) { y = silu(y); }
      st_Y(u, y);
    }
  }
}
