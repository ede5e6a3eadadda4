// A benchmark's floor, not GroupNorm (numr_web.bench.floor, layout "nhwc", the split form): the least work a
// kernel does that reads a channels-last group twice in the channels-last split plan's work shape, many
// short threads (SwiftShader runs that shape faster than one long walk per window of groups, floor_nhwc.wgsl).
// A thread owns KQ adjacent channel quads of one sample over a tile of consecutive positions (the split
// plan's cut, group_norm_split_nhwc.py), neighbouring threads neighbouring quads of the same rows.
//   *_partials: per channel, the tile's plain sums (forward x and x*x, backward dy and dy*x) into PART
//   *_combine:  one thread per (n, g) adds its channels' partials over the tiles into COEF (two floats)
//   *_apply:    the tile again: forward OUT = x * a + b, backward OUT = dy * 0.5 + x * b + c
// No shift, no redo, no per-channel weight, no statistics stored: GroupNorm's memory traffic and its least
// arithmetic, with the storage conversions of the dtype: 4 elements a load, or 8 (U8: 16-bit storage in
// 16-byte units, quads in pairs, as the split plan loads them where KQ is even).  C % 4 == 0.
struct FloorSplit {
  threads: u32, hw: u32, c4: u32, blocks: u32, tiles: u32, tile: u32, cpg: u32, groups: u32,
  ngroups: u32, inv_m: f32, _p0: u32, _p1: u32,
}
@group(0) @binding(0) var<storage, read> X: array<ST_X>;
@group(0) @binding(1) var<storage, read> DY: array<ST_DY>;
@group(0) @binding(2) var<storage, read_write> OUT: array<ST_OUT>;
@group(0) @binding(3) var<uniform> F: FloorSplit;
@group(0) @binding(4) var<storage, read_write> PART: array<vec4<f32>>;  // (n, tile, quad): 2 vec4 each
@group(0) @binding(5) var<storage, read_write> COEF: array<vec2<f32>>;  // (n, g)

//!include grid_thread.wgsl

// (first quad of the thread's row 0, first position, end position, n * tiles + tile) of thread t
fn cut(t: u32) -> vec4<u32> {
  let a = t % F.blocks;
  let np = t / F.blocks;
  let n = np / F.tiles;
  let s0 = (np % F.tiles) * F.tile;
  return vec4<u32>(n * F.hw * F.c4 + a * KQ, s0, min(s0 + F.tile, F.hw), np);
}

// Quad e's (d, d * v): d = x (forward) or dy (bwd), v = x.
fn terms(e: u32, bwd: bool) -> mat2x4<f32> {
  let v = ld_X(e);
  var d = v;
  if (bwd) { d = ld_DY(e); }
  return mat2x4<f32>(d, d * v);
}

// The same for the two quads of 16-byte unit u: (d0, d0 * v0, d1, d1 * v1).
fn terms8(u: u32, bwd: bool) -> mat4x4<f32> {
  let v = ld8_X(u);
  var d = v;
  if (bwd) { d = ld8_DY(u); }
  return mat4x4<f32>(d[0], d[0] * v[0], d[1], d[1] * v[1]);
}

// The tile's per-channel sums into PART.  The KQ <= 4 quads of a thread are columns of mat4x4 values with
// constant indices (`if (KQ > j)` is a constant condition), as the split plan keeps them: a loop with a runtime
// index keeps accumulators in memory on the software adapters.
fn partials(t: u32, bwd: bool) {
  if (t >= F.threads) { return; }
  let k = cut(t);
  var s1: mat4x4<f32>;
  var s2: mat4x4<f32>;
  for (var s = k.y; s < k.z; s++) {
    let row = k.x + s * F.c4;
    if (U8) {
      let a = terms8(row >> 1u, bwd);
      s1[0] += a[0];
      s2[0] += a[1];
      s1[1] += a[2];
      s2[1] += a[3];
      if (KQ > 2u) {
        let b = terms8((row >> 1u) + 1u, bwd);
        s1[2] += b[0];
        s2[2] += b[1];
        s1[3] += b[2];
        s2[3] += b[3];
      }
    } else {
      let a = terms(row, bwd);
      s1[0] += a[0];
      s2[0] += a[1];
      if (KQ > 1u) {
        let b = terms(row + 1u, bwd);
        s1[1] += b[0];
        s2[1] += b[1];
      }
      if (KQ > 2u) {
        let c = terms(row + 2u, bwd);
        s1[2] += c[0];
        s2[2] += c[1];
        let d = terms(row + 3u, bwd);  // KQ is 1, 2 or 4
        s1[3] += d[0];
        s2[3] += d[1];
      }
    }
  }
  let out = (k.w * F.c4 + (t % F.blocks) * KQ) * 2u;
  PART[out] = s1[0];
  PART[out + 1u] = s2[0];
  if (KQ > 1u) {
    PART[out + 2u] = s1[1];
    PART[out + 3u] = s2[1];
  }
  if (KQ > 2u) {
    PART[out + 4u] = s1[2];
    PART[out + 5u] = s2[2];
    PART[out + 6u] = s1[3];
    PART[out + 7u] = s2[3];
  }
}

// Group t's sums over its channels and the tiles, as the apply pass's two coefficients.
fn combine(t: u32, bwd: bool) {
  if (t >= F.ngroups) { return; }
  let n = t / F.groups;
  let c0 = (t % F.groups) * F.cpg;
  var a1 = 0.0;
  var a2 = 0.0;
  for (var p = 0u; p < F.tiles; p++) {
    let row = (n * F.tiles + p) * F.c4;
    for (var c = c0; c < c0 + F.cpg; c++) {
      let i = (row + (c >> 2u)) * 2u;
      a1 += PART[i][c & 3u];
      a2 += PART[i + 1u][c & 3u];
    }
  }
  let m1 = a1 * F.inv_m;
  let m2 = a2 * F.inv_m;
  if (bwd) {
    COEF[t] = vec2<f32>(m2, m1);
  } else {
    let r = inverseSqrt(max(m2 - m1 * m1, 0.0) + 1e-5);
    COEF[t] = vec2<f32>(r, -m1 * r);
  }
}

// The two coefficients of channels ch .. ch + 3 (each its group's): (a, b) as two vec4.
fn coefs(g0: u32, ch: u32) -> mat2x4<f32> {
  let c0 = COEF[g0 + ch / F.cpg];
  let c1 = COEF[g0 + (ch + 1u) / F.cpg];
  let c2 = COEF[g0 + (ch + 2u) / F.cpg];
  let c3 = COEF[g0 + (ch + 3u) / F.cpg];
  return mat2x4<f32>(vec4<f32>(c0.x, c1.x, c2.x, c3.x), vec4<f32>(c0.y, c1.y, c2.y, c3.y));
}

// Quad e's output: x * a + b, or (bwd) dy * 0.5 + x * a + b.
fn out_quad(e: u32, cf: mat2x4<f32>, bwd: bool) {
  var base = cf[1];
  if (bwd) { base += ld_DY(e) * 0.5; }
  st_OUT(e, ld_X(e) * cf[0] + base);
}

// The same for the two quads of 16-byte unit u.
fn out_pair(u: u32, c0: mat2x4<f32>, c1: mat2x4<f32>, bwd: bool) {
  let v = ld8_X(u);
  var base = mat2x4<f32>(c0[1], c1[1]);
  if (bwd) { base += ld8_DY(u) * 0.5; }
  st8_OUT(u, mat2x4<f32>(v[0] * c0[0] + base[0], v[1] * c1[0] + base[1]));
}

// The tile again, each channel with its group's two coefficients (held per quad, constant indices).
fn apply(t: u32, bwd: bool) {
  if (t >= F.threads) { return; }
  let k = cut(t);
  let g0 = (k.x / (F.hw * F.c4)) * F.groups;
  let ch0 = ((t % F.blocks) * KQ) * 4u;
  let f0 = coefs(g0, ch0);
  var f1 = f0;
  var f2 = f0;
  var f3 = f0;
  if (KQ > 1u) { f1 = coefs(g0, ch0 + 4u); }
  if (KQ > 2u) {
    f2 = coefs(g0, ch0 + 8u);
    f3 = coefs(g0, ch0 + 12u);
  }
  for (var s = k.y; s < k.z; s++) {
    let row = k.x + s * F.c4;
    if (U8) {
      out_pair(row >> 1u, f0, f1, bwd);
      if (KQ > 2u) { out_pair((row >> 1u) + 1u, f2, f3, bwd); }
    } else {
      out_quad(row, f0, bwd);
      if (KQ > 1u) { out_quad(row + 1u, f1, bwd); }
      if (KQ > 2u) {
        out_quad(row + 2u, f2, bwd);
        out_quad(row + 3u, f3, bwd);
      }
    }
  }
}

@compute @workgroup_size(WG)
fn fwd_partials(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
  partials(thread_index(wid, nwg, lid), false);
}

@compute @workgroup_size(WG)
fn fwd_combine(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
  combine(thread_index(wid, nwg, lid), false);
}

@compute @workgroup_size(WG)
fn fwd_apply(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
  apply(thread_index(wid, nwg, lid), false);
}

@compute @workgroup_size(WG)
fn bwd_partials(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
  partials(thread_index(wid, nwg, lid), true);
}

@compute @workgroup_size(WG)
fn bwd_combine(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
  combine(thread_index(wid, nwg, lid), true);
}

@compute @workgroup_size(WG)
fn bwd_apply(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
  apply(thread_index(wid, nwg, lid), true);
}
