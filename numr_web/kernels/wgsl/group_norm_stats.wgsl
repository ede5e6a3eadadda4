// Forward statistics from shifted sums, shared by the fused kernel (group_norm_forward.wgsl)
// and the split plan's combine pass (group_norm_split.wgsl), so both give the same numerics.
// Needs p.inv_m and p.eps (struct Params, group_norm_common.wgsl).  rstd is stored as
// times_pow2(rstd_s, s): a subnormal rstd (|x| near float32's largest) is kept, not flushed.

//!include group_norm_pow2.wgsl

fn not_finite(v: f32) -> bool { return (bitcast<u32>(v) & 0x7f800000u) == 0x7f800000u; }

// rstd / s = 1 / sqrt(var_s + eps * s^2) from the variance var_s in units scaled by s; where
// eps * s^2 overflows, eps dwarfs var and it is 1 / (sqrt(eps) * s).
fn rstd_in_units(var_s: f32, s: f32) -> f32 {
  let es = p.eps * s * s;
  if (not_finite(es)) { return 1.0 / (sqrt(p.eps) * s); }
  return 1.0 / sqrt(var_s + es);
}

// (K, S1/M and var in scaled units, redo: 0 no, 1 shift, 2 overflow, 3 underflow) from the
// group's totals s1 = sum (x s - K s), s2 = sum (x s - K s)^2.  A non-finite sum keeps its NaN
// or inf in var (max() may drop a NaN).
fn group_stat(k: f32, s1: f32, s2: f32, allow_redo: bool) -> vec4<f32> {
  let d = s1 * p.inv_m;
  let t = s2 * p.inv_m - d * d;
  let overflow = not_finite(s2) || not_finite(s1);
  let v = select(max(t, 0.0), t, not_finite(t));
  let tiny = v < TINY_VAR && (s1 != 0.0 || s2 != 0.0);
  let redo = allow_redo && (d * d > POOR_SHIFT_RATIO * v || overflow || tiny);
  return vec4<f32>(k, d, v, select(0.0, select(select(1.0, 3.0, tiny), 2.0, overflow), redo));
}

// The shift and scale (k1, s) of the second sum for a group whose group_stat asked for one.
fn redo_shift(st: vec4<f32>) -> vec2<f32> {
  var k1 = st.x + st.y;
  var sc = 1.0;
  if (st.w > 2.5) {
    sc = UNDERFLOW_SCALE;  // squares of the deviations below float32's normal range
  } else if (st.w > 1.5) {
    sc = OVERFLOW_SCALE;
    if (not_finite(k1)) { k1 = st.x; }  // the deviations' sum overflowed too: keep the first element
  }
  return vec2<f32>(k1, sc);
}

// (mean_hi, mean_lo_s, rstd_s, s) of a finished group (st from group_stat, sums scaled by sc);
// a NaN or an infinity in the group gives NaN statistics.
fn group_aux(st: vec4<f32>, sc: f32) -> vec4<f32> {
  var mean_hi = st.x;
  var mean_lo = st.y;  // scaled units
  var rstd_s = rstd_in_units(st.z, sc);
  if (not_finite(st.y) || not_finite(st.z)) {  // a NaN or an infinity in the group
    mean_hi = nan_of(st.y, st.z);
    mean_lo = mean_hi;
    rstd_s = mean_hi;
  }
  return vec4<f32>(mean_hi, mean_lo, rstd_s, sc);
}

// (sum (x s - ks), sum (x s - ks)^2) per lane over X's steps u0 <= u < u1, one thread walking
// the run in blocks of 128 elements per lane (each block summed apart, then added in order: low
// rounding on long runs).  A step is a vec4, or with ``eight`` 8 elements (ld8_X: 16-bit storage in
// 16-byte units).  Needs the kernel's ld_X and ld8_X.
fn run_sums(u0: u32, u1: u32, ks: f32, sc: f32, eight: bool) -> mat2x4<f32> {
  var t1 = vec4<f32>(0.0);
  var t2 = vec4<f32>(0.0);
  var u = u0;
  loop {
    if (u >= u1) { break; }
    let uend = min(u + select(32u, 16u, eight), u1);
    var b1 = vec4<f32>(0.0);
    var b2 = vec4<f32>(0.0);
    for (; u < uend; u++) {
      if (eight) {  // the two vec4s in order: the sums of the same elements in 4-element steps
        let m = ld8_X(u);
        let d = m[0] * sc - ks;
        b1 += d;
        b2 += d * d;
        let e = m[1] * sc - ks;
        b1 += e;
        b2 += e * e;
      } else {
        let d = ld_X(u) * sc - ks;
        b1 += d;
        b2 += d * d;
      }
    }
    t1 += b1;
    t2 += b2;
  }
  return mat2x4<f32>(t1, t2);
}
