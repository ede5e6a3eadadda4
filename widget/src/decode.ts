// Decoding the `results` trait (float32 little-endian arrays, concatenated) with `results_meta`.
// anywidget hands bytes over as a DataView; other hosts (and tests) give an ArrayBuffer or a Uint8Array.

export interface ArrayMeta {
  offset: number;
  shape: number[];
  /** The Bytes trait the array lies in: "results" (the default) or "input_data". */
  trait: string;
}

export interface ResultsMeta {
  version: number;
  arrays: Record<string, ArrayMeta>;
  /** Any other keys of results_meta (e.g. the eps, dtype, silu the results were computed with, if the Python side sends them). */
  extra: Record<string, unknown>;
}

export interface NdArray {
  data: Float32Array;
  shape: number[];
}

export type Results = Map<string, NdArray>;

const LITTLE_ENDIAN_HOST = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

function asBytes(raw: unknown): Uint8Array | null {
  if (raw instanceof DataView) return new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength);
  if (raw instanceof Uint8Array) return raw;
  if (raw instanceof ArrayBuffer) return new Uint8Array(raw);
  if (ArrayBuffer.isView(raw)) return new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength);
  return null;
}

export function parseMeta(raw: unknown): ResultsMeta | null {
  if (typeof raw !== "object" || raw === null) return null;
  const m = raw as { version?: unknown; arrays?: unknown };
  if (typeof m.arrays !== "object" || m.arrays === null) return null;
  const arrays: Record<string, ArrayMeta> = {};
  for (const [name, a] of Object.entries(m.arrays as Record<string, unknown>)) {
    const am = a as { offset?: unknown; shape?: unknown; trait?: unknown };
    if (typeof am.offset !== "number" || !Array.isArray(am.shape)) continue;
    arrays[name] = { offset: am.offset, shape: (am.shape as unknown[]).map(Number), trait: typeof am.trait === "string" ? am.trait : "results" };
  }
  const extra: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(m)) if (k !== "version" && k !== "arrays") extra[k] = v;
  return { version: typeof m.version === "number" ? m.version : 0, arrays, extra };
}

/** Float32Arrays for every array in `meta` that lies wholly inside its buffer (`buffers[trait]`); a short or missing
 *  buffer drops the array, it never throws. */
export function decodeResults(buffers: Record<string, unknown>, meta: ResultsMeta | null): Results {
  const out: Results = new Map();
  if (meta === null) return out;
  for (const [name, { offset, shape, trait }] of Object.entries(meta.arrays)) {
    const bytes = asBytes(buffers[trait]);
    if (bytes === null) continue;
    const count = shape.reduce((a, b) => a * b, 1);
    if (offset < 0 || offset + 4 * count > bytes.byteLength) continue;
    const start = bytes.byteOffset + offset;
    let data: Float32Array;
    if (LITTLE_ENDIAN_HOST && start % 4 === 0) {
      data = new Float32Array(bytes.buffer, start, count);
    } else {
      const dv = new DataView(bytes.buffer, start, 4 * count);
      data = new Float32Array(count);
      for (let i = 0; i < count; i++) data[i] = dv.getFloat32(4 * i, true);
    }
    out.set(name, { data, shape });
  }
  return out;
}
