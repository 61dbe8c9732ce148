// Times the dense family (ts/ops/dense.ts) with the encoder's GPU time, at
// 4096^3 and at Qwen3.6 27B / Gemma 4 31B projection shapes: per case a
// warm-up commit, then 5 commits of `iters` back-to-back dispatches; time
// per dispatch = median of gpuTimeNs / iters. bench/matmul_peers.py times
// torch.matmul / F.linear (cuBLAS) and torch.compile at the same shapes and
// measures the peak it divides by.
//
//   bun run bench/matmul.ts [--small] [--peak-tflops T] [--copy-gbs B]
//
// --small: shapes the emulator runs. With the peak bf16 TFLOP/s and the copy
// bandwidth (GB/s, bytes read + written) that matmul_peers.py printed on the
// same machine, each row also gets its floor and our fraction of it:
//   matrix form (compute-bound): floor = 2 m n k / peak;
//   vector form (decode, memory-bound): floor = bytes / copy bandwidth, the
//   bytes being the weight's (read once) plus x and y.
// Backend: MLX_NATIVE_BACKEND or the default. Inputs are random, never zeros.

import { Device, type Buffer, type DType, type Encoder } from '../ts/index.ts';
import { gpuTimePerDispatch, uniformBuffer } from './common.ts';
import { denseMatmul, denseMatmulTensor, denseMatvec } from '../ts/ops/dense.ts';

const small = process.argv.includes('--small');
const arg = (name: string): number | null => {
  const i = process.argv.indexOf(name);
  return i < 0 ? null : Number(process.argv[i + 1]);
};
const peakTflops = arg('--peak-tflops');
const copyGbs = arg('--copy-gbs');
const dev = Device.open();
const size = (d: DType): number => (d === 'f32' ? 4 : 2);

const random = (dtype: DType, n: number): Buffer => uniformBuffer(dev, dtype, [n], 0.5);

interface Case {
  name: string;
  /** 2 m n k */
  flops: number;
  /** The weight read once, x read, y written. */
  bytes: number;
  /** Memory-bound (decode): the floor is bytes / bandwidth; else flops / peak. */
  memoryBound: boolean;
  record: (enc: Encoder) => void;
}

/** y = x W^T, x [m, k], W [n, k], one dtype (dense_matmul: the vector form for m <= 8). */
function dense(label: string, dt: 'bf16' | 'f16' | 'f32', m: number, n: number, k: number): Case {
  const x = random(dt, m * k);
  const w = random(dt, n * k);
  const y = dev.alloc(dt, [m * n]);
  return {
    name: `${label} ${dt} m=${m} n=${n} k=${k}`,
    flops: 2 * m * n * k,
    bytes: (n * k + m * k + m * n) * size(dt),
    memoryBound: m <= 8,
    record: (e) => denseMatmul(e, { x, weight: w, output: y, m, n, k }),
  };
}

function cases(): Case[] {
  if (small) {
    return [dense('square', 'bf16', 64, 64, 64), dense('decode', 'bf16', 1, 256, 256), dense('decode', 'bf16', 8, 256, 256)];
  }
  const out: Case[] = [dense('square', 'bf16', 4096, 4096, 4096), dense('square', 'f16', 4096, 4096, 4096), dense('square', 'f32', 4096, 4096, 4096)];
  // Qwen3.6 27B MLP: hidden 5120, intermediate 17408 (gate/up 5120 -> 17408, down 17408 -> 5120).
  for (const m of [1, 8, 512, 8192]) out.push(dense('Qwen3.6 up', 'bf16', m, 17408, 5120));
  for (const m of [1, 8192]) out.push(dense('Qwen3.6 down', 'bf16', m, 5120, 17408));
  // Gemma 4 31B: hidden 5376, MLP 21504 (4 x hidden); the 262144-token vocabulary projection.
  for (const m of [1, 8, 8192]) out.push(dense('Gemma 4 up', 'bf16', m, 21504, 5376));
  out.push(dense('Gemma 4 lm_head', 'bf16', 1, 262144, 5376));
  {
    // mlx-native's f32-activation decode kernel on the same vocabulary projection.
    const [n, k] = [262144, 5376];
    const a = random('f32', k);
    const b = random('bf16', n * k);
    const c = dev.alloc('f32', [n]);
    out.push({ name: `Gemma 4 lm_head dense_matvec_bf16w_f32io m=1 n=${n} k=${k}`, flops: 2 * n * k, bytes: 2 * n * k + 4 * (k + n), memoryBound: true,
      record: (e) => denseMatvec(e, { a, b, output: c, m: 1, n, k }) });
  }
  {
    // mlx-native's f32-activation matrix kernel (the input rounded to bf16 while staged).
    const [m, n, k] = [4096, 4096, 4096];
    const src1 = random('f32', m * k);
    const src0 = random('bf16', n * k);
    const dst = dev.alloc('f32', [m * n]);
    out.push({ name: `square hf2q_dense_mm_bf16_f32_tensor m=${m} n=${n} k=${k}`, flops: 2 * m * n * k, bytes: 2 * n * k + 4 * (m * k + m * n),
      memoryBound: false, record: (e) => denseMatmulTensor(e, { src0, src1, dst, m, n, k, src0Batch: 1, src1Batch: 1 }) });
  }
  return out;
}

const time = (c: Case, iters: number): number => gpuTimePerDispatch(dev, c.record, iters);

console.log(`device: ${dev.name} (${dev.backend})${peakTflops ? `, peak ${peakTflops} TFLOP/s` : ''}${copyGbs ? `, copy ${copyGbs} GB/s` : ''}`);
for (const c of cases()) {
  const probe = time(c, 1);
  const iters = Math.max(1, Math.min(200, Math.round(2e8 / Math.max(probe, 1))));
  const ts = Array.from({ length: 5 }, () => time(c, iters)).sort((a, b) => a - b);
  const ns = ts[2]!;
  const floorNs = c.memoryBound ? (copyGbs ? c.bytes / copyGbs : null) : peakTflops ? c.flops / (peakTflops * 1e3) : null;
  const floor = floorNs === null ? '' : `  floor ${(floorNs / 1000).toFixed(2).padStart(9)} us (${((100 * floorNs) / ns).toFixed(0)}% of it)`;
  console.log(`${c.name.padEnd(64)} ${(ns / 1000).toFixed(2).padStart(10)} us  ${(c.flops / ns / 1e3).toFixed(1).padStart(7)} TFLOP/s  ` +
    `${(c.bytes / ns).toFixed(0).padStart(5)} GB/s${floor}`);
}
dev.close();
