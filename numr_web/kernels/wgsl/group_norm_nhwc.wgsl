// GroupNorm on channels-last memory ((N, *spatial, C) contiguous, C % 4 == 0),
// forward (entry `forward`) and backward (entry `backward`).
//
// One workgroup handles a block of GB adjacent groups of one sample (GB * C/G
// a multiple of 4, so the block's channels are whole vec4 quads).  An item is
// one channel quad over a contiguous piece of spatial positions; a thread walks
// its item's positions (stride C), so the quads of a workgroup's threads cover
// the block's bytes of every row.  The four lanes of a vec4 are four channels,
// possibly of different groups: per-channel partials go through global memory
// (PART) and thread 0 folds them into per-group results, in a fixed order.
//
// Numerics as in group_norm_forward.wgsl / group_norm_backward.wgsl: shifted
// sums with the group's first element as shift, a recentred (and, on float32
// overflow, rescaled) second pass when needed, compensated apply; closed-form
// backward with the saved mean's lost low part restored.
// Constants: SILU, AFFINE, WG, MAXGB (workgroup array size, >= GB).
//!include group_norm_coef.wgsl
struct Params {
  C: u32, HW: u32, G: u32, Cg: u32,
  A: u32,        // channel quads in a block
  P: u32,        // pieces of the spatial range
  items: u32,    // A * P
  GB: u32,       // groups per block
  x_base: u32,   // element offset of the chunk inside the binding (a multiple of 4)
  n_first: u32,  // first sample of the chunk
  nblocks: u32,  // blocks in this chunk
  M: u32,
  eps: f32,
  inv_m: f32,
  dsdb_at: u32,  // backward: where DSDB starts in WS (vec4s)
  coef_at: u32,  // backward: where COEF starts in WS (vec4s)
}

@group(0) @binding(0) var<storage, read> X: array<ST_X>;
@group(0) @binding(1) var<storage, read> DY: array<ST_DY>;
@group(0) @binding(2) var<storage, read_write> Y: array<ST_Y>;      // y (forward) or dx (backward)
@group(0) @binding(3) var<storage, read> W: array<f32>;
@group(0) @binding(4) var<storage, read> B: array<f32>;
@group(0) @binding(5) var<storage, read_write> MEAN: array<f32>;
@group(0) @binding(6) var<storage, read_write> RSTD: array<f32>;
// One workspace binding (at most 8 storage buffers on WebGPU's default limits): PART, the
// per-item partials, from 0; backward only: DSDB, (ds, db, 0, 0) per (n, c), from p.dsdb_at,
// and COEF, (c0, c1, mean_lo, zlo) per (n, g), from p.coef_at (offsets in vec4s).
@group(0) @binding(7) var<storage, read_write> WS: array<vec4<f32>>;  // workspace: PART from 0, DSDB at p.dsdb_at, COEF at p.coef_at
@group(0) @binding(8) var<uniform> p: Params;

// per group of the block: forward (K, S1/M, var, redo), backward (c0, c1, mean, rstd)
var<workgroup> wg_grp: array<vec4<f32>, MAXGB>;

// The per-group records of a quad's four lanes (groups lg.x .. lg.w), one vec4 per
// record component: [0] holds the four .x, [1] the four .y, and so on.
fn lane_records(lg: vec4<u32>) -> mat4x4<f32> {
  return transpose(mat4x4<f32>(wg_grp[lg.x], wg_grp[lg.y], wg_grp[lg.z], wg_grp[lg.w]));
}
var<workgroup> wg_scale: array<f32, MAXGB>;
var<workgroup> wg_flag: f32;
// backward with SILU: the mean's low part z is rebuilt with, per group of the block
// (group_norm_coef.wgsl, REFINE_MEAN_ABOVE; 0 where not needed)
var<workgroup> wg_zlo: array<f32, MAXGB>;

fn lane_zlo(lg: vec4<u32>) -> vec4<f32> {
  if (!SILU) { return vec4<f32>(0.0); }
  return vec4<f32>(wg_zlo[lg.x], wg_zlo[lg.y], wg_zlo[lg.z], wg_zlo[lg.w]);
}

// sum of x * s - mean * s over item it of block bl, lane per channel (the order of the sums pass)
fn item_resid(bl: u32, blk: Blk, it: u32) -> vec4<f32> {
  let r = item_range(it);
  let rec = lane_records(lane_groups(r.x));
  let sc = rstd_scale4(rec[3]);
  let ms = rec[2] * sc;
  let u0 = blk.base + blk.c0 + 4u * r.x;
  var res = vec4<f32>(0.0);
  for (var t = r.y; t < r.z; t++) {
    res += ld_X((u0 + t * p.C) >> 2u) * sc - ms;
  }
  return res;
}

// group j's sum of the items' resid partials (PART slot 2), channels then pieces in order
fn group_resid(bl: u32, j: u32) -> f32 {
  var resid = 0.0;
  for (var ch = j * p.Cg; ch < (j + 1u) * p.Cg; ch++) {
    for (var pc = 0u; pc < p.P; pc++) {
      resid += WS[(bl * p.items + pc * p.A + ch / 4u) * 3u + 2u][ch & 3u];
    }
  }
  return resid;
}

struct Blk { n: u32, g0: u32, c0: u32, base: u32 }

fn block_of(bl: u32) -> Blk {
  var b: Blk;
  let per = p.G / p.GB;
  let nl = bl / per;
  b.n = p.n_first + nl;
  b.g0 = (bl % per) * p.GB;
  b.c0 = b.g0 * p.Cg;
  b.base = p.x_base + nl * p.HW * p.C;
  return b;
}

// item -> (quad a, first position, end position)
fn item_range(it: u32) -> vec3<u32> {
  let pc = it / p.A;
  let a = it % p.A;
  let q = p.HW / p.P;
  let r = p.HW % p.P;
  let t0 = pc * q + min(pc, r);
  return vec3<u32>(a, t0, t0 + q + select(0u, 1u, pc < r));
}

fn lane_groups(a: u32) -> vec4<u32> {   // group index inside the block of each lane's channel
  let lc = 4u * a;
  return vec4<u32>(lc / p.Cg, (lc + 1u) / p.Cg, (lc + 2u) / p.Cg, (lc + 3u) / p.Cg);
}

fn x_at(e: u32) -> f32 { return ld_X(e >> 2u)[e & 3u]; }

fn wv(c: u32) -> vec4<f32> {
  if (!AFFINE) { return vec4<f32>(1.0); }
  return vec4<f32>(W[c], W[c + 1u], W[c + 2u], W[c + 3u]);
}
fn bv(c: u32) -> vec4<f32> {
  if (!AFFINE) { return vec4<f32>(0.0); }
  return vec4<f32>(B[c], B[c + 1u], B[c + 2u], B[c + 3u]);
}

fn not_finite(v: f32) -> bool { return (bitcast<u32>(v) & 0x7f800000u) == 0x7f800000u; }

// rstd / s = 1 / sqrt(var_s + eps * s^2) from the variance var_s in units scaled by s; where
// eps * s^2 overflows, eps dwarfs var and it is 1 / (sqrt(eps) * s).
fn rstd_in_units(var_s: f32, s: f32) -> f32 {
  let es = p.eps * s * s;
  if (not_finite(es)) { return 1.0 / (sqrt(p.eps) * s); }
  return 1.0 / sqrt(var_s + es);
}

// A quiet NaN, from values of which one is NaN or infinite (a runtime value: a NaN constant
// expression is a shader-creation error in WGSL).
fn nan_of(a: f32, b: f32) -> f32 {
  return bitcast<f32>(0x7fc00000u | (bitcast<u32>(a) & bitcast<u32>(b) & 0x80000000u));
}

// Per-item shifted sums into PART (2 vec4 per item: s1, s2, one lane per channel).
fn stat_pass(bl_local: u32, blk: Blk, lid: u32) {
  for (var it = lid; it < p.items; it += WG) {
    let r = item_range(it);
    let lg = lane_groups(r.x);
    let sc = vec4<f32>(wg_scale[lg.x], wg_scale[lg.y], wg_scale[lg.z], wg_scale[lg.w]);
    let ks = lane_records(lg)[0] * sc;
    let u0 = blk.base + blk.c0 + 4u * r.x;
    var s1 = vec4<f32>(0.0);
    var s2 = vec4<f32>(0.0);
    // two-level sums (blocks of 32 positions) keep float32 rounding low on long pieces
    var t = r.y;
    loop {
      if (t >= r.z) { break; }
      let tend = min(t + 32u, r.z);
      var b1 = vec4<f32>(0.0);
      var b2 = vec4<f32>(0.0);
      for (; t < tend; t++) {
        let d = ld_X((u0 + t * p.C) >> 2u) * sc - ks;
        b1 += d;
        b2 += d * d;
      }
      s1 += b1;
      s2 += b2;
    }
    let slot = (bl_local * p.items + it) * 2u;
    WS[slot] = s1;
    WS[slot + 1u] = s2;
  }
}

// Thread 0: per group of the block, total the channel partials of every piece.
fn fold_stats(bl_local: u32, allow_redo: bool) {
  var any = 0.0;
  for (var j = 0u; j < p.GB; j++) {
    var s1 = 0.0;
    var s2 = 0.0;
    for (var ch = j * p.Cg; ch < (j + 1u) * p.Cg; ch++) {
      // two-level: a channel's pieces, then the channels (many short pieces on GPU work shapes)
      var c1 = 0.0;
      var c2 = 0.0;
      for (var pc = 0u; pc < p.P; pc++) {
        let slot = (bl_local * p.items + pc * p.A + ch / 4u) * 2u;
        c1 += WS[slot][ch & 3u];
        c2 += WS[slot + 1u][ch & 3u];
      }
      s1 += c1;
      s2 += c2;
    }
    let d = s1 * p.inv_m;  // in the group's scaled units
    let t = s2 * p.inv_m - d * d;
    let overflow = not_finite(s2) || not_finite(s1);
    let v = select(max(t, 0.0), t, not_finite(t));  // max() may drop a NaN
    let tiny = v < TINY_VAR && (s1 != 0.0 || s2 != 0.0);
    let redo = allow_redo && (d * d > POOR_SHIFT_RATIO * v || overflow || tiny);
    let k = wg_grp[j].x;
    if (redo) {
      // next pass: centred on this mean, or (a sum overflowed) on x * OVERFLOW_SCALE, or (the
      // squares left float32's normal range) on x * UNDERFLOW_SCALE
      var k1 = k + d;
      if (overflow && not_finite(k1)) { k1 = k; }
      wg_grp[j] = vec4<f32>(k1, 0.0, 0.0, 1.0);
      wg_scale[j] = select(select(1.0, UNDERFLOW_SCALE, tiny), OVERFLOW_SCALE, overflow);
      any = 1.0;
    } else {
      wg_grp[j] = vec4<f32>(k, d, v, 0.0);
    }
  }
  wg_flag = any;
}

@compute @workgroup_size(WG)
fn forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
  let bl = wid.y * nwg.x + wid.x;
  if (bl >= p.nblocks) { return; }
  let blk = block_of(bl);
  for (var j = lid; j < p.GB; j += WG) {
    wg_grp[j] = vec4<f32>(x_at(blk.base + (blk.g0 + j) * p.Cg), 0.0, 0.0, 0.0);
    wg_scale[j] = 1.0;
  }
  workgroupBarrier();
  stat_pass(bl, blk, lid);
  storageBarrier();
  if (lid == 0u) { fold_stats(bl, true); }
  if (workgroupUniformLoad(&wg_flag) != 0.0) {
    // Flagged groups carry their new shift (and scale); the others keep theirs and
    // so reproduce their first-pass sums exactly.
    stat_pass(bl, blk, lid);
    storageBarrier();
    if (lid == 0u) { fold_stats(bl, false); }
    workgroupBarrier();
  }
  if (lid == 0u) {
    for (var j = 0u; j < p.GB; j++) {
      let st = wg_grp[j];
      let sc = wg_scale[j];
      // (mean_hi, mean_lo_s, rstd_s, s): mean_lo and rstd in the group's scaled units
      var rec = vec4<f32>(st.x, st.y, rstd_in_units(st.z, sc), sc);
      if (not_finite(st.y) || not_finite(st.z)) {  // a NaN or an infinity in the group
        let nan = nan_of(st.y, st.z);
        rec = vec4<f32>(nan, nan, nan, sc);
      }
      let gg = blk.n * p.G + blk.g0 + j;
      MEAN[gg] = (rec.x * sc + rec.y) / sc;
      RSTD[gg] = times_pow2(rec.z, sc);
      wg_grp[j] = rec;
    }
  }
  workgroupBarrier();
  for (var it = lid; it < p.items; it += WG) {
    let r = item_range(it);
    let lg = lane_groups(r.x);
    let rec = lane_records(lg);
    let sc = rec[3];
    let hs = rec[0] * sc;
    let lo = rec[1];
    let c = blk.c0 + 4u * r.x;
    let scale = wv(c) * rec[2];
    let shift = bv(c) - lo * scale;
    let u0 = blk.base + c;
    for (var t = r.y; t < r.z; t++) {
      let u = (u0 + t * p.C) >> 2u;
      var y = (ld_X(u) * sc - hs) * scale + shift;
      if (SILU) { y = y / (1.0 + exp(-y)); }
      st_Y(u, y);
    }
  }
}

@compute @workgroup_size(WG)
fn backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
  let bl = wid.y * nwg.x + wid.x;
  if (bl >= p.nblocks) { return; }
  let blk = block_of(bl);
  for (var j = lid; j < p.GB; j += WG) {
    let gg = blk.n * p.G + blk.g0 + j;
    wg_grp[j] = vec4<f32>(0.0, 0.0, MEAN[gg], RSTD[gg]);
  }
  workgroupBarrier();
  if (SILU) {
    // restore the low part of the means of groups far from zero before z is rebuilt
    if (lid == 0u) {
      var need = 0.0;
      for (var j = 0u; j < p.GB; j++) {
        wg_zlo[j] = 0.0;
        if (abs(wg_grp[j].z) * wg_grp[j].w > REFINE_MEAN_ABOVE) { need = 1.0; }
      }
      wg_flag = need;
    }
    if (workgroupUniformLoad(&wg_flag) != 0.0) {
      for (var it = lid; it < p.items; it += WG) {
        WS[(bl * p.items + it) * 3u + 2u] = item_resid(bl, blk, it);
      }
      storageBarrier();
      if (lid == 0u) {
        for (var j = 0u; j < p.GB; j++) {
          let st = wg_grp[j];
          if (abs(st.z) * st.w > REFINE_MEAN_ABOVE) {
            wg_zlo[j] = mean_low_part(st.z, group_resid(bl, j), p.inv_m, rstd_scale(st.w));
          }
        }
      }
      workgroupBarrier();
    }
  }
  for (var it = lid; it < p.items; it += WG) {
    let r = item_range(it);
    let lg = lane_groups(r.x);
    let rec = lane_records(lg);
    let sc = rstd_scale4(rec[3]);
    let ms = rec[2] * sc;
    let c = blk.c0 + 4u * r.x;
    let scale = wv(c) * over_scale4(rec[3], sc);
    let shift = bv(c) - lane_zlo(lg) * scale;
    let u0 = blk.base + c;
    var ds = vec4<f32>(0.0);
    var db = vec4<f32>(0.0);
    var res = vec4<f32>(0.0);
    for (var t = r.y; t < r.z; t++) {
      let u = (u0 + t * p.C) >> 2u;
      let xc = ld_X(u) * sc - ms;
      var dz = ld_DY(u);
      if (SILU) {
        let z = xc * scale + shift;
        let s = 1.0 / (1.0 + exp(-z));
        dz = dz * s * (1.0 + z * (1.0 - s));
      }
      ds += dz * xc;
      db += dz;
      res += xc;
    }
    let slot = (bl * p.items + it) * 3u;
    WS[slot] = ds;
    WS[slot + 1u] = db;
    WS[slot + 2u] = res;
  }
  storageBarrier();
  if (lid == 0u) {
    for (var j = 0u; j < p.GB; j++) {
      var sg = 0.0;
      var sgx = 0.0;
      for (var ch = j * p.Cg; ch < (j + 1u) * p.Cg; ch++) {
        var ds = 0.0;
        var db = 0.0;
        for (var pc = 0u; pc < p.P; pc++) {
          let slot = (bl * p.items + pc * p.A + ch / 4u) * 3u;
          ds += WS[slot][ch & 3u];
          db += WS[slot + 1u][ch & 3u];
        }
        let c = blk.c0 + ch;
        WS[p.dsdb_at + blk.n * p.C + c] = vec4<f32>(ds, db, 0.0, 0.0);
        var w = 1.0;
        if (AFFINE) { w = W[c]; }
        sgx += w * ds;
        sg += w * db;
      }
      let st = wg_grp[j];
      let mean = st.z;
      let rstd = st.w;
      let cf = backward_coefficients(mean, rstd, sgx, sg, group_resid(bl, j), p.inv_m, rstd_scale(rstd));
      var zlo = 0.0;
      if (SILU) { zlo = wg_zlo[j]; }
      WS[p.coef_at + blk.n * p.G + blk.g0 + j] = vec4<f32>(cf, zlo);
      wg_grp[j] = vec4<f32>(cf.xy, mean, rstd);
    }
  }
  workgroupBarrier();
  for (var it = lid; it < p.items; it += WG) {
    let r = item_range(it);
    let lg = lane_groups(r.x);
    let rec = lane_records(lg);
    let c0 = rec[0];
    let c1 = rec[1];
    let sc = rstd_scale4(rec[3]);
    let ms = rec[2] * sc;
    let c = blk.c0 + 4u * r.x;
    let scale = wv(c) * over_scale4(rec[3], sc);
    let alpha = scale;
    let shift = bv(c) - lane_zlo(lg) * scale;
    let u0 = blk.base + c;
    // rescaled lanes' steps (none where every lane's sc is 1), then plain ones: two loops, not a branch
    // in one (SwiftShader runs a branch's body for every lane, masked: group_norm_pow2.wgsl)
    let t_scaled = select(r.z, r.y, all(sc == vec4<f32>(1.0)));
    for (var t = r.y; t < t_scaled; t++) {
      let u = (u0 + t * p.C) >> 2u;
      let xc = ld_X(u) * sc - ms;
      var dz = ld_DY(u);
      if (SILU) {
        let z = xc * scale + shift;
        let s = 1.0 / (1.0 + exp(-z));
        dz = dz * s * (1.0 + z * (1.0 - s));
      }
      st_Y(u, times_pow2_4(alpha * dz + c1 * xc + c0, sc));
    }
    for (var t = t_scaled; t < r.z; t++) {
      let u = (u0 + t * p.C) >> 2u;
      let xc = ld_X(u) - ms;
      var dz = ld_DY(u);
      if (SILU) {
        let z = xc * scale + shift;
        let s = 1.0 / (1.0 + exp(-z));
        dz = dz * s * (1.0 + z * (1.0 - s));
      }
      st_Y(u, alpha * dz + c1 * xc + c0);
    }
  }
}
