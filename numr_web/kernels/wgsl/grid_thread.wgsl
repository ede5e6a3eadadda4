// The global index of an invocation in a 2D grid of workgroups of WG (device.grid spreads a count past the
// per-dimension limit over y).  Needs the constant WG.
fn thread_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  return (wid.y * nwg.x + wid.x) * WG + lid;
}
