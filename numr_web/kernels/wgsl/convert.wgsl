// A dense array's elements from storage format A to storage format Y, in the same layout (astype, a
// copy in place of its own layout): element i of A to element i of Y, four per invocation.  The same
// loads and stores as elementwise.wgsl's copy (op 21), so the same bits; a kernel of its own because
// that one's switch over every operation, powers included, is compiled with it: on SwiftShader about
// 0.1 s a variant against about 0.01 s for this one (scripts/pipeline-compile-times), and a first
// float16 or bfloat16 call compiles two of them (to and from float32).
// meta: [count]
@group(0) @binding(0) var<storage, read> A: array<ST_A>;
@group(0) @binding(1) var<storage, read_write> Y: array<ST_Y>;
@group(0) @binding(2) var<storage, read> m: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let u = (wid.y * nwg.x + wid.x) * 256u + lid;
  if (u * 4u >= m[0]) { return; }
  st_Y(u, ld_A(u));
}
