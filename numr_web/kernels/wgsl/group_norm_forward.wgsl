// GroupNorm forward: statistics (shifted sums, float32) and, when APPLY, the
// normalized output, one workgroup per (n, g).  See group_norm_common.wgsl.
//
// Numerics: every thread sums (x - K) and (x - K)^2 with the same shift K (the
// group's first element), so mean = K + S1/M is held as the exact pair
// (mean_hi = K, mean_lo = S1/M).  If the shift was poor ((S1/M)^2 > 8 var)
// the group is summed again around the computed mean; if a float32 sum
// overflowed (squares beyond ~1e19, or the deviations themselves near float32's
// limit) the redo sums x * s - K * s with s = OVERFLOW_SCALE (numerics.py), and
// everything after it stays in those units: mean_lo_s = (mean - mean_hi) * s,
// rstd_s = rstd / s, y = (x * s - mean_hi * s) * w * rstd_s + (b - mean_lo_s * w * rstd_s)
// (s = 1 for every other group: the plain formulas).  x - mean_hi is exact for data
// near its mean, so large offsets cost no accuracy.  A group with a NaN or an
// infinity gets NaN mean and rstd (and so NaN y), as on the CPU.
//!include group_norm_common.wgsl
//!include group_norm_stats.wgsl
//!include group_norm_forward_io.wgsl

var<workgroup> wg_part: array<vec2<f32>, WG>;
var<workgroup> wg_stat: vec4<f32>;

fn load_x(e: u32) -> vec4<f32> {
  if (VEC == 4u) { return ld_X(e >> 2u); }
  return vec4<f32>(ld_X(e >> 2u)[e & 3u], 0.0, 0.0, 0.0);
}

fn partial_sums(gl: u32, n: u32, g: u32, lid: u32, k: f32, sc: f32) -> vec2<f32> {
  var s1 = vec4<f32>(0.0);
  var s2 = vec4<f32>(0.0);
  let ks = k * sc;
  for (var it = lid; it < p.items; it += WG) {
    let I = item_of(it, gl, n, g);
    // two-level sums (blocks of 32 steps) keep float32 rounding low on long items
    var t = I.t0;
    loop {
      if (t >= I.t1) { break; }
      let tend = min(t + 32u, I.t1);
      var b1 = vec4<f32>(0.0);
      var b2 = vec4<f32>(0.0);
      for (; t < tend; t++) {
        let d = (load_x(I.base + t * I.tstride) * sc - ks) * LMASK;
        b1 += d;
        b2 += d * d;
      }
      s1 += b1;
      s2 += b2;
    }
  }
  return vec2<f32>(dot(s1, vec4<f32>(1.0)), dot(s2, vec4<f32>(1.0)));
}

// Thread 0: total the partials into wg_stat (group_stat, group_norm_stats.wgsl).
fn combine(k: f32, sc: f32, allow_redo: bool) {
  var s1 = 0.0;
  var s2 = 0.0;
  for (var i = 0u; i < WG; i++) {
    s1 += wg_part[i].x;
    s2 += wg_part[i].y;
  }
  wg_stat = group_stat(k, s1, s2, allow_redo);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let gl = wid.y * nwg.x + wid.x;
  if (gl >= p.ngroups) { return; }
  let gg = p.g_first + gl;
  let n = gg / p.G;
  let g = gg % p.G;

  let k0 = load_x(item_of(0u, gl, n, g).base).x;
  wg_part[lid] = partial_sums(gl, n, g, lid, k0, 1.0);
  workgroupBarrier();
  if (lid == 0u) { combine(k0, 1.0, true); }
  var st = workgroupUniformLoad(&wg_stat);
  var sc = 1.0;
  if (st.w != 0.0) {
    let ks = redo_shift(st);
    sc = ks.y;
    wg_part[lid] = partial_sums(gl, n, g, lid, ks.x, sc);
    workgroupBarrier();
    if (lid == 0u) { combine(ks.x, sc, false); }
    st = workgroupUniformLoad(&wg_stat);
  }
  let aux = group_aux(st, sc);
  let mean_hi = aux.x;
  let mean_lo = aux.y;  // scaled units
  let rstd_s = aux.z;
  if (lid == 0u) {
    MEAN[gg] = (mean_hi * sc + mean_lo) / sc;
    RSTD[gg] = times_pow2(rstd_s, sc);
    AUX[gg] = vec4<f32>(mean_hi, mean_lo, rstd_s, sc);
  }
  if (APPLY) {
    let hs = mean_hi * sc;
    for (var it = lid; it < p.items; it += WG) {
      let I = item_of(it, gl, n, g);
      let scale = lane_w(I.ch) * rstd_s;
      let shift = lane_b(I.ch) - mean_lo * scale;
      for (var t = I.t0; t < I.t1; t++) {
        let u = (I.base + t * I.tstride) >> 2u;
        var y = (ld_X(u) * sc - hs) * scale + shift;
        if (SILU) { y = silu(y); }
        st_Y(u, y);
      }
    }
  }
}
