// The backward's per-group coefficients, shared by the NCHW and channels-last kernels:
// dx = rstd * w * dz + c1 * (x - mean) + c0, with the saved float32 mean's lost low
// part `lo` restored from resid = sum(x - mean) (only within the mean's own ulp, so
// statistics passed on purpose are used as given).  Returns (c0, c1, lo).
fn backward_coefficients(mean: f32, rstd: f32, sgx: f32, sg: f32, resid: f32, inv_m: f32) -> vec3<f32> {
  let am = abs(mean);
  let ulp = bitcast<f32>(bitcast<u32>(am) + 1u) - am;
  var lo = resid * inv_m;
  if (!(abs(lo) <= ulp)) { lo = 0.0; }
  let bq = rstd * (sgx - lo * sg) * inv_m;
  let c1 = -rstd * rstd * bq;
  let c0 = rstd * rstd * bq * lo - rstd * sg * inv_m;
  return vec3<f32>(c0, c1, lo);
}
