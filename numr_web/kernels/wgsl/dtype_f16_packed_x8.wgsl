// Storage helpers for role $ holding float16 in 16-byte units (the split kernels' 16-bit steps of 8): eight
// halves per vec4<u32> (no feature needed; used with and without shader-f16).
// ld8/st8 move 8 elements (unit i) as the two columns of a mat2x4<f32>; ld/st move 4
// (index i in 4-element steps, half of unit i / 2).
alias ST_$ = vec4<u32>;
fn ld8_$(i: u32) -> mat2x4<f32> {
  let w = $[i];
  return mat2x4<f32>(vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)),
                     vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w)));
}
fn ld_$(i: u32) -> vec4<f32> {
  let w = $[i >> 1u];
  let h = select(w.xy, w.zw, (i & 1u) == 1u);
  return vec4<f32>(unpack2x16float(h.x), unpack2x16float(h.y));
}
// store
// float32 to float16 bits, round to nearest even, with integer operations (pack2x16float measured
// slower on lavapipe): overflow to infinity, NaN kept (quiet), subnormal halves rounded by round()
// (ties to even) of |f| * 2^24
fn half_bits4_$(f: vec4<f32>) -> vec4<u32> {
  let u = bitcast<vec4<u32>>(f);
  let a = u & vec4<u32>(0x7fffffffu);
  let sign = (u >> vec4<u32>(16u)) & vec4<u32>(0x8000u);
  let normal = (a - vec4<u32>(0x38000000u) + vec4<u32>(0xfffu) + ((a >> vec4<u32>(13u)) & vec4<u32>(1u))) >> vec4<u32>(13u);
  let sub = vec4<u32>(round(bitcast<vec4<f32>>(a) * 16777216.0));
  var h = select(normal, sub, a < vec4<u32>(0x38800000u));
  h = select(h, vec4<u32>(0x7c00u), a >= vec4<u32>(0x477ff000u));
  h = select(h, vec4<u32>(0x7e00u), a > vec4<u32>(0x7f800000u));
  return h | sign;
}
fn st8_$(i: u32, v: mat2x4<f32>) {
  let a = half_bits4_$(v[0]);
  let b = half_bits4_$(v[1]);
  $[i] = vec4<u32>(a.x | (a.y << 16u), a.z | (a.w << 16u), b.x | (b.y << 16u), b.z | (b.w << 16u));
}
fn st_$(i: u32, v: vec4<f32>) {
  let a = half_bits4_$(v);
  let k = 2u * (i & 1u);
  $[i >> 1u][k] = a.x | (a.y << 16u);
  $[i >> 1u][k + 1u] = a.z | (a.w << 16u);
}
