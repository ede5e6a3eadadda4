// The channels-last split kernels' cut (group_norm_split_nhwc.wgsl,
// group_norm_split_nhwc_backward.wgsl): a thread owns KQ adjacent channel quads (quad block q0
// of p.A per row) over tile pc (of p.P) of consecutive positions of sample nl of the chunk.
// Needs Params p and the constants WG, KQ.

//!include grid_thread.wgsl

// A thread's cut: sample nl of the chunk, tile pc, first quad q0, positions [t0, t1), and the
// vec4 index of (nl, t0, q0) in X.
struct Cut { nl: u32, pc: u32, q0: u32, t0: u32, t1: u32, u: u32 }

fn cut_of(tid: u32) -> Cut {
  var o: Cut;
  let Q = p.C >> 2u;
  o.q0 = (tid % p.A) * KQ;
  let rest = tid / p.A;
  o.pc = rest % p.P;
  o.nl = rest / p.P;
  let q = p.HW / p.P;
  let r = p.HW % p.P;
  o.t0 = o.pc * q + min(o.pc, r);
  o.t1 = o.t0 + q + select(0u, 1u, o.pc < r);
  o.u = (p.x_base >> 2u) + (o.nl * p.HW + o.t0) * Q + o.q0;
  return o;
}

// global group of each lane of quad q in sample nl
fn lane_groups(nl: u32, q: u32) -> vec4<u32> {
  let c = vec4<u32>(4u * q) + vec4<u32>(0u, 1u, 2u, 3u);
  return vec4<u32>(p.g_first + nl * p.G) + c / p.Cg;
}
