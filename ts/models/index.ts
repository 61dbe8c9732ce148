// mlx-native/models: whole forward passes of Qwen3.6 (qwen3_5_moe) and
// Gemma 4 (gemma4) built from the public ops, loaded from a Hugging Face
// checkpoint folder (config.json and safetensors), with greedy decoding on
// the device.

import type { Device } from '../device.ts';
import { GgufFile, describeModel, openWeights, type Gemma4Weights, type Qwen35MoeWeights } from '../weights/index.ts';
import { invalid } from '../validate.ts';
import { Checkpoint, type WeightDtype } from './checkpoint.ts';
import { modelConfig, readConfigFile } from './config.ts';
import { Gemma4 } from './gemma4.ts';
import { quantizationOf, type ModelOptions } from './model.ts';
import { Qwen35Moe } from './qwen3_5_moe.ts';

export {
  linear, project, routedExperts, rows, Scratch, type ExpertOutputs, type ExpertWeights, type Linear, type ProductPrecision, type Projection,
  type RoutedExperts,
} from './blocks.ts';
export { attentionDecode, attentionPrefill, fillCache, newKvCache, type AttentionSpec, type KvCache, type PrefillAttention } from './attention.ts';
export { Checkpoint, PROJECTION_ROWS, type AffineQuantization, type RowsPart, type WeightDtype } from './checkpoint.ts';
export {
  configArch, gemma4Config, modelConfig, qwen35MoeConfig, readConfigFile,
  type Gemma4Config, type Gemma4LayerConfig, type ModelConfig, type Qwen35MoeConfig,
} from './config.ts';
export { Gemma4 } from './gemma4.ts';
export { CausalLM, quantizationOf, type ModelOptions, type PrefillOptions } from './model.ts';
export { Qwen35Moe, rotaryPermutation } from './qwen3_5_moe.ts';

export interface LoadOptions extends ModelOptions {
  /** 'stored' (default): weights in the checkpoint's dtype; 'f32': widened to f32. */
  weights?: WeightDtype;
}

/**
 * Loads a checkpoint folder (config.json beside model.safetensors or a
 * sharded index) onto the device as the model its config names. Tensor names
 * are checked against the model first (ts/weights describeModel): a missing
 * or unexpected tensor is refused by name.
 */
export function loadModel(folder: string, device: Device, opts: LoadOptions = {}): Qwen35Moe | Gemma4 {
  const raw = readConfigFile(folder);
  const config = modelConfig(raw);
  const source = openWeights(folder);
  if (source instanceof GgufFile) throw invalid('loadModel', 'the checkpoint', 'a safetensors checkpoint (the forward passes do not read GGUF)', source.description);
  const names = describeModel(source, { config: raw });
  const ckpt = new Checkpoint(source, device, opts.weights ?? 'stored', quantizationOf(raw));
  try {
    return config.arch === 'qwen3_5_moe'
      ? new Qwen35Moe(device, config, ckpt, names as Qwen35MoeWeights, opts)
      : new Gemma4(device, config, ckpt, names as Gemma4Weights, opts);
  } catch (e) {
    ckpt.release();
    throw e;
  }
}
