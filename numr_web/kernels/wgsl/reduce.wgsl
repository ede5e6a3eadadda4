// Sums over axes (float32 accumulation, fixed order: deterministic).
// Output q in [0, O * S): output o = q / S, split s = q % S sums the s-th
// contiguous share of the reduced index range; a second launch with S = 1
// totals the splits.  Each output is scaled by `scale` (1, or 1/count for mean).
// meta: [O*S, S, R, KD, RD, scale (f32 bits), kshape[KD], kstrides[KD], rshape[RD], rstrides[RD]]
@group(0) @binding(0) var<storage, read> A: array<ST_A>;
@group(0) @binding(1) var<storage, read_write> Y: array<ST_Y>;
@group(0) @binding(2) var<storage, read> m: array<u32>;

fn at_a(i: u32) -> f32 { return ld_A(i >> 2u)[i & 3u]; }

fn reduce_one(q: u32) -> f32 {
  let S = m[1];
  let R = m[2];
  let kd = m[3];
  let rd = m[4];
  let o = q / S;
  let s = q % S;
  var rem = o;
  var base = 0u;
  for (var d = kd; d > 0u; d--) {
    let extent = m[5u + d];
    base += (rem % extent) * m[5u + kd + d];
    rem = rem / extent;
  }
  let share = R / S;
  let extra = R % S;
  let r0 = s * share + min(s, extra);
  let r1 = r0 + share + select(0u, 1u, s < extra);
  let roff = 6u + 2u * kd;
  var acc = 0.0;
  if (rd == 1u) {
    let stride = m[roff + 1u];
    for (var r = r0; r < r1; r++) { acc += at_a(base + r * stride); }
  } else {
    for (var r = r0; r < r1; r++) {
      var rr = r;
      var idx = base;
      for (var d = rd; d > 0u; d--) {
        let extent = m[roff + d - 1u];
        idx += (rr % extent) * m[roff + rd + d - 1u];
        rr = rr / extent;
      }
      acc += at_a(idx);
    }
  }
  return acc * bitcast<f32>(m[5]);
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let u = (wid.y * nwg.x + wid.x) * 64u + lid;
  let total = m[0];
  if (u * 4u >= total) { return; }
  var out: vec4<f32>;
  for (var k = 0u; k < 4u; k++) { out[k] = reduce_one(min(u * 4u + k, total - 1u)); }
  st_Y(u, out);
}
