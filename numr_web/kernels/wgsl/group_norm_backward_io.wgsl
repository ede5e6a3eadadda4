// The bindings of the backward kernels that take one (n, g) group per workgroup or per invocation
// (group_norm_backward.wgsl, group_norm_thread_backward.wgsl): the launcher passes them the same
// list (the thread plan leaves PART empty).
@group(0) @binding(0) var<storage, read> X: array<ST_X>;
@group(0) @binding(1) var<storage, read> DY: array<ST_DY>;
@group(0) @binding(2) var<storage, read_write> DX: array<ST_DX>;
@group(0) @binding(3) var<storage, read> W: array<f32>;
@group(0) @binding(4) var<storage, read> B: array<f32>;
@group(0) @binding(5) var<storage, read> MEAN: array<f32>;
@group(0) @binding(6) var<storage, read> RSTD: array<f32>;
// One workspace binding holds three arrays (a kernel may bind at most 8 storage buffers on
// WebGPU's default limits): PART, (ds, db) per item and group of the chunk, from 0; DSDB,
// (ds, db, 0, 0) per (n, c), from p.dsdb_at; COEF, (c0, c1, mean_lo, zlo) per (n, g),
// from p.coef_at (offsets in vec4s).
@group(0) @binding(7) var<storage, read_write> WS: array<vec4<f32>>;  // workspace: PART from 0, DSDB at p.dsdb_at, COEF at p.coef_at
@group(0) @binding(8) var<uniform> p: Params;
