// Storage helpers for role $ holding float32: one vec4 = 4 elements.
alias ST_$ = vec4<f32>;
fn ld_$(i: u32) -> vec4<f32> { return $[i]; }
// store
fn st_$(i: u32, v: vec4<f32>) { $[i] = v; }
