// The NCHW split kernels' cut (group_norm_split.wgsl, group_norm_split_backward.wgsl): the
// chunk's rows (one (n, c) each, p.steps steps: 8-element units with U8, else vec4s) in p.P
// pieces per row.  Needs Params p and the constants WG, INTERLEAVE, U8.

const UNIT_SH: u32 = select(2u, 3u, U8);  // log2 of the elements in a step

//!include grid_thread.wgsl

// The thread's p.A consecutive items [first, last) of count (first == last: none).
fn thread_items(wid: vec3<u32>, nwg: vec3<u32>, lid: u32, count: u32) -> vec2<u32> {
  let first = thread_index(wid, nwg, lid) * p.A;
  if (first >= count) { return vec2<u32>(0u); }
  return vec2<u32>(first, min(first + p.A, count));
}

// The elementwise pass (apply, dx): the kernel's write_steps(first, last, xb) over the chunk's
// steps [first, last) of this thread, one step with INTERLEAVE (GPUs), else p.A consecutive
// ones; xb: the chunk's first step in X.
fn elementwise_pass(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) {
  let total = p.ngroups * (p.M >> UNIT_SH);
  let xb = p.x_base >> UNIT_SH;
  if (INTERLEAVE) {
    let t = thread_index(wid, nwg, lid);
    if (t < total) { write_steps(t, t + 1u, xb); }
    return;
  }
  let first = thread_index(wid, nwg, lid) * p.A;
  if (first >= total) { return; }
  write_steps(first, min(first + p.A, total), xb);
}

// Piece pi: step indices u0, u0 + du, ... below u1 into X, its row and the row's group inside
// the chunk.  Contiguous pieces (CPU adapters: long runs per thread), or with INTERLEAVE (GPUs)
// piece pc of a row takes steps pc, pc + P, pc + 2P, ...: neighbouring threads read
// neighbouring vec4s.
struct Piece { u0: u32, u1: u32, du: u32, row: u32, gl: u32 }

fn piece_of(pi: u32) -> Piece {
  let row = pi / p.P;
  let pc = pi % p.P;
  var out: Piece;
  let rb = (p.x_base >> UNIT_SH) + row * p.steps;
  if (INTERLEAVE) {
    out.u0 = rb + pc;
    out.u1 = rb + p.steps;
    out.du = p.P;
  } else {
    let q = p.steps / p.P;
    let r = p.steps % p.P;
    out.u0 = rb + pc * q + min(pc, r);
    out.u1 = out.u0 + q + select(0u, 1u, pc < r);
    out.du = 1u;
  }
  out.row = row;
  out.gl = row / p.Cg;
  return out;
}
