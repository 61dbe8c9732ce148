// Benchmark (not a test): the host cost of encoding one dispatch from
// TypeScript against the same loop written in C over the same ABI, on the emu
// backend. Each dispatch binds four buffers and 4 bytes of inline data; only
// the encoding is timed: every batch is committed and waited for outside the
// timed region.
//
//   bun bench/overhead/run.ts [--batch N] [--batches M] [--rounds R] [--save]
//
// --save writes the report to bench/results/overhead-<date>.md.

import { spawnSync } from 'node:child_process';
import { cpus, loadavg, release, totalmem } from 'node:os';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Device, type DispatchBindings, type Dim3 } from '../../ts/index.ts';
import { msgBuf, msgCap } from '../../ts/native.ts';
import { DispatchBlock, packDispatch } from '../../ts/encoder.ts';
import type { Pointer } from 'bun:ffi';

const root = join(import.meta.dir, '..', '..');
const args = process.argv.slice(2);
function opt(name: string, dflt: number): number {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : dflt;
}
const perBatch = opt('--batch', 1000);
const batches = opt('--batches', 40);
const rounds = opt('--rounds', 5);
const save = args.includes('--save');

const loadAtStart = loadavg()[0]!;
const kernelPath = join(import.meta.dir, 'kernel.metal');
const source = readFileSync(kernelPath, 'utf8');

const device = Device.open({ backend: 'emu' });
const lib = device.compile(source, { name: 'kernel.metal' });
const pipe = lib.pipeline('add3');
const bufs = [0, 1, 2, 3].map(() => device.alloc('f32', [64]));
// Inline data as ops pass it: the bytes of a packed param struct.
const s = new Uint8Array(Float32Array.of(1.5).buffer);
const one: Dim3 = [1, 1, 1];

/** ns per dispatch of `body` run perBatch times per batch, batches timed, one untimed warm-up batch. */
function timeLoop(body: (enc: import('../../ts/index.ts').Encoder) => void): number {
  // No automatic barriers: each dispatch here writes what the previous one wrote,
  // and what is timed is the dispatch itself (a barrier is one more call).
  using enc = device.encoder({ autoBarriers: false });
  let total = 0;
  for (let b = -1; b < batches; b++) {
    const t0 = Bun.nanoseconds();
    for (let i = 0; i < perBatch; i++) body(enc);
    const t1 = Bun.nanoseconds();
    if (b >= 0) total += t1 - t0;
    enc.commitAndWait();
  }
  return total / (perBatch * batches);
}

const hoisted: DispatchBindings = { buffers: { 0: bufs[0]!, 1: bufs[1]!, 2: bufs[2]!, 3: bufs[3]! }, bytes: { 4: s } };
const hoistedArrays: DispatchBindings = { buffers: [bufs[0]!, bufs[1]!, bufs[2]!, bufs[3]!], bytes: [, , , , s] };

const variants: Record<string, (enc: import('../../ts/index.ts').Encoder) => void> = {
  // An op as ops are written: a fresh bindings object and grid per dispatch.
  'TS enc.dispatch, bindings written inline': (enc) =>
    enc.dispatch(pipe, { buffers: { 0: bufs[0]!, 1: bufs[1]!, 2: bufs[2]!, 3: bufs[3]! }, bytes: { 4: s } }, [1, 1, 1], [1, 1, 1]),
  'TS enc.dispatch, bindings as arrays inline': (enc) =>
    enc.dispatch(pipe, { buffers: [bufs[0]!, bufs[1]!, bufs[2]!, bufs[3]!], bytes: [, , , , s] }, [1, 1, 1], [1, 1, 1]),
  'TS enc.dispatch, bindings object reused': (enc) => enc.dispatch(pipe, hoisted, one, one),
  'TS enc.dispatch, array bindings reused': (enc) => enc.dispatch(pipe, hoistedArrays, one, one),
};

// The raw FFI call with a block packed once: the floor that bun:ffi sets.
const rawBlock = new DispatchBlock();
const rawLen = packDispatch(rawBlock, bufs[0]!._state, pipe._h, hoisted, one, one);
const sym = bufs[0]!._state.sym;
variants['bun:ffi call alone (block packed once)'] = (enc) => {
  if (sym.mlxn_encoder_dispatch(enc._h as Pointer, rawBlock.bytes, rawLen, msgBuf, msgCap) !== 0) throw new Error('dispatch failed');
};

function median(xs: number[]): number {
  const v = [...xs].sort((a, b) => a - b);
  return v[Math.floor(v.length / 2)]!;
}

// The C loop.
const work = join(root, 'bench', '.work');
mkdirSync(work, { recursive: true });
const exe = join(work, 'overhead');
const cc = process.env.CC ?? 'clang-19';
const build = spawnSync(cc, ['-O2', '-Wall', '-I', join(root, 'native', 'include'), join(import.meta.dir, 'overhead.c'), '-o', exe, '-ldl'], {
  encoding: 'utf8',
});
if (build.status !== 0) throw new Error(`building overhead.c with ${cc} failed:\n${build.stderr}`);
function runC(): number {
  const r = spawnSync(exe, [device.libraryPath, kernelPath, String(perBatch), String(batches)], { encoding: 'utf8' });
  const m = /c_ns_per_dispatch ([\d.]+)/.exec(r.stdout);
  if (r.status !== 0 || !m) throw new Error(`overhead (C) failed: ${r.stdout}${r.stderr}`);
  return Number(m[1]);
}

// Rounds alternate C and TS so that both see the same machine load.
const samples: Record<string, number[]> = { C: [] };
for (const name of Object.keys(variants)) samples[name] = [];
for (let r = 0; r < rounds; r++) {
  samples.C!.push(runC());
  for (const [name, body] of Object.entries(variants)) samples[name]!.push(timeLoop(body));
}

const c = median(samples.C!);
const rows = Object.entries(samples).map(([name, xs]) => {
  const m = median(xs);
  return `| ${name} | ${m.toFixed(0)} | ${Math.min(...xs).toFixed(0)} | ${(m / c).toFixed(2)} |`;
});
const goal = Object.entries(samples)
  .filter(([name]) => name.startsWith('TS '))
  .map(([name, xs]) => {
    const m = median(xs);
    return `- ${name.slice(3)}: ${m.toFixed(0)} ns, ${(m / c).toFixed(2)}x C: ${m < 1000 && m / c <= 1.5 ? 'met' : 'not met'}`;
  });

const cpu = cpus()[0]?.model ?? 'unknown CPU';
const clangVersion = spawnSync(cc, ['--version'], { encoding: 'utf8' }).stdout.split('\n')[0];
const date = new Date().toISOString().slice(0, 10);
const report = `# Dispatch encoding overhead, ${date}

Host cost of encoding one dispatch (4 buffers + 4 bytes inline, grid 1x1x1) on
the emu backend: TypeScript through \`bun:ffi\` against the same loop in C over
the same ABI (\`bench/overhead/overhead.c\`, \`dlopen\`). Encoding only: each batch
of ${perBatch} dispatches is committed and waited for outside the timed region.
${batches} batches per sample, ${rounds} samples per row, C and TS alternating.

Machine: ${cpu}, ${cpus().length} logical cores (1-minute load average ${loadAtStart.toFixed(2)} at start), ${Math.round(totalmem() / 2 ** 30)} GiB,
Linux ${release()}; Bun ${Bun.version}; ${clangVersion}; library ${device.libraryPath.replace(root + '/', '')}.

Command: \`bun bench/overhead/run.ts${args.length ? ' ' + args.join(' ') : ''}\`

| loop | median ns/dispatch | best ns/dispatch | ratio to C (median) |
| --- | ---: | ---: | ---: |
${rows.join('\n')}

Goal: TS within 1.5x of C and under 1000 ns per dispatch.
${goal.join('\n')}
`;
console.log(report);
if (save) {
  const out = join(root, 'bench', 'results', `overhead-${date}.md`);
  mkdirSync(join(root, 'bench', 'results'), { recursive: true });
  writeFileSync(out, report);
  console.log(`wrote ${out}`);
}

lib.release();
device.close();
