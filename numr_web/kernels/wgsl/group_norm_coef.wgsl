// The backward's per-group helpers, shared by the NCHW and channels-last kernels.

// The saved float32 mean's lost low part from resid = sum(x - mean) over the group's
// M elements, trusted only within the mean's own ulp (statistics passed on purpose are
// used as given).
fn mean_low_part(mean: f32, resid: f32, inv_m: f32) -> f32 {
  let am = abs(mean);
  let ulp = bitcast<f32>(bitcast<u32>(am) + 1u) - am;
  let lo = resid * inv_m;
  if (!(abs(lo) <= ulp)) { return 0.0; }
  return lo;
}

// With SILU the backward rebuilds z = (x - mean) * scale + shift from the float32 mean.
// Where |mean| * rstd exceeds REFINE_MEAN_ABOVE (numr_web/numerics.py, spliced in by
// source.py), the mean's low part matters there too (up to about 1e-6 of z at the limit,
// 5e-4 at offset 1e4) and the kernels restore it with a first pass over x before the
// sums; shift becomes b - lo * scale.

// dx = rstd * w * dz + c1 * (x - mean) + c0, with the mean's low part `lo` restored from
// resid.  Returns (c0, c1, lo).
fn backward_coefficients(mean: f32, rstd: f32, sgx: f32, sg: f32, resid: f32, inv_m: f32) -> vec3<f32> {
  let lo = mean_low_part(mean, resid, inv_m);
  let bq = rstd * (sgx - lo * sg) * inv_m;
  let c1 = -rstd * rstd * bq;
  let c0 = rstd * rstd * bq * lo - rstd * sg * inv_m;
  return vec3<f32>(c0, c1, lo);
}
