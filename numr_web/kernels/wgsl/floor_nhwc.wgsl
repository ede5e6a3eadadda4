// A benchmark's floor, not GroupNorm (numr_web.bench.floor, layout "nhwc"): the least work any kernel
// that reads a channels-last group twice does.  A channels-last group is cpg adjacent channels of
// every position, a strided slab.  One invocation takes a window of Q channel quads of one sample
// (whole groups: a multiple of cpg and of 4 channels, at least 16 where C allows) and walks its HW
// rows twice, WG windows per workgroup (the lanes of a SIMD batch read neighbouring segments of the
// same rows): per-channel running sums (one vec4 per quad, Q a constant: registers; one per group
// where a group is QG whole quads), folded into the window's groups once, then the output with
// per-channel scale and shift (per group where a group is whole quads: on lavapipe the bfloat16
// backward at 2x1280x16x16 took 6.7 ms so against 12.2 ms with the channels' values, one probe).
//   floor_forward:  sum x and sum x*x per group, then OUT = x * a + b
//   floor_backward: sum dy and sum dy*x per group, then OUT = dy * 0.5 + x * b + c
// Plain running sums, no shift, no redo, no per-channel weight, no statistics stored: GroupNorm's
// memory traffic and its least arithmetic, with the storage conversions of the dtype: 4 elements a
// load, or 8 (U8: 16-bit storage in 16-byte units, quads loaded in pairs, as the channels-last split
// plan loads them where C % 8 == 0; then Q is even and every row starts on a whole unit).  Requires
// C % 4 == 0 (whole quads per row), as the channels-last split plan does.
struct FloorNhwc { windows: u32, hw: u32, c4: u32, per_sample: u32, cpg: u32, inv_m: f32, _p0: u32, _p1: u32 }
@group(0) @binding(0) var<storage, read> X: array<ST_X>;
@group(0) @binding(1) var<storage, read> DY: array<ST_DY>;
@group(0) @binding(2) var<storage, read_write> OUT: array<ST_OUT>;
@group(0) @binding(3) var<uniform> F: FloorNhwc;

const GMAX: u32 = Q * 4u;  // at most one group per channel
const QG1: u32 = max(QG, 1u);  // QG as a divisor (WGSL evaluates a constant division by zero even in a branch not taken)

// The first quad of this invocation's window (its row 0); .y == 0 past the last window.
fn window_base(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> vec2<u32> {
  let b = (wid.y * nwg.x + wid.x) * WG + lid;
  if (b >= F.windows) { return vec2<u32>(0u, 0u); }
  let n = b / F.per_sample;
  return vec2<u32>(n * F.hw * F.c4 + (b % F.per_sample) * Q, 1u);
}

// The sums' slot of quad j: its channels' own (QG == 0), or, where a group is QG whole quads, its
// group's (one vec4 per group: fewer live values, the same sums).
fn slot(j: u32) -> u32 {
  if (QG > 0u) { return j / QG1; }
  return j;
}

// The window's sums folded into its groups (group k: the channels c with c / cpg == k).
fn group_sums(s: array<vec4<f32>, Q>) -> array<f32, GMAX> {
  var g: array<f32, GMAX>;
  if (QG > 0u) {
    for (var k = 0u; k < Q / QG1; k++) {
      g[k] = dot(s[k], vec4<f32>(1.0));
    }
    return g;
  }
  for (var j = 0u; j < Q; j++) {
    for (var l = 0u; l < 4u; l++) {
      let k = (j * 4u + l) / F.cpg;
      g[k] += s[j][l];
    }
  }
  return g;
}

// Per-group values spread back to a vec4 per quad (each channel its group's).
fn per_channel(v: array<f32, GMAX>) -> array<vec4<f32>, Q> {
  var out: array<vec4<f32>, Q>;
  for (var j = 0u; j < Q; j++) {
    if (QG > 0u) {
      out[j] = vec4<f32>(v[j / QG1]);
    } else {
      for (var l = 0u; l < 4u; l++) {
        out[j][l] = v[(j * 4u + l) / F.cpg];
      }
    }
  }
  return out;
}

@compute @workgroup_size(WG)
fn floor_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
  let wb = window_base(wid, nwg, lid);
  if (wb.y == 0u) { return; }
  var s1: array<vec4<f32>, Q>;
  var s2: array<vec4<f32>, Q>;
  for (var s = 0u; s < F.hw; s++) {
    let row = wb.x + s * F.c4;
    if (U8) {
      for (var j = 0u; j < Q; j += 2u) {
        let v = ld8_X((row + j) >> 1u);
        s1[slot(j)] += v[0];
        s2[slot(j)] += v[0] * v[0];
        s1[slot(j + 1u)] += v[1];
        s2[slot(j + 1u)] += v[1] * v[1];
      }
    } else {
      for (var j = 0u; j < Q; j++) {
        let v = ld_X(row + j);
        s1[slot(j)] += v;
        s2[slot(j)] += v * v;
      }
    }
  }
  let g1 = group_sums(s1);
  let g2 = group_sums(s2);
  var ga: array<f32, GMAX>;
  var gb: array<f32, GMAX>;
  for (var k = 0u; k < Q * 4u / F.cpg; k++) {
    let mean = g1[k] * F.inv_m;
    ga[k] = inverseSqrt(max(g2[k] * F.inv_m - mean * mean, 0.0) + 1e-5);
    gb[k] = -mean * ga[k];
  }
  let a = per_channel(ga);
  let b = per_channel(gb);
  for (var s = 0u; s < F.hw; s++) {
    let row = wb.x + s * F.c4;
    if (U8) {
      for (var j = 0u; j < Q; j += 2u) {
        let v = ld8_X((row + j) >> 1u);
        let a0 = select(a[j], vec4<f32>(ga[slot(j)]), QG > 0u);
        let b0 = select(b[j], vec4<f32>(gb[slot(j)]), QG > 0u);
        let a1 = select(a[j + 1u], vec4<f32>(ga[slot(j + 1u)]), QG > 0u);
        let b1 = select(b[j + 1u], vec4<f32>(gb[slot(j + 1u)]), QG > 0u);
        st8_OUT((row + j) >> 1u, mat2x4<f32>(v[0] * a0 + b0, v[1] * a1 + b1));
      }
    } else {
      for (var j = 0u; j < Q; j++) {
        let aj = select(a[j], vec4<f32>(ga[slot(j)]), QG > 0u);
        let bj = select(b[j], vec4<f32>(gb[slot(j)]), QG > 0u);
        st_OUT(row + j, ld_X(row + j) * aj + bj);
      }
    }
  }
}

@compute @workgroup_size(WG)
fn floor_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
  let wb = window_base(wid, nwg, lid);
  if (wb.y == 0u) { return; }
  var sd: array<vec4<f32>, Q>;   // per channel: sum dy
  var sdx: array<vec4<f32>, Q>;  // and sum dy * x
  for (var s = 0u; s < F.hw; s++) {
    let row = wb.x + s * F.c4;
    if (U8) {
      for (var j = 0u; j < Q; j += 2u) {
        let d = ld8_DY((row + j) >> 1u);
        let v = ld8_X((row + j) >> 1u);
        sd[slot(j)] += d[0];
        sdx[slot(j)] += d[0] * v[0];
        sd[slot(j + 1u)] += d[1];
        sdx[slot(j + 1u)] += d[1] * v[1];
      }
    } else {
      for (var j = 0u; j < Q; j++) {
        let d = ld_DY(row + j);
        sd[slot(j)] += d;
        sdx[slot(j)] += d * ld_X(row + j);
      }
    }
  }
  let gd = group_sums(sd);
  let gdx = group_sums(sdx);
  var gbv: array<f32, GMAX>;
  var gcv: array<f32, GMAX>;
  for (var k = 0u; k < Q * 4u / F.cpg; k++) {
    gbv[k] = gdx[k] * F.inv_m;
    gcv[k] = gd[k] * F.inv_m;
  }
  let b = per_channel(gbv);
  let c = per_channel(gcv);
  for (var s = 0u; s < F.hw; s++) {
    let row = wb.x + s * F.c4;
    if (U8) {
      for (var j = 0u; j < Q; j += 2u) {
        let u = (row + j) >> 1u;
        let d = ld8_DY(u);
        let v = ld8_X(u);
        let b0 = select(b[j], vec4<f32>(gbv[slot(j)]), QG > 0u);
        let c0 = select(c[j], vec4<f32>(gcv[slot(j)]), QG > 0u);
        let b1 = select(b[j + 1u], vec4<f32>(gbv[slot(j + 1u)]), QG > 0u);
        let c1 = select(c[j + 1u], vec4<f32>(gcv[slot(j + 1u)]), QG > 0u);
        st8_OUT(u, mat2x4<f32>(d[0] * 0.5 + v[0] * b0 + c0, d[1] * 0.5 + v[1] * b1 + c1));
      }
    } else {
      for (var j = 0u; j < Q; j++) {
        let bj = select(b[j], vec4<f32>(gbv[slot(j)]), QG > 0u);
        let cj = select(c[j], vec4<f32>(gcv[slot(j)]), QG > 0u);
        st_OUT(row + j, ld_DY(row + j) * 0.5 + ld_X(row + j) * bj + cj);
      }
    }
  }
}
