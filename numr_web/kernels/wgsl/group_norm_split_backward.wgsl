// GroupNorm backward, split plan (NCHW, rows of HW % 4 == 0): barrier-free dispatches in
// place of one workgroup per (n, g); the formulas are those of group_norm_backward.wgsl.
//
//   partials: rows ((n, c), HW / 4 vec4 steps) cut into P pieces; every thread walks A
//             consecutive pieces and writes (ds, db, sum xc_s, 0) per piece to PART.
//             REFINE = true (SILU only): sum xc_s alone, for groups with |mean| rstd >
//             REFINE_MEAN_ABOVE (the others exit), to restore the mean's low part first.
//   combine:  one thread per group, pieces in order (fixed order, bitwise repeatable):
//             REFINE: zlo -> COEF.w; else per channel (ds, db) -> DSDB, then the group's
//             coefficients -> COEF = (c0, c1, mean_lo, zlo), as the fused kernel's thread 0.
//   dx:       every thread writes A consecutive vec4s of dx, row by row.
// dweight and dbias come from DSDB and COEF (group_norm_dweight.wgsl), as for the fused plan.
// Constants: NHWC = false, VEC = 4, SILU, AFFINE, WG, REFINE, INTERLEAVE, U8 (8-element
// steps, as in group_norm_split.wgsl).  The combine entry point and dz: group_norm_split_grad.wgsl;
// the cut: group_norm_split_rows.wgsl.
//!include group_norm_common.wgsl
//!include group_norm_coef.wgsl
//!include group_norm_split_rows.wgsl
//!include group_norm_grad.wgsl
//!include group_norm_split_grad.wgsl
@group(0) @binding(0) var<storage, read> X: array<ST_X>;
@group(0) @binding(1) var<storage, read> DY: array<ST_DY>;
@group(0) @binding(2) var<storage, read_write> DX: array<ST_DX>;
@group(0) @binding(3) var<storage, read> W: array<f32>;
@group(0) @binding(4) var<storage, read> B: array<f32>;
@group(0) @binding(5) var<storage, read> MEAN: array<f32>;
@group(0) @binding(6) var<storage, read> RSTD: array<f32>;
@group(0) @binding(7) var<storage, read_write> WS: array<vec4<f32>>;  // workspace: PART from 0, DSDB at p.dsdb_at, COEF at p.coef_at
@group(0) @binding(8) var<uniform> p: Params;

// What a row needs: its channel, group, the group's mean * s, s, rstd / s, and the row's
// scale (w rstd / s) and shift (b - zlo scale) of z.
struct Row { gg: u32, c: u32, ms: f32, sc: f32, alpha: vec4<f32>, scale: vec4<f32>, shift: vec4<f32> }

fn row_of(row: u32) -> Row {
  var o: Row;
  o.gg = p.g_first + row / p.Cg;
  o.c = (o.gg % p.G) * p.Cg + row % p.Cg;
  let gr = grad_group(o.gg);
  o.sc = gr.sc;
  o.ms = gr.ms;
  var zlo = 0.0;
  if (SILU && !REFINE) { zlo = WS[p.coef_at + o.gg].w; }
  o.alpha = lane_w(o.c) * gr.rstd_s;
  o.scale = lane_w(o.c) * gr.rstd_s;
  o.shift = lane_b(o.c) - zlo * o.scale;
  return o;
}

@compute @workgroup_size(WG)
fn partials(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
  let run = thread_items(wid, nwg, lid, p.items);
  for (var pi = run.x; pi < run.y; pi++) {
    let pc = piece_of(pi);
    let R = row_of(pc.row);
    if (REFINE) {
      if (!refine(MEAN[R.gg], RSTD[R.gg])) { continue; }
      var res = vec4<f32>(0.0);
      for (var u = pc.u0; u < pc.u1; u += pc.du) {
        if (U8) {
          let m = ld8_X(u);
          res += (m[0] * R.sc - R.ms) + (m[1] * R.sc - R.ms);
        } else {
          res += ld_X(u) * R.sc - R.ms;
        }
      }
      WS[pi] = vec4<f32>(dot(res, vec4<f32>(1.0)), 0.0, 0.0, 0.0);
      continue;
    }
    var ds = vec4<f32>(0.0);
    var db = vec4<f32>(0.0);
    var res = vec4<f32>(0.0);
    for (var u = pc.u0; u < pc.u1; u += pc.du) {
      if (U8) {
        let mx = ld8_X(u);
        let my = ld8_DY(u);
        let xc = mx[0] * R.sc - R.ms;
        let xd = mx[1] * R.sc - R.ms;
        let dz = dz_of(my[0], xc, R.scale, R.shift);
        let de = dz_of(my[1], xd, R.scale, R.shift);
        ds += dz * xc + de * xd;
        db += dz + de;
        res += xc + xd;
      } else {
        let xc = ld_X(u) * R.sc - R.ms;
        let dz = dz_of(ld_DY(u), xc, R.scale, R.shift);
        ds += dz * xc;
        db += dz;
        res += xc;
      }
    }
    let one = vec4<f32>(1.0);
    WS[pi] = vec4<f32>(dot(ds, one), dot(db, one), dot(res, one), 0.0);
  }
}

// Sum of count pieces' partials from PART[first], in order, two-level (blocks of 32).
fn piece_total(first: u32, count: u32) -> vec4<f32> {
  var s = vec4<f32>(0.0);
  var i = first;
  let iend = first + count;
  loop {
    if (i >= iend) { break; }
    let bend = min(i + 32u, iend);
    var b = vec4<f32>(0.0);
    for (; i < bend; i++) { b += WS[i]; }
    s += b;
  }
  return s;
}

// combine's totals (group_norm_split_grad.wgsl): channel j's pieces; the group's pieces in one
// run (REFINE)
fn channel_sums(gl: u32, j: u32) -> vec3<f32> { return piece_total(gl * p.Cg * p.P + j * p.P, p.P).xyz; }
fn group_resid(gl: u32) -> f32 { return piece_total(gl * p.Cg * p.P, p.Cg * p.P).x; }

@compute @workgroup_size(WG)
fn dx(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
      @builtin(local_invocation_index) lid: u32) {
  elementwise_pass(wid, nwg, lid);
}

fn dx_of(x: vec4<f32>, dy: vec4<f32>, R: Row, cf: vec4<f32>) -> vec4<f32> {
  let xc = x * R.sc - R.ms;
  let dz = dz_of(dy, xc, R.scale, R.shift);
  return times_pow2_4(R.alpha * dz + cf.y * xc + cf.x, vec4<f32>(R.sc));
}

// dx_of for a group in unscaled units (R.sc == 1: no product is rescaled, none can turn subnormal).
fn dx_plain(x: vec4<f32>, dy: vec4<f32>, R: Row, cf: vec4<f32>) -> vec4<f32> {
  let xc = x - R.ms;
  return R.alpha * dz_of(dy, xc, R.scale, R.shift) + cf.y * xc + cf.x;
}

// dx of step u: dx_of where the group is rescaled (`scaled`, a literal at each call site), else dx_plain.
fn write_step(u: u32, R: Row, cf: vec4<f32>, scaled: bool) {
  if (U8) {
    let mx = ld8_X(u);
    let my = ld8_DY(u);
    if (scaled) {
      st8_DX(u, mat2x4<f32>(dx_of(mx[0], my[0], R, cf), dx_of(mx[1], my[1], R, cf)));
    } else {
      st8_DX(u, mat2x4<f32>(dx_plain(mx[0], my[0], R, cf), dx_plain(mx[1], my[1], R, cf)));
    }
  } else if (scaled) {
    st_DX(u, dx_of(ld_X(u), ld_DY(u), R, cf));
  } else {
    st_DX(u, dx_plain(ld_X(u), ld_DY(u), R, cf));
  }
}

// dx over steps [first, last) of the chunk, row by row.
fn write_steps(first: u32, last: u32, xb: u32) {
  var t = first;
  loop {
    if (t >= last) { break; }
    let row = t / p.steps;
    let rend = min((row + 1u) * p.steps, last);
    let R = row_of(row);
    let cf = WS[p.coef_at + R.gg];
    // a rescaled group's steps (none where R.sc == 1), then a plain one's: two loops, not a branch in
    // one (SwiftShader runs a branch's body for every lane, masked: group_norm_pow2.wgsl)
    let scaled_end = select(rend, t, R.sc == 1.0);
    for (; t < scaled_end; t++) { write_step(xb + t, R, cf, true); }
    for (; t < rend; t++) { write_step(xb + t, R, cf, false); }
  }
}
