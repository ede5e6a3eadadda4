// Elementwise GroupNorm passes over a chunk, for shapes the fused kernels do not
// take (rows not a multiple of 4 elements): every lane finds its own (n, c, g).
// Entry points: apply (forward output from AUX) and dx (backward from COEF).
// Constants: NHWC, SILU, AFFINE.  Four elements per thread; a chunk starts at
// a multiple of 4 elements, and writes past its end land in padding.
//!include group_norm_coef.wgsl
struct Flat {
  C: u32, HW: u32, G: u32, Cg: u32,
  x_base: u32,   // element offset of the chunk inside the binding (a multiple of 4)
  n_first: u32,  // first sample of the chunk (NHWC) / unused
  g_first: u32,  // first group of the chunk (NCHW)
  count: u32,    // elements in the chunk
}
@group(0) @binding(0) var<storage, read> X: array<ST_X>;
@group(0) @binding(1) var<storage, read> DY: array<ST_DY>;
@group(0) @binding(2) var<storage, read_write> Y: array<ST_Y>;
@group(0) @binding(3) var<storage, read> W: array<f32>;
@group(0) @binding(4) var<storage, read> B: array<f32>;
@group(0) @binding(5) var<storage, read> STAT: array<vec4<f32>>;  // AUX (apply) or COEF (dx) per group
// AUX: (mean_hi, mean_lo_s, rstd_s, s), COEF: (c0, c1, mean_lo_s, zlo_s); s: the group's power-of-two
// scale (group_norm_forward.wgsl; backward: rstd_scale in group_norm_coef.wgsl)
@group(0) @binding(6) var<storage, read> MEAN: array<f32>;
@group(0) @binding(7) var<storage, read> RSTD: array<f32>;
@group(0) @binding(8) var<uniform> f: Flat;

struct Lane { c: u32, gg: u32 }

fn lane_of(q: u32) -> Lane {
  var l: Lane;
  if (NHWC) {
    l.c = q % f.C;
    l.gg = (f.n_first + q / (f.HW * f.C)) * f.G + l.c / f.Cg;
  } else {
    // chunks hold whole groups: q / M is the group inside the chunk
    let m = f.Cg * f.HW;
    let gl = q / m;
    l.gg = f.g_first + gl;
    l.c = (l.gg % f.G) * f.Cg + (q % m) / f.HW;
  }
  return l;
}

fn wv(c: u32) -> f32 { if (AFFINE) { return W[min(c, f.C - 1u)]; } return 1.0; }
fn bv(c: u32) -> f32 { if (AFFINE) { return B[min(c, f.C - 1u)]; } return 0.0; }

fn unit_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  return (wid.y * nwg.x + wid.x) * 256u + lid;
}

@compute @workgroup_size(256)
fn apply(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
  let u = unit_index(wid, nwg, lid);
  if (u * 4u >= f.count) { return; }
  var hi: vec4<f32>; var scale: vec4<f32>; var shift: vec4<f32>; var s: vec4<f32>;
  for (var k = 0u; k < 4u; k++) {
    let l = lane_of(min(u * 4u + k, f.count - 1u));
    let a = STAT[l.gg];
    let sc = a.z * wv(l.c);
    hi[k] = a.x * a.w;
    scale[k] = sc;
    shift[k] = bv(l.c) - a.y * sc;
    s[k] = a.w;
  }
  let ui = (f.x_base >> 2u) + u;
  var y = (ld_X(ui) * s - hi) * scale + shift;
  if (SILU) { y = y / (1.0 + exp(-y)); }
  st_Y(ui, y);
}

@compute @workgroup_size(256)
fn dx(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
      @builtin(local_invocation_index) lid: u32) {
  let u = unit_index(wid, nwg, lid);
  if (u * 4u >= f.count) { return; }
  var ms: vec4<f32>; var sc: vec4<f32>; var alpha: vec4<f32>; var scale: vec4<f32>; var shift: vec4<f32>;
  var c0: vec4<f32>; var c1: vec4<f32>;
  for (var k = 0u; k < 4u; k++) {
    let l = lane_of(min(u * 4u + k, f.count - 1u));
    let cf = STAT[l.gg];
    let rstd = RSTD[l.gg];
    let s = rstd_scale(rstd);
    sc[k] = s;
    ms[k] = MEAN[l.gg] * s;
    scale[k] = over_scale(rstd, s) * wv(l.c);
    alpha[k] = scale[k];
    shift[k] = bv(l.c) - cf.w * scale[k];   // cf.w: the mean's low part z was rebuilt with (SILU)
    c0[k] = cf.x;
    c1[k] = cf.y;
  }
  let ui = (f.x_base >> 2u) + u;
  let xc = ld_X(ui) * sc - ms;
  var dz = ld_DY(ui);
  if (SILU) {
    let z = xc * scale + shift;
    let s = 1.0 / (1.0 + exp(-z));
    dz = dz * s * (1.0 + z * (1.0 - s));
  }
  st_Y(ui, times_pow2_4(alpha * dz + c1 * xc + c0, sc));
}
