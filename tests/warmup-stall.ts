// Measures how long the event loop stalls while kernel families compile:
//   bun tests/warmup-stall.ts async|sync
// async: KernelRegistry.warmup() of the families, then a pipeline of each;
// sync: a pipeline of each with no warm-up (the compile runs on first use).
// A 1 ms interval timer runs throughout; prints one JSON line with the total
// time and the longest gap between its ticks. tests/warmup.test.ts runs it
// with a fresh emulator cache so the compiles are cold.
import { Device } from '../ts/index.ts';
import { L2_NORM_FAMILY, L2_NORM_KERNELS, L2_NORM_SOURCES } from '../ts/ops/l2_norm.ts';
import { RMS_NORM_FAMILY, RMS_NORM_KERNELS, RMS_NORM_SOURCES } from '../ts/ops/rms_norm.ts';

const mode = process.argv[2];
if (mode !== 'async' && mode !== 'sync') throw new Error('usage: bun tests/warmup-stall.ts async|sync');
const families = [
  { family: L2_NORM_FAMILY, sources: L2_NORM_SOURCES, kernels: L2_NORM_KERNELS },
  { family: RMS_NORM_FAMILY, sources: RMS_NORM_SOURCES, kernels: RMS_NORM_KERNELS },
];

using dev = Device.open({ backend: 'emu' });
const kernels = dev.kernels;
for (const f of families) kernels.register(f.family, f.sources, f.kernels);

let last = performance.now();
let maxGapMs = 0;
const timer = setInterval(() => {
  const t = performance.now();
  maxGapMs = Math.max(maxGapMs, t - last);
  last = t;
}, 1);
await new Promise((res) => setTimeout(res, 20));
const t0 = performance.now();
last = t0;
if (mode === 'async') await kernels.warmup(families.map((f) => f.family));
for (const f of families) kernels.pipeline(f.kernels[0]!);
const ms = performance.now() - t0;
await new Promise((res) => setTimeout(res, 5));
clearInterval(timer);
console.log(JSON.stringify({ mode, ms, maxGapMs }));
