// A MoE layer's experts arranged for the stand-in that runs every expert
// (blocks.ts allExpertsMoe), from any layout ts/weights describes: fused
// gate_up tensors [E, 2I, H] (transformers), one tensor per expert, or
// stacked gate / up / down tensors (mlx's switch_mlp).

import type { Experts, TensorRef } from '../weights/index.ts';
import { invalid } from '../validate.ts';
import type { AllExperts } from './blocks.ts';
import type { Checkpoint } from './checkpoint.ts';

/**
 * gate and up of every expert stacked [E * 2I, H] (expert e's I gate rows,
 * then its I up rows), as stored; the down projections side by side
 * [H, E * I] in f32, column block e scaled by perExpertScale[e] when given
 * (Gemma 4's router scale per expert, which multiplies expert e's output).
 */
export function expertsFor(ck: Checkpoint, ex: Experts, numExperts: number, intermediate: number, hidden: number,
  act: AllExperts['act'], perExpertScale: Float32Array | null, where: string): AllExperts {
  const E = numExperts, I = intermediate, H = hidden;
  const refs: TensorRef[] = ex.layout === 'gate_up' ? [ex.gateUp, ex.down] : ex.layout === 'stacked' ? [ex.gate, ex.up, ex.down] : [...ex.gate, ...ex.up, ...ex.down];
  const quantized = refs.find((r) => r.scales !== undefined);
  if (quantized !== undefined) {
    throw invalid('loadModel', `${where} experts (${quantized.name})`, 'dense (the all-experts stand-in does not take quantized experts)', 'MLX affine-quantized');
  }
  const block = (e: number) => Array.from({ length: I }, (_, i) => e * I + i);
  let gateUp;
  if (ex.layout === 'gate_up') {
    gateUp = ck.linear([{ ref: ex.gateUp }]);
  } else if (ex.layout === 'per_expert') {
    if (ex.count !== E) throw invalid('loadModel', `${where} experts`, `${E} experts (config.json)`, ex.count);
    gateUp = ck.linear(Array.from({ length: E }, (_, e) => [{ ref: ex.gate[e]! }, { ref: ex.up[e]! }]).flat());
  } else {
    gateUp = ck.linear(Array.from({ length: E }, (_, e) => [{ ref: ex.gate, rows: block(e) }, { ref: ex.up, rows: block(e) }]).flat());
  }
  if (gateUp.n !== E * 2 * I || gateUp.k !== H) throw invalid('loadModel', `${where} experts' gate and up`, `[${E * 2 * I}, ${H}]`, `[${gateUp.n}, ${gateUp.k}]`);
  // down of expert e [H, I] at columns [e * I, (e + 1) * I) of one [H, E * I] matrix.
  const down = new Float32Array(H * E * I);
  const stacked = ex.layout === 'per_expert' ? null : ck.host(ex.down);
  for (let e = 0; e < E; e++) {
    const de = ex.layout === 'per_expert' ? ck.host(ex.down[e]!) : stacked!.subarray(e * H * I, (e + 1) * H * I);
    if (de.length !== H * I) throw invalid('loadModel', `${where} expert ${e}'s down projection`, `${H * I} elements`, de.length);
    const scale = perExpertScale?.[e] ?? 1;
    for (let h = 0; h < H; h++) for (let i = 0; i < I; i++) down[h * E * I + e * I + i] = de[h * I + i]! * scale;
  }
  return { gateUp, down: ck.linearF32(down, H, E * I), numExperts: E, intermediate: I, act };
}
