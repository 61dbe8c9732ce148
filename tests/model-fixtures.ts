// The fixtures scripts/model_fixtures.py writes on the GPU machine:
// transformers' own float32 logits for tiny random-weight checkpoints of
// Qwen3.6 and Gemma 4 (tests/fixtures/models/<name>/: config.json,
// model.safetensors, fixture.json, fixture.bin). For the tests and the demo
// (not shipped).

import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export const MODEL_FIXTURES_DIR = join(import.meta.dir, 'fixtures', 'models');

/** ||got - want|| / ||want|| over want's length: how a model's logits are held to the reference's. */
export function relL2(got: ArrayLike<number>, want: ArrayLike<number>): number {
  let n = 0, d = 0;
  for (let i = 0; i < want.length; i++) {
    n += (got[i]! - want[i]!) ** 2;
    d += want[i]! ** 2;
  }
  return Math.sqrt(n / d);
}

interface ArrayEntry {
  name: string;
  dtype: 'f32';
  shape: number[];
  offset: number;
  bytes: number;
}

interface Manifest {
  name: string;
  model_class: string;
  model_type: string;
  versions: Record<string, string>;
  prompt: number[];
  tokens: number[];
  prefill_margins: number;
  decode_margins: number[];
  checks: Record<string, number | boolean | string>;
  arrays: ArrayEntry[];
}

export interface ModelFixture {
  readonly name: string;
  readonly folder: string;
  readonly manifest: Manifest;
  readonly prompt: number[];
  /** tokens[0] from the prompt's last position, tokens[i + 1] from decode step i. */
  readonly tokens: number[];
  /** [prompt.length][vocab]: every prompt position. */
  readonly prefill: Float32Array[];
  /** [steps][vocab]: decode step i was fed tokens[i]. */
  readonly decode: Float32Array[];
}

export function modelFixture(name: string): ModelFixture {
  const folder = join(MODEL_FIXTURES_DIR, name);
  const manifest = JSON.parse(readFileSync(join(folder, 'fixture.json'), 'utf8')) as Manifest;
  const bin = readFileSync(join(folder, 'fixture.bin'));
  const rowsOf = (arrayName: string): Float32Array[] => {
    const a = manifest.arrays.find((x) => x.name === arrayName);
    if (a === undefined) throw new Error(`${name}: fixture.json has no array ${arrayName}`);
    const all = new Float32Array(bin.buffer.slice(bin.byteOffset + a.offset, bin.byteOffset + a.offset + a.bytes));
    const [rows, cols] = a.shape as [number, number];
    return Array.from({ length: rows }, (_, r) => all.subarray(r * cols, (r + 1) * cols));
  };
  return { name, folder, manifest, prompt: manifest.prompt, tokens: manifest.tokens, prefill: rowsOf('prefill_logits'), decode: rowsOf('decode_logits') };
}

/** The fixtures present (every one scripts/model_fixtures.py writes, once committed). */
export function modelFixtureNames(): string[] {
  return ['qwen3_5_moe', 'gemma4', 'gemma4_e'].filter((n) => existsSync(join(MODEL_FIXTURES_DIR, n, 'fixture.json')));
}
