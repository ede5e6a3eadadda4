// The backward's per-group helpers, shared by the NCHW and channels-last kernels.
//
// Scaled units: a group's sums are formed on xc_s = x * s - mean * s, s = rstd_scale(rstd) a
// power of two (exact), so that neither the sums nor rstd^2 * sum(dz * xc) leave float32's
// normal range when rstd does (std beyond 7e16 or, with eps = 0, below 1.4e-17).  Inside
// [1/RSTD_SCALE_ABOVE, RSTD_SCALE_ABOVE] (numr_web/numerics.py) s = 1: the plain formulas.
//
// The coefficients are in the same units (divided by s): dx = times_pow2(alpha_s * dz + c1_s * xc_s
// + c0_s, s), so that a dx below float32's normal range is not flushed (group_norm_pow2.wgsl).

//!include group_norm_pow2.wgsl

// 1, or the power of two nearest below rstd (exponent clamped to float32's normal range).
fn rstd_scale(rstd: f32) -> f32 {
  if (rstd >= 1.0 / RSTD_SCALE_ABOVE && rstd <= RSTD_SCALE_ABOVE) { return 1.0; }
  let e = i32((bitcast<u32>(rstd) >> 23u) & 0xffu) - 127;
  return ldexp(1.0, clamp(e, -126, 126));
}

fn rstd_scale4(rstd: vec4<f32>) -> vec4<f32> {
  return vec4<f32>(rstd_scale(rstd.x), rstd_scale(rstd.y), rstd_scale(rstd.z), rstd_scale(rstd.w));
}

// The saved float32 mean's lost low part, in scaled units, from resid = sum(xc_s) over the
// group's M elements, trusted only within the mean's own ulp (statistics passed on purpose are
// used as given).
fn mean_low_part(mean: f32, resid: f32, inv_m: f32, s: f32) -> f32 {
  let am = abs(mean);
  let ulp = (bitcast<f32>(bitcast<u32>(am) + 1u) - am) * s;
  let lo = resid * inv_m;
  if (!(abs(lo) <= ulp)) { return 0.0; }
  return lo;
}

// With SILU the backward rebuilds z = (x - mean) * scale + shift from the float32 mean.
// Where |mean| * rstd exceeds REFINE_MEAN_ABOVE (numr_web/numerics.py, spliced in by
// source.py), the mean's low part matters there too (up to about 1e-6 of z at the limit,
// 5e-4 at offset 1e4) and the kernels restore it with a first pass over x before the
// sums; shift becomes b - lo_s * w * rstd_s.

// dx = s * (rstd_s * w * dz + c1_s * xc_s + c0_s), with the mean's low part lo_s restored from
// resid (sums in scaled units: sgx = sum w * dz * xc_s, resid = sum xc_s).  Returns (c0_s, c1_s,
// lo_s); with s = 1 they are the plain formulas' c0 and c1.
fn backward_coefficients(mean: f32, rstd: f32, sgx: f32, sg: f32, resid: f32, inv_m: f32, s: f32) -> vec3<f32> {
  let rstd_s = over_scale(rstd, s);
  let lo = mean_low_part(mean, resid, inv_m, s);
  let bq = rstd_s * (sgx - lo * sg) * inv_m;
  let c1 = -rstd_s * rstd_s * bq;
  let c0 = rstd_s * rstd_s * bq * lo - rstd_s * sg * inv_m;
  return vec3<f32>(c0, c1, lo);
}
