// CPU reference of rope_multi: the closed form in float64.

/** The position axis (0 t, 1 h, 2 w, 3 e) of a sector, by mode. */
export function ropeMultiAxis(sector: number, mode: 'mrope' | 'imrope' | 'vision', s: readonly number[]): number {
  if (mode === 'imrope') {
    const k = sector % 3;
    if (k === 0 && sector < 3 * s[0]!) return 0;
    if (k === 1 && sector < 3 * s[1]!) return 1;
    if (k === 2 && sector < 3 * s[2]!) return 2;
    return 3;
  }
  if (mode === 'vision') return sector < s[0]! ? 0 : 1;
  if (sector < s[0]!) return 0;
  if (sector < s[0]! + s[1]!) return 1;
  if (sector < s[0]! + s[1]! + s[2]!) return 2;
  return 3;
}

/** The angle of pair p of a token: its axis' position times the pair's frequency; also the exponent 2p/denom. */
export function ropeMultiAngle(positions: ArrayLike<number>, seqLen: number, token: number, p: number, headDim: number,
  ropeDim: number, freqBase: number, mode: 'mrope' | 'imrope' | 'vision', s: readonly number[]): [angle: number, exponent: number] {
  const vision = mode === 'vision';
  const total = vision ? s[0]! + s[1]! : s[0]! + s[1]! + s[2]! + s[3]!;
  const sector = p % Math.max(total, 1);
  const axis = ropeMultiAxis(sector, mode, s);
  const q = vision ? (sector < s[0]! ? sector : sector - s[0]!) : p;
  const exponent = (2 * q) / (vision ? headDim / 2 : ropeDim);
  return [positions[axis * seqLen + token]! * freqBase ** -exponent, exponent];
}

/** rope_multi over rows [seqLen * nHeads, headDim]: NeoX pairs, pairs past ropeDim / 2 copied. */
export function ropeMultiRef(x: ArrayLike<number>, positions: ArrayLike<number>, seqLen: number, nHeads: number, headDim: number,
  ropeDim: number, freqBase: number, mode: 'mrope' | 'imrope' | 'vision', sections: readonly number[]): Float64Array {
  const y = Float64Array.from(x);
  const half = headDim / 2;
  for (let r = 0; r < seqLen * nHeads; r++) {
    const token = Math.floor(r / nHeads);
    for (let p = 0; p < ropeDim / 2; p++) {
      const [t] = ropeMultiAngle(positions, seqLen, token, p, headDim, ropeDim, freqBase, mode, sections);
      const a = x[r * headDim + p]!;
      const b = x[r * headDim + p + half]!;
      y[r * headDim + p] = a * Math.cos(t) - b * Math.sin(t);
      y[r * headDim + p + half] = a * Math.sin(t) + b * Math.cos(t);
    }
  }
  return y;
}
