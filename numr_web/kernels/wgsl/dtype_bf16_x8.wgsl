// Storage helpers for role $ holding bfloat16 in 16-byte units (the split kernels' 16-bit steps of 8): the
// high 16 bits of a float32, eight per vec4<u32> (element 2k in the low half).  ld8/st8 move
// 8 elements (unit i) as the two columns of a mat2x4<f32>; ld/st move 4 (index i in 4-element
// steps, half of unit i / 2).  Stores round to nearest even and keep NaNs, as dtype_bf16.wgsl.
alias ST_$ = vec4<u32>;
fn bf16_pair_$(w: u32) -> vec2<f32> { return vec2<f32>(bitcast<f32>(w << 16u), bitcast<f32>(w & 0xffff0000u)); }
fn ld8_$(i: u32) -> mat2x4<f32> {
  let w = $[i];
  return mat2x4<f32>(vec4<f32>(bf16_pair_$(w.x), bf16_pair_$(w.y)), vec4<f32>(bf16_pair_$(w.z), bf16_pair_$(w.w)));
}
fn ld_$(i: u32) -> vec4<f32> {
  let w = $[i >> 1u];
  let h = select(w.xy, w.zw, (i & 1u) == 1u);
  return vec4<f32>(bf16_pair_$(h.x), bf16_pair_$(h.y));
}
// store
fn bf16_bits_$(f: f32) -> u32 {
  let u = bitcast<u32>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) { return (u >> 16u) | 0x40u; }  // NaN stays a (quiet) NaN
  return (u + 0x7fffu + ((u >> 16u) & 1u)) >> 16u;                       // round to nearest even
}
fn bf16_word_$(a: f32, b: f32) -> u32 { return bf16_bits_$(a) | (bf16_bits_$(b) << 16u); }
fn st8_$(i: u32, v: mat2x4<f32>) {
  $[i] = vec4<u32>(bf16_word_$(v[0].x, v[0].y), bf16_word_$(v[0].z, v[0].w),
                   bf16_word_$(v[1].x, v[1].y), bf16_word_$(v[1].z, v[1].w));
}
fn st_$(i: u32, v: vec4<f32>) {
  let k = 2u * (i & 1u);
  $[i >> 1u][k] = bf16_word_$(v.x, v.y);
  $[i >> 1u][k + 1u] = bf16_word_$(v.z, v.w);
}
