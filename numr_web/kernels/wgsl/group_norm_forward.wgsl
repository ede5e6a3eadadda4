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
@group(0) @binding(0) var<storage, read> X: array<ST_X>;
@group(0) @binding(1) var<storage, read_write> Y: array<ST_Y>;
@group(0) @binding(2) var<storage, read> W: array<f32>;
@group(0) @binding(3) var<storage, read> B: array<f32>;
@group(0) @binding(4) var<storage, read_write> MEAN: array<f32>;
@group(0) @binding(5) var<storage, read_write> RSTD: array<f32>;
@group(0) @binding(6) var<storage, read_write> AUX: array<vec4<f32>>;   // (mean_hi, mean_lo_s, rstd_s, s) per group
@group(0) @binding(7) var<uniform> p: Params;

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

fn not_finite(v: f32) -> bool { return (bitcast<u32>(v) & 0x7f800000u) == 0x7f800000u; }

// rstd / s = 1 / sqrt(var_s + eps * s^2) from the variance var_s in units scaled by s; where
// eps * s^2 overflows, eps dwarfs var and it is 1 / (sqrt(eps) * s).
fn rstd_in_units(var_s: f32, s: f32) -> f32 {
  let es = p.eps * s * s;
  if (not_finite(es)) { return 1.0 / (sqrt(p.eps) * s); }
  return 1.0 / sqrt(var_s + es);
}

// Thread 0: total the partials into (K, S1/M and var in scaled units, redo: 0 no, 1 shift,
// 2 overflow, 3 underflow).  A non-finite sum keeps its NaN or inf in var (max() may drop a NaN).
fn combine(k: f32, sc: f32, allow_redo: bool) {
  var s1 = 0.0;
  var s2 = 0.0;
  for (var i = 0u; i < WG; i++) {
    s1 += wg_part[i].x;
    s2 += wg_part[i].y;
  }
  let d = s1 * p.inv_m;
  let t = s2 * p.inv_m - d * d;
  let overflow = not_finite(s2) || not_finite(s1);
  let v = select(max(t, 0.0), t, not_finite(t));
  let tiny = v < TINY_VAR && (s1 != 0.0 || s2 != 0.0);
  let redo = allow_redo && (d * d > POOR_SHIFT_RATIO * v || overflow || tiny);
  wg_stat = vec4<f32>(k, d, v, select(0.0, select(select(1.0, 3.0, tiny), 2.0, overflow), redo));
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
    var k1 = st.x + st.y;
    if (st.w > 2.5) {
      sc = UNDERFLOW_SCALE;  // squares of the deviations below float32's normal range
    } else if (st.w > 1.5) {
      sc = OVERFLOW_SCALE;
      if (not_finite(k1)) { k1 = st.x; }  // the deviations' sum overflowed too: keep the first element
    }
    wg_part[lid] = partial_sums(gl, n, g, lid, k1, sc);
    workgroupBarrier();
    if (lid == 0u) { combine(k1, sc, false); }
    st = workgroupUniformLoad(&wg_stat);
  }
  var mean_hi = st.x;
  var mean_lo = st.y;  // scaled units
  var rstd_s = rstd_in_units(st.z, sc);
  if (not_finite(st.y) || not_finite(st.z)) {  // a NaN or an infinity in the group
    mean_hi = nan_of(st.y, st.z);
    mean_lo = mean_hi;
    rstd_s = mean_hi;
  }
  if (lid == 0u) {
    MEAN[gg] = (mean_hi * sc + mean_lo) / sc;
    RSTD[gg] = rstd_s * sc;
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
