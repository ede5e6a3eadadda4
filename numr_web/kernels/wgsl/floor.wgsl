// A benchmark's floor, not GroupNorm (numr_web.bench.floor): the least work any kernel of the
// thread plan's shape does, one invocation per NCHW (n, g) group of F.nv steps, WG groups per
// workgroup.  A step is 4 elements, or 8 (U8: 16-bit storage in 16-byte units, as the split plan
// loads it).  A group's output needs the group's sums first, so x is read twice: once for the sums
// and once more (from cache where the group fits there) for the output.
//   floor_forward:  sum x and sum x*x, then OUT = x * a + b
//   floor_backward: sum dy and sum dy*x, then OUT = dy * a + x * b + c
// Plain running sums, no shift, no redo, no per-channel weight, no NaN care, no statistics stored:
// GroupNorm's memory traffic and its least arithmetic, with the storage conversions of the dtype.
struct FloorParams { groups: u32, nv: u32, inv_m: f32, _pad: u32 }
@group(0) @binding(0) var<storage, read> X: array<ST_X>;
@group(0) @binding(1) var<storage, read> DY: array<ST_DY>;
@group(0) @binding(2) var<storage, read_write> OUT: array<ST_OUT>;
@group(0) @binding(3) var<uniform> F: FloorParams;

// [first, end) steps of this invocation's group (empty past the last group).
fn group_range(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> vec2<u32> {
  let b4 = min((wid.y * nwg.x + wid.x) * WG + lid, F.groups) * F.nv;
  return vec2<u32>(b4, min(b4 + F.nv, F.groups * F.nv));
}

@compute @workgroup_size(WG)
fn floor_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
  let r = group_range(wid, nwg, lid);
  var s1 = vec4<f32>(0.0);
  var s2 = vec4<f32>(0.0);
  for (var u = r.x; u < r.y; u++) {
    if (U8) {
      let v = ld8_X(u);
      s1 += v[0] + v[1];
      s2 += v[0] * v[0] + v[1] * v[1];
    } else {
      let v = ld_X(u);
      s1 += v;
      s2 += v * v;
    }
  }
  let mean = dot(s1, vec4<f32>(1.0)) * F.inv_m;
  let a = inverseSqrt(max(dot(s2, vec4<f32>(1.0)) * F.inv_m - mean * mean, 0.0) + 1e-5);
  let b = -mean * a;
  for (var u = r.x; u < r.y; u++) {
    if (U8) {
      let v = ld8_X(u);
      st8_OUT(u, mat2x4<f32>(v[0] * a + b, v[1] * a + b));
    } else {
      st_OUT(u, ld_X(u) * a + b);
    }
  }
}

@compute @workgroup_size(WG)
fn floor_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
  let r = group_range(wid, nwg, lid);
  var sd = vec4<f32>(0.0);   // lanes of sum dy
  var sdx = vec4<f32>(0.0);  // and of sum dy * x
  for (var u = r.x; u < r.y; u++) {
    if (U8) {
      let d = ld8_DY(u);
      let v = ld8_X(u);
      sd += d[0] + d[1];
      sdx += d[0] * v[0] + d[1] * v[1];
    } else {
      let d = ld_DY(u);
      sd += d;
      sdx += d * ld_X(u);
    }
  }
  let b = dot(sdx, vec4<f32>(1.0)) * F.inv_m;
  let c = dot(sd, vec4<f32>(1.0)) * F.inv_m;
  for (var u = r.x; u < r.y; u++) {
    if (U8) {
      let d = ld8_DY(u);
      let v = ld8_X(u);
      st8_OUT(u, mat2x4<f32>(d[0] * 0.5 + v[0] * b + c, d[1] * 0.5 + v[1] * b + c));
    } else {
      st_OUT(u, ld_DY(u) * 0.5 + ld_X(u) * b + c);
    }
  }
}
