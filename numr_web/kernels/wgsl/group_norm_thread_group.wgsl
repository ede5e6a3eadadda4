// Shared by the thread plan's kernels (group_norm_thread.wgsl, group_norm_thread_backward.wgsl):
// the (n, g) group an invocation takes and where it lies, counted in steps of 4 elements (vec4s)
// or, with U8 (16-bit storage in 16-byte units), of 8.  Needs p (struct Params), WG and U8.

// steps of n elements
fn steps(n: u32) -> u32 { return select(n >> 2u, n >> 3u, U8); }

// gl: the group within the chunk (p.ngroups or more: past the chunk's last group, nothing to do);
// gg: within the call; first: its first step; nv: its steps; hw: the steps of one of its rows.
struct ThreadGroup { gl: u32, gg: u32, first: u32, nv: u32, hw: u32 }

fn thread_group(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> ThreadGroup {
  let gl = (wid.y * nwg.x + wid.x) * WG + lid;
  return ThreadGroup(gl, p.g_first + gl, steps(p.x_base + gl * p.M), steps(p.M), steps(p.HW));
}
