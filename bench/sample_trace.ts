// The sampler's passes by phase on CUDA (issue 13's top-p alone): the
// sampler's own plan (planSample) recorded under a family of this script
// whose CUDA program is shaders/cuda/sample.cu with MLXN_SAMPLE_TRACE
// defined, so that thread 0 of block (0, 0) of each pass writes clock64()
// and %globaltimer at its phase boundaries (sample.cu SAMPLE_STAMP) into
// words past the scratch's layout. The library's program has no stamps (its
// SASS is the same with and without this script).
//
//   MLX_NATIVE_BACKEND=cuda bun run bench/sample_trace.ts [--rounds R]
//
// One row of 262144 logits, the configurations of bench/glue.ts's whole-row
// sampler rows (N(0, sigma^2) logits). The dispatches are recorded once in a
// replayable encoder (a CUDA graph, as a model's decode step runs them) and
// replayed R times (default 30); each replay's stamps are read back. Printed
// per stamp, the median over the replays: the %globaltimer time from the
// slice pass's entry (ns: the passes' starts and ends on one clock, launch
// gaps included) and the SM cycles from the previous stamp of the same
// block (clock64: a phase inside one block). Stamps a configuration does
// not reach print as '-'. Block (0, 0) is one block: a mass pass's other 63
// blocks may end later than it.

import { Device } from '../ts/index.ts';
import { normalLogits } from './common.ts';
import { planSample, SAMPLE_KERNELS, sampleScratchElements } from '../ts/ops/sample.ts';
import { familySources } from '../ts/registry.ts';
import { record, type OpPlan } from '../ts/plan.ts';
import src from '../shaders/sample.metal' with { type: 'text' };
import cudaSrc from '../shaders/cuda/sample.cu' with { type: 'text' };
import header from '../shaders/sample.h' with { type: 'text' };

const argv = process.argv;
const rounds = argv.includes('--rounds') ? Number(argv[argv.indexOf('--rounds') + 1]) : 30;
const dev = Device.open();
if (dev.backend !== 'cuda') throw new Error(`bench/sample_trace.ts: the stamps are CUDA code (backend ${dev.backend}); set MLX_NATIVE_BACKEND=cuda`);

const SOURCES = familySources('sample_trace', { header, metal: src, cuda: `#define MLXN_SAMPLE_TRACE 1\n${cudaSrc}` });
const STAMPS = 56;
const NAMES: Record<number, string> = {
  24: 'slice pass: entry',
  0: 'mass pass 0: entry', 1: '  row max', 2: '  (no digit)', 3: '  masses binned', 4: '  histogram added (end)',
  8: 'mass pass 1: entry', 9: '  row max', 13: '    bins\' masses loaded', 14: '    block scan', 10: '  level-0 digit derived', 11: '  masses binned, list appended', 12: '  histogram added (end)',
  16: 'mass pass 2: entry', 17: '  row max', 21: '    bins\' masses loaded', 22: '    block scan', 18: '  level-1 digit derived', 19: '  counts, list appended, kept mass', 20: '  record written (end)',
  32: 'finish: entry', 43: '  uniform drawn', 44: '  row state and max loaded', 45: '  slices\' stats read', 33: '  row max', 34: '  row mass', 35: '  list loaded', 48: '    ranked (rank_top)', 49: '    drawn (draw_ranked)', 36: '  ranked and drawn (end)',
  46: '    bins\' masses loaded', 47: '    block scan', 37: '  last digit derived', 38: '  kept set gathered from z, drawn (end)', 39: '  records: mass above the cut', 40: '  records: weights, ties',
  41: '  slice drawn (records)', 42: '  token drawn in the slice (end)',
};
const ORDER = [24, 0, 1, 2, 3, 4, 8, 9, 13, 14, 10, 11, 12, 16, 17, 21, 22, 18, 19, 20, 32, 43, 44, 45, 33, 34, 35, 48, 49, 36, 46, 47, 37, 38, 39, 40, 41,
  42];

const vocab = 262144;
const configs: [string, { temperature: number; topP?: number; minP?: number }, number][] = [
  ['top-p 0.95 alone, N(0, 36) logits', { temperature: 1, topP: 0.95 }, 6],
  ['top-p 0.95 alone, N(0, 4) logits', { temperature: 1, topP: 0.95 }, 2],
  ['min-p 0.02 alone, N(0, 4) logits', { temperature: 1, minP: 0.02 }, 2],
];

console.log(`device: ${dev.name} (${dev.backend}); ${rounds} replays a configuration, medians`);
/** Which pass's block (0, 0) writes stamp i: the mass passes 0-7, 8-15, 16-23, the slice pass 24, the finish from 32. */
const blockOf = (i: number): number => (i >= 32 ? 4 : Math.floor(i / 8));
const median = (v: number[]): number => [...v].sort((a, b) => a - b)[v.length >> 1]!;
for (const [what, o, sigma] of configs) {
  const logits = normalLogits(dev, 1, vocab, sigma);
  const outToken = dev.alloc('u32', [1]);
  const outLogprob = dev.alloc('f32', [1]);
  const used = sampleScratchElements(1, vocab);
  // The op takes scratch of exactly its size: a view of the first `used` words, the stamps past it.
  const backing = dev.alloc('u32', [used + 4 * STAMPS]);
  const scratch = backing.view('u32', [used], 0);
  const trace = backing.view('u32', [4 * STAMPS], 4 * used);
  const plan = planSample({ logits, outToken, outLogprob, scratch, rows: 1, vocab, ...o, seed: 1, counter: 0 }, dev.limits, dev);
  const traced: OpPlan = { ...plan, family: 'sample_trace', sources: SOURCES, kernels: SAMPLE_KERNELS };
  const enc = dev.encoder({ replayable: true });
  record(enc, traced);
  enc.commitAndWait();
  const ns: number[][] = Array.from({ length: STAMPS }, () => []);
  const cyc: number[][] = Array.from({ length: STAMPS }, () => []);
  const whole: number[] = [];
  for (let r = 0; r < rounds; r++) {
    trace.write(new Uint32Array(4 * STAMPS));
    enc.replayAndWait();
    whole.push(enc.gpuTimeNs);
    const t = trace.read() as Uint32Array;
    const clock = (i: number): bigint => BigInt(t[4 * i]!) | (BigInt(t[4 * i + 1]!) << 32n);
    const timer = (i: number): bigint => BigInt(t[4 * i + 2]!) | (BigInt(t[4 * i + 3]!) << 32n);
    const t0 = timer(24);
    let prev = -1;
    for (const i of ORDER) {
      if (timer(i) === 0n) continue;
      ns[i]!.push(Number(timer(i) - t0));
      if (prev >= 0 && blockOf(prev) === blockOf(i)) cyc[i]!.push(Number(clock(i) - clock(prev)));
      prev = i;
    }
  }
  enc.release();
  console.log(`\n${what}: ${plan.dispatches.length} dispatches, replayed ${(median(whole) / 1000).toFixed(2)} us (device time of the replay)`);
  console.log(`  ${'stamp'.padEnd(44)} ${'ns from the slice pass'.padStart(22)} ${'cycles since the last'.padStart(22)}`);
  for (const i of ORDER) {
    const a = ns[i]!, c = cyc[i]!;
    console.log(`  ${`${String(i).padStart(2)} ${NAMES[i]}`.padEnd(44)} ${(a.length ? median(a).toFixed(0) : '-').padStart(22)} ` +
      `${(c.length ? median(c).toFixed(0) : '-').padStart(22)}${a.length && a.length < rounds ? `  (${a.length} of ${rounds})` : ''}`);
  }
  logits.release();
  outToken.release();
  outLogprob.release();
  backing.release();
}
dev.close();
