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
// store (pack2x16float: an integer round-to-nearest-even encoder measured about as fast on
// lavapipe and much slower on SwiftShader)
fn st8_$(i: u32, v: mat2x4<f32>) {
  $[i] = vec4<u32>(pack2x16float(v[0].xy), pack2x16float(v[0].zw), pack2x16float(v[1].xy), pack2x16float(v[1].zw));
}
fn st_$(i: u32, v: vec4<f32>) {
  let k = 2u * (i & 1u);
  $[i >> 1u][k] = pack2x16float(v.xy);
  $[i >> 1u][k + 1u] = pack2x16float(v.zw);
}
