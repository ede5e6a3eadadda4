// Storage helpers for role $ holding float32: one vec4 = 4 elements.
alias ST_$ = vec4<f32>;
fn ld_$(i: u32) -> vec4<f32> { return $[i]; }
// 8 elements (two 4-element steps) as the columns of a mat2x4<f32> (one 16-byte unit in the _x8 helpers)
fn ld8_$(i: u32) -> mat2x4<f32> { return mat2x4<f32>(ld_$(2u * i), ld_$(2u * i + 1u)); }
// store
fn st_$(i: u32, v: vec4<f32>) { $[i] = v; }
fn st8_$(i: u32, v: mat2x4<f32>) {
  st_$(2u * i, v[0]);
  st_$(2u * i + 1u, v[1]);
}
