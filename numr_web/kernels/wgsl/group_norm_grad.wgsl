// Shared by every backward kernel (group_norm_backward.wgsl, the split backward kernels through
// group_norm_split_grad.wgsl, group_norm_thread_backward.wgsl).  Needs group_norm_coef.wgsl,
// MEAN, RSTD, p and the constant SILU.

// A group's saved statistics and the scaled units of its sums (group_norm_coef.wgsl): ms = mean * s,
// rstd_s = rstd / s.
struct GradGroup { n: u32, g: u32, mean: f32, rstd: f32, sc: f32, ms: f32, rstd_s: f32 }

fn grad_group(gg: u32) -> GradGroup {
  let mean = MEAN[gg];
  let rstd = RSTD[gg];
  let sc = rstd_scale(rstd);
  return GradGroup(gg / p.G, gg % p.G, mean, rstd, sc, mean * sc, over_scale(rstd, sc));
}

// Whether a group's backward first restores its mean's low part (SiLU rebuilds z from the mean).
fn refine(mean: f32, rstd: f32) -> bool { return SILU && abs(mean) * rstd > REFINE_MEAN_ABOVE; }

// dL/dz from dy; z = scale*xc + shift is the pre-activation (SILU only).
fn dz_of(dy: vec4<f32>, xc: vec4<f32>, scale: vec4<f32>, shift: vec4<f32>) -> vec4<f32> {
  if (!SILU) { return dy; }
  let z = xc * scale + shift;
  let s = 1.0 / (1.0 + exp(-z));
  return dy * s * (1.0 + z * (1.0 - s));
}
