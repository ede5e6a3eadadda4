// Storage helpers for role $ holding float16 with the shader-f16 feature.
alias ST_$ = vec4<f16>;
fn ld_$(i: u32) -> vec4<f32> { return vec4<f32>($[i]); }
// store
fn st_$(i: u32, v: vec4<f32>) { $[i] = vec4<f16>(v); }
