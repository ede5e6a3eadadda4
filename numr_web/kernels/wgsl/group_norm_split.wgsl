// GroupNorm forward, split plan (NCHW, rows of HW % 4 == 0): three kinds of barrier-free
// dispatch instead of one workgroup per (n, g).
//
//   partials: the chunk's rows (one (n, c) each, HW / 4 vec4 steps) are cut into P pieces;
//             every thread sums A consecutive pieces (of one group, or of several consecutive
//             groups when groups are small) and writes one (S1, S2) per piece to PART.
//   combine:  one thread per group totals its Cg * P pieces in piece order (fixed order: no
//             atomics, bitwise repeatable) and finishes the statistics exactly as the fused
//             kernel does (group_norm_stats.wgsl).  A group that needs a second sum (poor shift,
//             overflow, underflow) is summed again by its combine thread when the group is
//             small (INLINE_REDO: at most INLINE_REDO_STEPS vec4s), else marked in AUX (w < 0:
//             (k1, 0, 0, -s)) and FIX = true runs partials and combine again for the marked
//             groups only (the others exit at once).
//   apply:    every thread writes A consecutive vec4s of y, row by row (per-row scale, shift).
//
// Params (group_norm_common.wgsl) read here: A (pieces per thread, or vec4s per thread in
// apply), P (pieces per row), items (pieces in the chunk), steps (HW / 4).
// Constants: NHWC = false, VEC = 4, SILU, AFFINE, WG, FIX, INLINE_REDO, INTERLEAVE, U8.
// U8 (16-bit storage, HW % 8 == 0): steps, pieces and the apply pass count 8-element units
// (p.steps = HW / 8; one 16-byte load each with the _x8 storage helpers), else vec4 steps.
//!include group_norm_common.wgsl
//!include group_norm_stats.wgsl
//!include group_norm_split_rows.wgsl
//!include group_norm_split_stats.wgsl
@group(0) @binding(0) var<storage, read> X: array<ST_X>;
@group(0) @binding(1) var<storage, read_write> Y: array<ST_Y>;
@group(0) @binding(2) var<storage, read> W: array<f32>;
@group(0) @binding(3) var<storage, read> B: array<f32>;
@group(0) @binding(4) var<storage, read_write> MEAN: array<f32>;
@group(0) @binding(5) var<storage, read_write> RSTD: array<f32>;
@group(0) @binding(6) var<storage, read_write> AUX: array<vec4<f32>>;   // (mean_hi, mean_lo_s, rstd_s, s) per group
@group(0) @binding(7) var<storage, read_write> PART: array<vec2<f32>>;  // (S1, S2) per piece of the chunk
@group(0) @binding(8) var<uniform> p: Params;

// The group's shift K and scale: its first element and 1, or (FIX) the marked redo's.
// Returns (k, s, go): go = 0 when FIX and the group needs no second sum.
fn shift_of(gl: u32) -> vec3<f32> {
  if (FIX) { return marked_shift(p.g_first + gl); }
  return vec3<f32>(ld_X((p.x_base >> 2u) + gl * (p.M >> 2u)).x, 1.0, 1.0);
}

@compute @workgroup_size(WG)
fn partials(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
  let run = thread_items(wid, nwg, lid, p.items);
  for (var pi = run.x; pi < run.y; pi++) {
    let pc = piece_of(pi);
    let ks = shift_of(pc.gl);
    if (ks.z == 0.0) { continue; }
    let sc = ks.y;
    let k = ks.x * sc;
    var s1 = vec4<f32>(0.0);
    var s2 = vec4<f32>(0.0);
    // two-level sums (blocks of 32 steps), as in the fused kernel
    var u = pc.u0;
    loop {
      if (u >= pc.u1) { break; }
      let uend = min(u + 32u * pc.du, pc.u1);
      var b1 = vec4<f32>(0.0);
      var b2 = vec4<f32>(0.0);
      for (; u < uend; u += pc.du) {
        if (U8) {
          let m = ld8_X(u);
          let d = m[0] * sc - k;
          let e = m[1] * sc - k;
          b1 += d + e;
          b2 += d * d + e * e;
        } else {
          let d = ld_X(u) * sc - k;
          b1 += d;
          b2 += d * d;
        }
      }
      s1 += b1;
      s2 += b2;
    }
    PART[pi] = vec2<f32>(dot(s1, vec4<f32>(1.0)), dot(s2, vec4<f32>(1.0)));
  }
}

@compute @workgroup_size(WG)
fn combine(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
  let gl = thread_index(wid, nwg, lid);
  if (gl >= p.ngroups) { return; }
  let ks = shift_of(gl);
  if (ks.z == 0.0) { return; }
  let per = p.Cg * p.P;
  // two-level sums over the pieces (blocks of 32), in piece order
  var s = vec2<f32>(0.0);
  var i = gl * per;
  let iend = i + per;
  loop {
    if (i >= iend) { break; }
    let bend = min(i + 32u, iend);
    var b = vec2<f32>(0.0);
    for (; i < bend; i++) { b += PART[i]; }
    s += b;
  }
  finish_group(gl, ks, s);
}

// A group's second sum (finish_group), by its combine thread: (S1, S2) of x sc - k, vec4 steps.
fn redo_sums(gl: u32, k: f32, sc: f32) -> vec2<f32> {
  let u0 = (p.x_base >> 2u) + gl * (p.M >> 2u);
  let t = run_sums(u0, u0 + (p.M >> 2u), k, sc, false);
  return vec2<f32>(dot(t[0], vec4<f32>(1.0)), dot(t[1], vec4<f32>(1.0)));
}

@compute @workgroup_size(WG)
fn apply(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
  elementwise_pass(wid, nwg, lid);
}

// y over steps [first, last) of the chunk, row by row.
fn write_steps(first: u32, last: u32, xb: u32) {
  var t = first;
  loop {
    if (t >= last) { break; }
    let row = t / p.steps;
    let rend = min((row + 1u) * p.steps, last);
    let gl = row / p.Cg;
    let gg = p.g_first + gl;
    let c = (gg % p.G) * p.Cg + row % p.Cg;
    let a = AUX[gg];
    let sc = a.w;
    let hs = a.x * sc;
    let scale = lane_w(c) * a.z;
    let shift = lane_b(c) - a.y * scale;
    for (; t < rend; t++) {
      if (U8) {
        let m = ld8_X(xb + t);
        st8_Y(xb + t, mat2x4<f32>(y_scaled(m[0], sc, hs, scale, shift), y_scaled(m[1], sc, hs, scale, shift)));
      } else {
        st_Y(xb + t, y_scaled(ld_X(xb + t), sc, hs, scale, shift));
      }
    }
  }
}
