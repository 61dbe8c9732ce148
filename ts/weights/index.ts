// mlx-native/weights: readers of safetensors (single files and sharded
// checkpoints) and GGUF files, mapped into memory and checked before use;
// uploads into device buffers; the tensor names of Qwen3.6 and Gemma 4 in
// Hugging Face and GGUF naming.

import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { argError, shown } from './common.ts';
import { GgufFile } from './gguf.ts';
import { SafetensorsFile, ShardedSafetensors } from './safetensors.ts';

export { type TensorInfo, type TensorStorage, type WeightFormat } from './common.ts';
export { PackedWeights, WeightSource, type PackOptions } from './source.ts';
export {
  SAFETENSORS_DTYPES,
  SAFETENSORS_MAX_HEADER_BYTES,
  SAFETENSORS_MAX_NAME_BYTES,
  SAFETENSORS_MAX_RANK,
  SafetensorsFile,
  ShardedSafetensors,
  parseSafetensors,
  type SafetensorsDType,
  type SafetensorsHeader,
  type SafetensorsTensorInfo,
} from './safetensors.ts';
export {
  GGML_TYPES,
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_MAX_DIMS,
  GGUF_MAX_KEY_BYTES,
  GGUF_MAX_NAME_BYTES,
  GGUF_VALUE_TYPES,
  GgufFile,
  ggmlType,
  parseGguf,
  type GgmlType,
  type GgufArray,
  type GgufArrayItems,
  type GgufHeader,
  type GgufTensorInfo,
  type GgufValue,
  type GgufValueType,
} from './gguf.ts';
export {
  checkModel,
  describeModel,
  formatReport,
  type DescribeOptions,
  type Experts,
  type Gemma4Layer,
  type Gemma4Weights,
  type GgufTransform,
  type ModelArch,
  type ModelWeights,
  type Qwen35MoeLayer,
  type Qwen35MoeWeights,
  type TensorRef,
  type WeightsReport,
} from './names.ts';

/**
 * Opens weights by path: a .gguf file, a .safetensors file, a sharded
 * checkpoint's *.index.json, or a folder holding model.safetensors.index.json
 * or model.safetensors.
 */
export function openWeights(path: string): GgufFile | SafetensorsFile | ShardedSafetensors {
  if (typeof path !== 'string' || path.length === 0) throw argError('openWeights', 'path', 'a non-empty path', shown(path));
  if (path.endsWith('.gguf')) return GgufFile.open(path);
  if (path.endsWith('.index.json')) return ShardedSafetensors.open(path);
  if (path.endsWith('.safetensors')) return SafetensorsFile.open(path);
  if (existsSync(path) && statSync(path).isDirectory()) {
    const index = join(path, 'model.safetensors.index.json');
    if (existsSync(index)) return ShardedSafetensors.open(index);
    const single = join(path, 'model.safetensors');
    if (existsSync(single)) return SafetensorsFile.open(single);
    throw argError('openWeights', 'path', 'a folder holding model.safetensors.index.json or model.safetensors', `${shown(path)}, which holds neither`);
  }
  throw argError('openWeights', 'path', 'a .gguf, .safetensors or .index.json file, or a checkpoint folder', shown(path));
}
