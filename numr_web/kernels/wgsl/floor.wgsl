// A benchmark's floor, not GroupNorm (numr_web.bench.floor): the least work any kernel of the
// thread plan's shape does, one invocation per NCHW (n, g) group of F.nv vec4s, WG groups per
// workgroup.  A group's output needs the group's sums first, so x is read twice: once for the sums
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

// [first, end) vec4s of this invocation's group (empty past the last group).
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
    let v = ld_X(u);
    s1 += v;
    s2 += v * v;
  }
  let mean = dot(s1, vec4<f32>(1.0)) * F.inv_m;
  let a = inverseSqrt(max(dot(s2, vec4<f32>(1.0)) * F.inv_m - mean * mean, 0.0) + 1e-5);
  let b = -mean * a;
  for (var u = r.x; u < r.y; u++) { st_OUT(u, ld_X(u) * a + b); }
}

@compute @workgroup_size(WG)
fn floor_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
  let r = group_range(wid, nwg, lid);
  var t = mat2x4<f32>(vec4<f32>(0.0), vec4<f32>(0.0));  // lanes of sum dy, sum dy * x
  for (var u = r.x; u < r.y; u++) {
    let d = ld_DY(u);
    t[0] += d;
    t[1] += d * ld_X(u);
  }
  let b = dot(t[1], vec4<f32>(1.0)) * F.inv_m;
  let c = dot(t[0], vec4<f32>(1.0)) * F.inv_m;
  for (var u = r.x; u < r.y; u++) { st_OUT(u, ld_DY(u) * 0.5 + ld_X(u) * b + c); }
}
