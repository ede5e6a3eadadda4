// Elementwise arithmetic for autograd on the device, NumPy broadcasting by
// strides (a broadcast axis has stride 0).  Constant FLAT: all operands dense
// with one shared layout, so element i of each is at i (vec4 fast path).
// meta: [count, op, rank, scalar (f32 bits), shape[rank], a_strides[rank], b_strides[rank]]
// (strides in elements).  Ops: 0 a+b 1 a-b 2 a*b 3 a/b 4 a**b
// 10 a+s 11 a-s 12 s-a 13 a*s 14 a/s 15 s/a 16 a**s 17 s**a 20 -a 21 a (copy, astype, broadcast_to) 22 s (fill)
// 23 sigmoid(a) 24 exp(a) (the formulas of the GroupNorm kernels' SiLU and NumPy's: 1 / (1 + exp(-a)))
@group(0) @binding(0) var<storage, read> A: array<ST_A>;
@group(0) @binding(1) var<storage, read> B: array<ST_B>;
@group(0) @binding(2) var<storage, read_write> Y: array<ST_Y>;
@group(0) @binding(3) var<storage, read> m: array<u32>;

fn powf(x: f32, y: f32) -> f32 {
  if (y == 0.0) { return 1.0; }
  if (y == 1.0) { return x; }
  if (y == 2.0) { return x * x; }
  if (y == 0.5) { return sqrt(x); }
  if (y == -1.0) { return 1.0 / x; }
  if (x != x || y != y) { return x + y; }
  let r = pow(abs(x), y);
  if (x > 0.0) { return r; }
  // inf and NaN built from runtime bits: a constant inf or NaN is a shader-creation error in WGSL
  let zero = bitcast<u32>(x) & 0u;
  if (x == 0.0) { return select(bitcast<f32>(0x7f800000u | zero), 0.0, y > 0.0); }
  if (floor(y) != y) { return bitcast<f32>(0x7fc00000u | zero); }     // negative base, fractional power: NaN
  if (fract(y * 0.5) != 0.0) { return -r; }                     // odd integer power keeps the sign
  return r;
}

fn op4(a: vec4<f32>, b: vec4<f32>, code: u32, s: f32) -> vec4<f32> {
  switch code {
    case 0u: { return a + b; }
    case 1u: { return a - b; }
    case 2u: { return a * b; }
    case 3u: { return a / b; }
    case 4u: { return vec4<f32>(powf(a.x, b.x), powf(a.y, b.y), powf(a.z, b.z), powf(a.w, b.w)); }
    case 10u: { return a + s; }
    case 11u: { return a - s; }
    case 12u: { return s - a; }
    case 13u: { return a * s; }
    case 14u: { return a / s; }
    case 15u: { return s / a; }
    case 16u: { return vec4<f32>(powf(a.x, s), powf(a.y, s), powf(a.z, s), powf(a.w, s)); }
    case 17u: { return vec4<f32>(powf(s, a.x), powf(s, a.y), powf(s, a.z), powf(s, a.w)); }
    case 20u: { return -a; }
    case 22u: { return vec4<f32>(s); }
    case 23u: { return 1.0 / (1.0 + exp(-a)); }
    case 24u: { return exp(a); }
    default: { return a; }
  }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let u = (wid.y * nwg.x + wid.x) * 256u + lid;
  let count = m[0];
  if (u * 4u >= count) { return; }
  let code = m[1];
  let s = bitcast<f32>(m[3]);
  if (FLAT) {
    st_Y(u, op4(ld_A(u), ld_B(u), code, s));
    return;
  }
  let rank = m[2];
  var a: vec4<f32>;
  var b: vec4<f32>;
  for (var k = 0u; k < 4u; k++) {
    var rem = min(u * 4u + k, count - 1u);
    var ia = 0u;
    var ib = 0u;
    for (var d = rank; d > 0u; d--) {
      let extent = m[3u + d];
      let i = rem % extent;
      rem = rem / extent;
      ia += i * m[3u + rank + d];
      ib += i * m[3u + 2u * rank + d];
    }
    a[k] = ld_A(ia >> 2u)[ia & 3u];
    b[k] = ld_B(ib >> 2u)[ib & 3u];
  }
  st_Y(u, op4(a, b, code, s));
}
