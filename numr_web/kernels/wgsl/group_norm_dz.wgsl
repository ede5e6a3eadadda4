// dL/dz for the backward kernels (group_norm_backward.wgsl, the split backward kernels through
// group_norm_split_grad.wgsl, group_norm_thread_backward.wgsl).  Needs the constant SILU.

// Whether a group's backward first restores its mean's low part (SiLU rebuilds z from the mean).
fn refine(mean: f32, rstd: f32) -> bool { return SILU && abs(mean) * rstd > REFINE_MEAN_ABOVE; }

// dL/dz from dy; z = scale*xc + shift is the pre-activation (SILU only).
fn dz_of(dy: vec4<f32>, xc: vec4<f32>, scale: vec4<f32>, shift: vec4<f32>) -> vec4<f32> {
  if (!SILU) { return dy; }
  let z = xc * scale + shift;
  let s = 1.0 / (1.0 + exp(-z));
  return dy * s * (1.0 + z * (1.0 - s));
}
