// dweight_c = sum_n rstd[n, g(c)] * (ds[n, c] - mean_lo[n, g(c)] * db[n, c]),  dbias_c = sum_n db[n, c]
// ds and mean_lo are in the group's scaled units (group_norm_coef.wgsl): rstd enters as rstd / s.
// One thread per channel, n in order: deterministic.
//!include group_norm_coef.wgsl
struct DW { N: u32, C: u32, G: u32, Cg: u32 }
@group(0) @binding(0) var<storage, read> DSDB: array<vec4<f32>>;  // (ds, db, 0, 0) per (n, c)
@group(0) @binding(1) var<storage, read> RSTD: array<f32>;
@group(0) @binding(4) var<storage, read> COEF: array<vec4<f32>>;  // mean_lo in z
@group(0) @binding(2) var<storage, read_write> DWEIGHT: array<f32>;
@group(0) @binding(3) var<storage, read_write> DBIAS: array<f32>;
@group(0) @binding(5) var<uniform> q: DW;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let c = gid.x;
  if (c >= q.C) { return; }
  let g = c / q.Cg;
  var dw = 0.0;
  var dbias = 0.0;
  for (var n = 0u; n < q.N; n++) {
    let v = DSDB[n * q.C + c].xy;
    let rstd = RSTD[n * q.G + g];
    dw += over_scale(rstd, rstd_scale(rstd)) * (v.x - COEF[n * q.G + g].z * v.y);
    dbias += v.y;
  }
  DWEIGHT[c] = dw;
  DBIAS[c] = dbias;
}
