// CPU reference of rope: the closed form in float64.

/** The angle of pair i at pos: pos * theta^(-2i / headDim) / ff. */
export function ropeAngle(pos: number, i: number, headDim: number, theta: number, ff = 1): number {
  return pos * theta ** (-2 * i / headDim) / ff;
}

/** rope (normal pairing): rows [seqLen, headDim], pairs (x[2i], x[2i+1]), positions[row]. */
export function ropeRef(x: ArrayLike<number>, positions: ArrayLike<number>, seqLen: number, headDim: number,
  theta: number): Float64Array {
  const y = new Float64Array(seqLen * headDim);
  for (let r = 0; r < seqLen; r++) {
    for (let i = 0; i < headDim / 2; i++) {
      const t = ropeAngle(positions[r]!, i, headDim, theta);
      const at = r * headDim + 2 * i;
      const a = x[at]!;
      const b = x[at + 1]!;
      y[at] = a * Math.cos(t) - b * Math.sin(t);
      y[at + 1] = a * Math.sin(t) + b * Math.cos(t);
    }
  }
  return y;
}

/**
 * rope_neox (split pairing): rows [seqLen * nHeads, headDim], pairs
 * (x[i], x[i + headDim/2]) rotated for i < ropeDim / 2, copied otherwise;
 * the position of row r is positions[floor(r / nHeads)].
 */
export function ropeNeoxRef(x: ArrayLike<number>, positions: ArrayLike<number>, seqLen: number, nHeads: number,
  headDim: number, ropeDim: number, theta: number, freqFactors?: ArrayLike<number>): Float64Array {
  const y = Float64Array.from(x);
  const half = headDim / 2;
  for (let r = 0; r < seqLen * nHeads; r++) {
    const pos = positions[Math.floor(r / nHeads)]!;
    for (let i = 0; i < ropeDim / 2; i++) {
      const t = ropeAngle(pos, i, headDim, theta, freqFactors === undefined ? 1 : freqFactors[i]!);
      const a = x[r * headDim + i]!;
      const b = x[r * headDim + i + half]!;
      y[r * headDim + i] = a * Math.cos(t) - b * Math.sin(t);
      y[r * headDim + i + half] = a * Math.sin(t) + b * Math.cos(t);
    }
  }
  return y;
}
