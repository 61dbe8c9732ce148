// Types for consumers: an app that installs the package typechecks under its
// own compiler flags, whatever they are: the package's declarations (types/,
// emitted from ts/) are what it reads, never the sources with their shader
// text imports.
import { afterAll, describe, expect, test } from 'bun:test';
import { spawnSync } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CONSUMER_TSCONFIGS, makeConsumerApp, packedFiles, readmeUseExamples, typecheck } from './consumer.ts';

const npm = spawnSync('npm', ['--version']).status === 0;

describe.if(npm)('consumer types', () => {
  let dir = '';
  const app = (): string => {
    if (dir === '') {
      dir = makeConsumerApp(packedFiles());
      readmeUseExamples().forEach((src, i) => writeFileSync(join(dir, `use${i + 1}.ts`), src));
      // Every public entry point, a custom kernel and typed buffers.
      writeFileSync(
        join(dir, 'api.ts'),
        `import { Device, MlxError, type Buffer, type DType, type Encoder } from 'mlx-native';
import * as ops from 'mlx-native/ops';
import * as ref from 'mlx-native/reference';
import { TOL, describeBackends, expectClose, maxRelErr, nmse, poisoned, randomArray, rng } from 'mlx-native/testing';
import { GgufFile, SafetensorsFile, checkModel, describeModel, openWeights, type ModelWeights, type PackedWeights, type TensorInfo } from 'mlx-native/weights';
import { loadModel, type CausalLM, type LoadOptions } from 'mlx-native/models';
describeBackends('parity', ({ device }) => {
  const x = randomArray(rng(1), 8);
  using out = poisoned(device(), 'f32', [8]);
  expectClose(out.readNumbers(), x, TOL.f32);
  if (maxRelErr(x, x) + nmse(x, x) !== 0) throw new Error('unreachable');
});
export function run(device: Device, dtype: DType): Buffer {
  const b = device.alloc(dtype, [4]);
  b.write(new Float32Array(4), { convert: true });
  const enc: Encoder = device.encoder();
  enc.release();
  if (!(new MlxError('Internal', 'x') instanceof Error)) throw new Error('unreachable');
  return b;
}
export const names = [Object.keys(ops).length, Object.keys(ref).length];
export function load(device: Device, path: string): { packed: PackedWeights; model: ModelWeights; infos: TensorInfo[] } {
  const source = openWeights(path);
  const model = describeModel(source, { arch: 'qwen3_5_moe' });
  const report = checkModel(source.names(), { arch: 'gemma4' });
  const gguf: GgufFile | null = source instanceof GgufFile ? source : null;
  const st: SafetensorsFile | null = source instanceof SafetensorsFile ? source : null;
  if (report.complete && gguf === null && st === null) throw new Error('unreachable');
  return { packed: source.uploadPacked(device, model.tensorNames), model, infos: [...source.tensors.values()] };
}
export function generate(device: Device, folder: string): number[] {
  const opts: LoadOptions = { maxContext: 64, precision: 'exact', prefillAttention: 'vector', weights: 'stored' };
  using model: CausalLM = loadModel(folder, device, opts);
  return model.generate([1, 2, 3], 4);
}
`,
      );
    }
    return dir;
  };
  afterAll(() => {
    if (dir !== '') rmSync(dir, { recursive: true, force: true });
  });

  test('the README\'s "Use" section has the examples', () => {
    expect(readmeUseExamples().length).toBeGreaterThanOrEqual(2);
  });

  for (const name of Object.keys(CONSUMER_TSCONFIGS)) {
    test(`tsc --noEmit passes with the consumer's ${name} settings`, () => {
      const d = app();
      const sources = ['api.ts', ...readmeUseExamples().map((_, i) => `use${i + 1}.ts`)];
      expect(typecheck(d, name, sources)).toEqual({ status: 0, output: '' });
    });
  }
});
