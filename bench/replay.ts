// Host cost of a step recorded afresh against one recorded once and replayed
// (issue 16, item 4): what the CPU spends per step in TypeScript and in the
// backend's submission, not the device's time and not the wait for it.
//
//   chain N   N small dispatches (y = x + k over 256 floats, ping-ponging
//             between two buffers, so a barrier separates every pair), for
//             N = 100, 500, 1000. Recorded: a new encoder, N dispatches, the
//             commit call. Replayed: one patch of the first dispatch's k
//             (one op re-planned per step, as a model's position), the
//             replay call.
//   models    the tiny random-weight Qwen3.6 and Gemma 4 checkpoints of the
//             tests (tests/model-checkpoints.ts), a 12-token prompt, then
//             decode steps: CausalLM.hostStepMs of each step (recording, or
//             writing the position and patching kv_cache_copy and
//             flash_attn_vec, plus the submission), loadModel with
//             { replay: false } and { replay: true } (the default).
// Each row: the median over the timed steps (after warm-up steps) and per
// dispatch. Also checks that both ways give the same results. The chains'
// last column is the device's time of a replayed step per dispatch: on cuda,
// what a dependent kernel costs in a graph when it does almost nothing (the
// floor a model step of that many dispatches cannot go under).
//
//   bun run bench/replay.ts [--steps N]
// Backend: MLX_NATIVE_BACKEND or the default.

import { Device, type Buffer, type Encoder, type Library } from '../ts/index.ts';
import { loadModel } from '../ts/models/index.ts';
import { writeTinyCheckpoint, type TinyArch } from '../tests/model-checkpoints.ts';
import { ADD_K } from '../tests/replay-kernels.ts';
import { uniformBuffer } from './common.ts';

const stepsAt = process.argv.indexOf('--steps');
const STEPS = stepsAt >= 0 ? Number(process.argv[stepsAt + 1]) : 30;
const WARMUP = 3;
const dev = Device.open();

const SOURCE = ADD_K;

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[s.length >> 1]!;
}

interface Row { what: string; dispatches: number; recordedMs: number; replayedMs: number; deviceUs?: number }

const ELEMENTS = 256;

function chain(lib: Library, n: number): Row {
  const pipe = lib.pipeline('add_k');
  const a = uniformBuffer(dev, 'f32', [ELEMENTS], 1);
  const b = dev.alloc('f32', [ELEMENTS]);
  const count = Uint32Array.of(ELEMENTS);
  const record = (enc: Encoder, k0: number) => {
    for (let i = 0; i < n; i++) {
      const [src, dst] = i % 2 === 0 ? [a, b] : [b, a];
      enc.dispatch(pipe, { buffers: [src, dst], bytes: [, , Float32Array.of(i === 0 ? k0 : 1e-3), count] }, [1, 1, 1], [ELEMENTS, 1, 1]);
    }
  };
  const start = a.read().slice();
  // Recorded afresh every step.
  const recorded: number[] = [];
  for (let s = 0; s < WARMUP + STEPS; s++) {
    const t0 = performance.now();
    const enc = dev.encoder();
    record(enc, s);
    const recordMs = performance.now() - t0;
    enc.commitAndWait();
    if (s >= WARMUP) recorded.push(recordMs + enc.submitMs);
    enc.release();
  }
  const fresh = a.read().slice();
  // Recorded once, then patched (the first dispatch's k) and replayed.
  a.write(start);
  const replayed: number[] = [];
  const device: number[] = [];
  const enc = dev.encoder({ replayable: true });
  record(enc, 0);
  enc.commitAndWait();
  const first = [{ pipeline: pipe, bindings: { buffers: [a, b] as Buffer[], bytes: [, , Float32Array.of(0), count] }, grid: [1, 1, 1] as const, threads: [ELEMENTS, 1, 1] as const }];
  for (let s = 1; s < WARMUP + STEPS; s++) {
    const t0 = performance.now();
    first[0]!.bindings.bytes[2] = Float32Array.of(s);
    enc.patch(0, first);
    const patchMs = performance.now() - t0;
    enc.replayAndWait();
    if (s >= WARMUP) {
      replayed.push(patchMs + enc.submitMs);
      device.push(enc.gpuTimeNs / 1e3);
    }
  }
  const same = a.read().every((v, i) => v === fresh[i]);
  if (!same) throw new Error(`chain ${n}: replayed results differ from those recorded afresh`);
  enc.release();
  a.release();
  b.release();
  return { what: `chain of ${n} add_k (256 floats)`, dispatches: n, recordedMs: median(recorded), replayedMs: median(replayed), deviceUs: median(device) };
}

const PROMPT = [17, 301, 42, 9, 100, 200, 311, 7, 8, 450, 3, 77];

function model(arch: TinyArch, folder: string): Row {
  const run = (replay: boolean) => {
    using m = loadModel(folder, dev, { maxContext: 64, replay });
    const tokens = [m.prefill(PROMPT)];
    const host: number[] = [];
    for (let s = 0; s < WARMUP + Math.min(STEPS, 40); s++) {
      tokens.push(m.decode());
      if (s >= WARMUP) host.push(m.hostStepMs);
    }
    return { tokens, ms: median(host), dispatches: m.stepDispatches };
  };
  const plain = run(false);
  const replayed = run(true);
  if (plain.tokens.join() !== replayed.tokens.join()) throw new Error(`${arch}: replayed tokens differ from those recorded afresh`);
  return { what: `${arch} tiny, decode step`, dispatches: plain.dispatches, recordedMs: plain.ms, replayedMs: replayed.ms };
}

const rows: Row[] = [];
const lib = dev.compile(dev.backend === 'cuda' ? SOURCE.cuda : SOURCE.metal, { name: dev.backend === 'cuda' ? 'replay_bench.cu' : 'replay_bench.metal' });
for (const n of [100, 500, 1000]) rows.push(chain(lib, n));
lib.release();
for (const arch of ['qwen3_5_moe', 'gemma4'] as TinyArch[]) rows.push(model(arch, writeTinyCheckpoint(arch, 7)));

console.log(`replay host cost on ${dev.backend} (${dev.name}), ${new Date().toISOString().slice(0, 10)}, median of ${STEPS} steps (models: ${Math.min(STEPS, 40)})`);
console.log('| work | dispatches | recorded: ms/step | us/dispatch | replayed: ms/step | us/dispatch | ratio | device time replayed: us/dispatch |');
console.log('|---|---:|---:|---:|---:|---:|---:|---:|');
for (const r of rows) {
  const us = (ms: number) => ((ms * 1e3) / r.dispatches).toFixed(2);
  console.log(`| ${r.what} | ${r.dispatches} | ${r.recordedMs.toFixed(3)} | ${us(r.recordedMs)} | ${r.replayedMs.toFixed(3)} | ${us(r.replayedMs)} | ${(r.recordedMs / r.replayedMs).toFixed(1)}x | ${r.deviceUs === undefined ? '' : (r.deviceUs / r.dispatches).toFixed(2)} |`);
}
dev.close();
