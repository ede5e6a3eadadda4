// Plain copies, the benchmark's yardstick: the same bytes through the same
// adapter.  16 bytes per step.  Entry points:
//   copy_vec4:   one 16-byte unit per thread (the classic GPU copy)
//   copy_ranges: each thread copies its own contiguous range (what CPU
//                adapters like lavapipe run best)
//   copy_grid:   grid-stride loop (what SwiftShader runs best)
struct CopyParams { units: u32, per_thread: u32, threads: u32, _pad: u32 }
@group(0) @binding(0) var<storage, read> SRC: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> DST: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> c: CopyParams;

fn tid(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 { return (wid.y * nwg.x + wid.x) * 256u + lid; }

@compute @workgroup_size(256)
fn copy_vec4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
  let u = tid(wid, nwg, lid);
  if (u < c.units) { DST[u] = SRC[u]; }
}

@compute @workgroup_size(256)
fn copy_ranges(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
  let t = tid(wid, nwg, lid);
  let start = t * c.per_thread;
  let end = min(start + c.per_thread, c.units);
  for (var u = start; u < end; u++) { DST[u] = SRC[u]; }
}

@compute @workgroup_size(256)
fn copy_grid(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
  for (var u = tid(wid, nwg, lid); u < c.units; u += c.threads) { DST[u] = SRC[u]; }
}
