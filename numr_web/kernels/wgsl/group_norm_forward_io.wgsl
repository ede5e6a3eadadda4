// The bindings of the forward kernels that take one (n, g) group per workgroup or per invocation
// (group_norm_forward.wgsl, group_norm_thread.wgsl): the launcher passes them the same list.
@group(0) @binding(0) var<storage, read> X: array<ST_X>;
@group(0) @binding(1) var<storage, read_write> Y: array<ST_Y>;
@group(0) @binding(2) var<storage, read> W: array<f32>;
@group(0) @binding(3) var<storage, read> B: array<f32>;
@group(0) @binding(4) var<storage, read_write> MEAN: array<f32>;
@group(0) @binding(5) var<storage, read_write> RSTD: array<f32>;
@group(0) @binding(6) var<storage, read_write> AUX: array<vec4<f32>>;   // (mean_hi, mean_lo_s, rstd_s, s) per group
@group(0) @binding(7) var<uniform> p: Params;
