// Benchmark (not a test): the host cost of one call of a few real ops on the
// emu backend: validation, parameter packing, pipeline lookup and the
// dispatch(es) the op records. Each round records --calls calls of an op into
// one encoder and times only that; the commit (and so the kernels' execution
// in the emulator) happens outside the timed region, after one untimed
// warm-up round. Shapes are the smallest each op accepts, so that the
// emulator's untimed work stays short; the host cost does not depend on them.
//
//   bun bench/overhead/ops.ts [--calls N] [--rounds R]
//
// Prints, per op, the median and best ns per call over the rounds.

import { cpus, loadavg, release, totalmem } from 'node:os';
import { join } from 'node:path';
import { Device, type Encoder } from '../../ts/index.ts';
import { flashAttnVec, fusedNormAdd, gatedDeltaNetDecode, ssmNormGate } from '../../ts/ops/index.ts';

const args = process.argv.slice(2);
function opt(name: string, dflt: number): number {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : dflt;
}
const calls = opt('--calls', 1000);
const rounds = opt('--rounds', 9);

const root = join(import.meta.dir, '..', '..');
const loadAtStart = loadavg()[0]!;
const device = Device.open({ backend: 'emu' });
const f32 = (n: number) => device.alloc('f32', [n]);

// fused_norm_add: one row of 32.
const dim = 32;
const norm = { residual: f32(dim), input: f32(dim), weight: f32(dim), output: f32(dim), rows: 1, dim, eps: 1e-6 };
// ssm_norm_gate: one head vector of 32.
const gate = { attnOut: f32(dim), weight: f32(dim), z: f32(dim), output: f32(dim), rows: 1, dV: dim, eps: 1e-6 };
// gated_delta_net_decode: one sequence, one head, K = 32, V = 16.
const K = 32, V = 16;
const gdn = {
  q: f32(K), k: f32(K), v: f32(V), g: f32(1), beta: f32(1), state: f32(V * K), output: f32(V),
  batch: 1, nQkHeads: 1, nHeads: 1, kDim: K, vDim: V,
};
// flash_attn_vec: one row, one head, D = 256, one KV position, one workgroup.
const D = 256;
const attn = {
  q: f32(D), k: f32(D), v: f32(D), out: f32(D),
  batch: 1, nHeads: 1, nKvHeads: 1, headDim: D, kvSeqLen: 1, kvCapacity: 1, scale: 1 / 16, mask: 'none' as const, nwg: 1,
};

const ops: Record<string, (enc: Encoder) => void> = {
  fusedNormAdd: (enc) => fusedNormAdd(enc, norm),
  ssmNormGate: (enc) => ssmNormGate(enc, gate),
  gatedDeltaNetDecode: (enc) => gatedDeltaNetDecode(enc, gdn),
  flashAttnVec: (enc) => flashAttnVec(enc, attn),
};

/** ns per call of each round's `calls` calls of `body` (one untimed warm-up round first). */
function timeOp(body: (enc: Encoder) => void): number[] {
  using enc = device.encoder();
  const out: number[] = [];
  for (let r = -1; r < rounds; r++) {
    const t0 = Bun.nanoseconds();
    for (let i = 0; i < calls; i++) body(enc);
    const t1 = Bun.nanoseconds();
    if (r >= 0) out.push((t1 - t0) / calls);
    enc.commitAndWait();
  }
  return out;
}

function median(xs: number[]): number {
  const v = [...xs].sort((a, b) => a - b);
  return v[Math.floor(v.length / 2)]!;
}

const rows: string[] = [];
for (const [name, body] of Object.entries(ops)) {
  const xs = timeOp(body);
  rows.push(`| ${name} | ${median(xs).toFixed(0)} | ${Math.min(...xs).toFixed(0)} |`);
}

console.log(`Host cost per op call on the emu backend: ${calls} calls recorded per round, ${rounds} rounds, commit outside the timed region.

Machine: ${cpus()[0]?.model ?? 'unknown CPU'}, ${cpus().length} logical cores (1-minute load average ${loadAtStart.toFixed(2)} at start), ${Math.round(totalmem() / 2 ** 30)} GiB,
Linux ${release()}; Bun ${Bun.version}; library ${device.libraryPath.replace(root + '/', '')}.

Command: \`bun bench/overhead/ops.ts${args.length ? ' ' + args.join(' ') : ''}\`

| op | median ns/call | best ns/call |
| --- | ---: | ---: |
${rows.join('\n')}
`);

device.close();
