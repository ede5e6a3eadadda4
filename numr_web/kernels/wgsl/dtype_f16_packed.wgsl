// Storage helpers for role $ holding float16 without shader-f16: two halves
// per u32, four elements per vec2<u32> (pack2x16float needs no feature).
alias ST_$ = vec2<u32>;
fn ld_$(i: u32) -> vec4<f32> {
  let w = $[i];
  return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));
}
// store
fn st_$(i: u32, v: vec4<f32>) { $[i] = vec2<u32>(pack2x16float(v.xy), pack2x16float(v.zw)); }
