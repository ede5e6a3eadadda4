// Products by a power of two that stay exact where the result is subnormal (below float32's
// smallest normal, 1.2e-38).  WGSL lets a device flush subnormal results of arithmetic to zero
// (Chromium's SwiftShader does; lavapipe does not), so the kernels form such results in scaled
// units and build the subnormal's bits with integer operations (round to nearest even).  An rstd
// near 3e-39 (|x| near float32's largest) and the dx of a group whose rstd is tiny are such values.
// Where a loop writes many elements, a group's scale s is tested once, outside it: a loop with
// times_pow2_4 for a rescaled group and a plain one otherwise.  SwiftShader runs an if's body for
// every lane, masked, even where no lane takes it, and with times_pow2_4 in its element loop the
// backward ran 2.4 times as long there (2026-12-04, found by bisecting a browser bench).

const MIN_NORMAL_F32: f32 = 1.17549435e-38;

// The subnormal v * s for a normal v and a power of two s, from the bits of v.
fn pow2_subnormal(v: f32, s: f32) -> f32 {
  let b = bitcast<u32>(v);
  let shift = 1 - (i32((b >> 23u) & 0xffu) + i32((bitcast<u32>(s) >> 23u) & 0xffu) - 127);
  if (shift < 1) { return v * s; }  // rounds up to the smallest normal: no flush
  let sign = b & 0x80000000u;
  if (shift > 25) { return bitcast<f32>(sign); }
  let sh = u32(shift);
  let m = (b & 0x7fffffu) | 0x800000u;
  var q = m >> sh;
  let rem = m & ((1u << sh) - 1u);
  let half = 1u << (sh - 1u);
  if (rem > half || (rem == half && (q & 1u) == 1u)) { q += 1u; }
  return bitcast<f32>(sign | q);
}

// v * s for a power of two s (normal), exact also where the result is subnormal.
fn times_pow2(v: f32, s: f32) -> f32 {
  let r = v * s;
  if (s == 1.0 || !(abs(r) < MIN_NORMAL_F32) || (bitcast<u32>(v) & 0x7f800000u) == 0u) { return r; }
  return pow2_subnormal(v, s);
}

fn times_pow2_4(v: vec4<f32>, s: vec4<f32>) -> vec4<f32> {
  let r = v * s;
  if (all(s == vec4<f32>(1.0)) || !any(abs(r) < vec4<f32>(MIN_NORMAL_F32))) { return r; }
  return vec4<f32>(times_pow2(v.x, s.x), times_pow2(v.y, s.y), times_pow2(v.z, s.z), times_pow2(v.w, s.w));
}

// rstd / s for s = rstd_scale(rstd) (group_norm_coef.wgsl), exact also for a subnormal rstd,
// which a flushing device reads as zero: then s = 2^-126 and rstd / s is its mantissa * 2^-23.
fn over_scale(rstd: f32, s: f32) -> f32 {
  let b = bitcast<u32>(rstd);
  if ((b & 0x7f800000u) != 0u) { return rstd / s; }
  return f32(b & 0x7fffffu) * (1.0 / 8388608.0) * (MIN_NORMAL_F32 / s);
}

fn over_scale4(rstd: vec4<f32>, s: vec4<f32>) -> vec4<f32> {
  return vec4<f32>(over_scale(rstd.x, s.x), over_scale(rstd.y, s.y), over_scale(rstd.z, s.z), over_scale(rstd.w, s.w));
}
