// Compiles every WGSL variant the WebGPU backend generated (recorded by
// tests/test_webgpu_dawn.py) with Dawn, the browser's WebGPU implementation, through
// the npm `webgpu` package: shader module + compute pipeline with the backend's bind
// group layout, inside a validation error scope.  Prints one JSON line, with each variant's compile time
// in ms (module and pipeline, waited for: scripts/pipeline-compile-times).
import { create, globals } from 'webgpu';
import fs from 'fs';

Object.assign(globalThis, globals);
const variants = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const gpu = create([]);
const adapter = await gpu.requestAdapter();
const device = await adapter.requestDevice({
  requiredLimits: { maxStorageBuffersPerShaderStage: Math.min(16, adapter.limits.maxStorageBuffersPerShaderStage) },
});
const kinds = { read: 'read-only-storage', read_write: 'storage', uniform: 'uniform' };
const problems = [];
const ms = [];
for (const v of variants) {
  const t0 = performance.now();
  device.pushErrorScope('validation');
  const module = device.createShaderModule({ code: v.code });
  const layout = device.createBindGroupLayout({
    entries: v.kinds.map((k, i) => ({ binding: i, visibility: GPUShaderStage.COMPUTE, buffer: { type: kinds[k] } })),
  });
  device.createComputePipeline({
    layout: device.createPipelineLayout({ bindGroupLayouts: [layout] }), compute: { module, entryPoint: v.entry },
  });
  const err = await device.popErrorScope();
  ms.push(performance.now() - t0);
  if (err) problems.push(`${v.name} (${v.entry}): ${err.message.split('\n').slice(0, 3).join(' | ')}`);
}
const info = adapter.info || {};
console.log(JSON.stringify({ adapter: `${info.vendor} ${info.description}`, compiled: variants.length, problems, ms }));
process.exit(0);
