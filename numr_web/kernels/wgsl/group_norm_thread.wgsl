// GroupNorm forward, the "thread" plan: one invocation per (n, g) group, WG groups per
// workgroup, NCHW rows of HW % 4 == 0 (a group is M / 4 contiguous vec4s), or with U8 (16-bit
// storage in 16-byte units, HW % 8 == 0) M / 8 steps of 8 elements.
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
//!include group_norm_thread_group.wgsl

// (sum (x s - k s), sum (x s - k s)^2) over the nv steps from b4: run_sums (group_norm_stats.wgsl)
// over runs of 4096 elements, added in order (the third level).
fn group_sums(b4: u32, nv: u32, k: f32, sc: f32) -> vec2<f32> {
  let ks = k * sc;
  let run = select(1024u, 512u, U8);
  var s1 = vec4<f32>(0.0);
  var s2 = vec4<f32>(0.0);
  for (var u = 0u; u < nv; u += run) {
    let m = run_sums(b4 + u, b4 + min(u + run, nv), ks, sc, U8);
    s1 += m[0];
    s2 += m[1];
  }
  return vec2<f32>(dot(s1, vec4<f32>(1.0)), dot(s2, vec4<f32>(1.0)));
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let tg = thread_group(wid, nwg, lid);
  if (tg.gl >= p.ngroups) { return; }
  let gg = tg.gg;
  let g = gg % p.G;
  let nv = tg.nv;
  let b4 = tg.first;

  let k0 = ld_X(select(b4, 2u * b4, U8)).x;  // ld_X counts vec4s
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
  RSTD[gg] = times_pow2(rstd_s, sc);
  AUX[gg] = vec4<f32>(mean_hi, mean_lo, rstd_s, sc);

  let hs = mean_hi * sc;
  var u = b4;
  for (var c = 0u; c < p.Cg; c++) {
    let ch = g * p.Cg + c;
    let scale = lane_w(ch) * rstd_s;
    let shift = lane_b(ch) - mean_lo * scale;
    let uend = u + tg.hw;
    for (; u < uend; u++) {
      if (U8) {
        let m = ld8_X(u);
        st8_Y(u, mat2x4<f32>(y_scaled(m[0], sc, hs, scale, shift), y_scaled(m[1], sc, hs, scale, shift)));
      } else {
        st_Y(u, y_scaled(ld_X(u), sc, hs, scale, shift));
      }
    }
  }
}
