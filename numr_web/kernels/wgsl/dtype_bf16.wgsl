// Storage helpers for role $ holding bfloat16: the high 16 bits of a float32,
// two per u32 (element 2k in the low half), four elements per vec2<u32>.
alias ST_$ = vec2<u32>;
fn ld_$(i: u32) -> vec4<f32> {
  let w = $[i];
  return vec4<f32>(bitcast<f32>(w.x << 16u), bitcast<f32>(w.x & 0xffff0000u),
                   bitcast<f32>(w.y << 16u), bitcast<f32>(w.y & 0xffff0000u));
}
// 8 elements (two 4-element steps) as the columns of a mat2x4<f32> (one 16-byte unit in the _x8 helpers)
fn ld8_$(i: u32) -> mat2x4<f32> { return mat2x4<f32>(ld_$(2u * i), ld_$(2u * i + 1u)); }
// store
fn bf16_bits_$(f: f32) -> u32 {
  let u = bitcast<u32>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) { return (u >> 16u) | 0x40u; }  // NaN stays a (quiet) NaN
  return (u + 0x7fffu + ((u >> 16u) & 1u)) >> 16u;                       // round to nearest even
}
fn st_$(i: u32, v: vec4<f32>) {
  $[i] = vec2<u32>(bf16_bits_$(v.x) | (bf16_bits_$(v.y) << 16u),
                   bf16_bits_$(v.z) | (bf16_bits_$(v.w) << 16u));
}
fn st8_$(i: u32, v: mat2x4<f32>) {
  st_$(2u * i, v[0]);
  st_$(2u * i + 1u, v[1]);
}
