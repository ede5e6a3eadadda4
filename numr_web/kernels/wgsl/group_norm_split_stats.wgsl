// The split forward's combine once a group's partials are totalled, shared by
// group_norm_split.wgsl and group_norm_split_nhwc.wgsl: the statistics of group_norm_stats.wgsl,
// a second sum where they ask for one, the results to MEAN, RSTD and AUX.  Needs those bindings,
// the constants FIX and INLINE_REDO, and the kernel's redo_sums(gl, k, s): a group's totals
// (S1, S2) of the deviations x s - k.

// The shift and scale of a group in the FIX passes: (k1, s, go) from its mark in AUX (w < 0:
// (k1, 0, 0, -s)); go = 0 when the group is not marked.
fn marked_shift(gg: u32) -> vec3<f32> {
  let a = AUX[gg];
  return vec3<f32>(a.x, -a.w, select(0.0, 1.0, a.w < 0.0));
}

// Group gl of the chunk from its shift and scale ks (k, s) and totals s = (S1, S2).  A group
// that needs a second sum (only without FIX) is summed again here when INLINE_REDO (small
// groups: its combine thread, within the loop limit), else marked for the FIX passes.
fn finish_group(gl: u32, ks: vec3<f32>, s: vec2<f32>) {
  let gg = p.g_first + gl;
  var st = group_stat(ks.x, s.x, s.y, !FIX);
  var sc = ks.y;
  if (st.w != 0.0) {  // only without FIX: the group needs a second sum
    let r = redo_shift(st);
    if (!INLINE_REDO) {  // mark it for the FIX passes
      AUX[gg] = vec4<f32>(r.x, 0.0, 0.0, -r.y);
      return;
    }
    sc = r.y;
    let t = redo_sums(gl, r.x * sc, sc);
    st = group_stat(r.x, t.x, t.y, false);
  }
  let aux = group_aux(st, sc);
  MEAN[gg] = (aux.x * sc + aux.y) / sc;
  RSTD[gg] = times_pow2(aux.z, sc);
  AUX[gg] = aux;
}
