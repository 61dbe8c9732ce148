// CPU reference of elementwise: float64 arithmetic, and the casts as exact
// roundings of a float64 to each format (written here from the formats'
// parameters, independently of ts/dtype.ts's bit manipulations).

/** a[i] + b[i] */
export function elementwiseAddRef(a: ArrayLike<number>, b: ArrayLike<number>): Float64Array {
  return Float64Array.from({ length: a.length }, (_, i) => a[i]! + b[i]!);
}

/** a[i] * b[i] */
export function elementwiseMulRef(a: ArrayLike<number>, b: ArrayLike<number>): Float64Array {
  return Float64Array.from({ length: a.length }, (_, i) => a[i]! * b[i]!);
}

/** a[i] + scale * b[i] */
export function elementwiseAddScaledRef(a: ArrayLike<number>, b: ArrayLike<number>, scale: number): Float64Array {
  return Float64Array.from({ length: a.length }, (_, i) => a[i]! + scale * b[i]!);
}

/** x[i] * scalar */
export function scalarMulRef(x: ArrayLike<number>, scalar: number): Float64Array {
  return Float64Array.from({ length: x.length }, (_, i) => x[i]! * scalar);
}

/** A binary floating-point format: p significand bits (with the leading one), normal exponents [emin, emax]. */
interface Format {
  p: number;
  emin: number;
  emax: number;
}
const FORMATS: Readonly<Record<'f32' | 'f16' | 'bf16', Format>> = {
  f32: { p: 24, emin: -126, emax: 127 },
  f16: { p: 11, emin: -14, emax: 15 },
  bf16: { p: 8, emin: -126, emax: 127 },
};

/** The largest finite value of the format: (2 - 2^(1-p)) * 2^emax. */
export function formatMax(dtype: 'f32' | 'f16' | 'bf16'): number {
  const { p, emax } = FORMATS[dtype];
  return (2 - 2 ** (1 - p)) * 2 ** emax;
}

/** n rounded to the nearest integer, ties to even (n a float64 below 2^53). */
function roundHalfEven(n: number): number {
  const f = Math.floor(n);
  const d = n - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return f % 2 === 0 ? f : f + 1;
}

/**
 * x rounded to the format, IEEE 754 round to nearest even: the nearest
 * value whose significand has p bits at the exponent of x (at least emin,
 * which gives the subnormals), ties to the even significand; a result past
 * the largest finite value is +-inf. NaN, infinities and signed zeros stay.
 */
export function roundToDtype(x: number, dtype: 'f32' | 'f16' | 'bf16'): number {
  if (!Number.isFinite(x) || x === 0) return x;
  const { p, emin } = FORMATS[dtype];
  const ax = Math.abs(x);
  let e = Math.floor(Math.log2(ax));
  while (2 ** e > ax) e--;
  while (2 ** (e + 1) <= ax) e++;
  const ulp = 2 ** (Math.max(e, emin) - (p - 1));
  const r = roundHalfEven(ax / ulp) * ulp;
  const v = r > formatMax(dtype) ? Infinity : r;
  return x < 0 ? -v : v;
}

/** x[i] in the output dtype (x holds values of the input dtype, which f64 holds exactly). */
export function castRef(x: ArrayLike<number>, to: 'f32' | 'f16' | 'bf16'): Float64Array {
  return Float64Array.from({ length: x.length }, (_, i) => roundToDtype(x[i]!, to));
}
