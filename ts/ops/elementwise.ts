// elementwise: the residual add, products, scaling and dtype casts that glue
// the layers of a model together. Kernel names, bindings and params bytes
// are mlx-native's (src/ops/elementwise.rs: elementwise_{add,mul}_<t>,
// scalar_mul_{f32,bf16}, cast_{f16,bf16}_to_f32 and cast_f32_to_{f16,bf16}),
// with elementwise_add_scaled_<t>, scalar_mul_f16, cast_f16_to_bf16 and
// cast_bf16_to_f16 added in the same style. Kernels: shaders/elementwise.metal
// (one element per thread, as mlx-native's) and shaders/cuda/elementwise.cu
// (16-byte vectors per thread).
//
// mlx-native's functions take an element count n and accept buffers of at
// least n elements; here n is the first input's element count and every other
// buffer holds exactly n (a prefix of a larger buffer is a view of it).

import src from '../../shaders/elementwise.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/elementwise.cu' with { type: 'text' };
import header from '../../shaders/elementwise.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import { dtypeSize, type DType } from '../dtype.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familySources } from '../registry.ts';
import { checkAtMost, checkBuffer, checkDtype, checkElements, checkNoAliasing, checkPositive, F32_MAX, invalid } from '../validate.ts';
import { familyPlans, opShape, type OpShape, type PlannedDispatch } from '../plan.ts';

export const ELEMENTWISE_FAMILY = 'elementwise';
/** The family's kernel sources by backend, as registered by every dispatch. */
export const ELEMENTWISE_SOURCES = familySources(ELEMENTWISE_FAMILY, { header, metal: src, cuda: cudaSrc });
export const ELEMENTWISE_KERNELS = [
  'elementwise_add_f32', 'elementwise_add_f16', 'elementwise_add_bf16',
  'elementwise_mul_f32', 'elementwise_mul_f16', 'elementwise_mul_bf16',
  'elementwise_add_scaled_f32', 'elementwise_add_scaled_f16', 'elementwise_add_scaled_bf16',
  'scalar_mul_f32', 'scalar_mul_f16', 'scalar_mul_bf16',
  'cast_f16_to_f32', 'cast_f32_to_f16', 'cast_bf16_to_f32', 'cast_f32_to_bf16', 'cast_f16_to_bf16', 'cast_bf16_to_f16',
] as const;
const planOf = familyPlans({ family: ELEMENTWISE_FAMILY, sources: ELEMENTWISE_SOURCES, kernels: ELEMENTWISE_KERNELS });
/** The dtypes every kernel of the family takes. */
export const ELEMENTWISE_DTYPES = ['f32', 'f16', 'bf16'] as const;
export type ElementwiseDType = (typeof ELEMENTWISE_DTYPES)[number];
/** Threads per threadgroup of the Metal kernels (mlx-native's), and per block of the CUDA ones. */
export const ELEMENTWISE_THREADS = 256;
/** The Metal grid counts threads in 32 bits (whole threadgroups of 256), and the params hold n as a u32. */
export const ELEMENTWISE_MAX_ELEMENTS = 2 ** 32 - ELEMENTWISE_THREADS;

/** struct ElementwiseParams (elementwise_{add,mul}_<t> buffer 3, cast_* buffer 2). */
export const ELEMENTWISE_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'ElementwiseParams');
/** struct ScalarMulParams (scalar_mul_<t> buffer 2, elementwise_add_scaled_<t> buffer 3). */
export const SCALAR_MUL_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'ScalarMulParams');

export function packElementwiseParams(p: { n: number }): Uint8Array {
  return packFields(ELEMENTWISE_PARAMS_LAYOUT, { n_elements: p.n });
}
export function packScalarMulParams(p: { scalar: number; n: number }): Uint8Array {
  return packFields(SCALAR_MUL_PARAMS_LAYOUT, { scalar: p.scalar, count: p.n });
}

export interface ElementwiseBinaryArgs {
  /** [n] (any shape), f32, f16 or bf16 */
  a: Buffer;
  /** a's dtype and element count */
  b: Buffer;
  /** a's dtype and element count, output; may be a or b (in place) */
  output: Buffer;
}
export interface ElementwiseAddScaledArgs extends ElementwiseBinaryArgs {
  /** Multiplies b: output = a + scale * b; a finite f32. */
  scale: number;
}
export interface ScalarMulArgs {
  /** [n] (any shape), f32, f16 or bf16 */
  input: Buffer;
  /** input's dtype and element count, output; may be input (in place) */
  output: Buffer;
  /** A finite f32. */
  scalar: number;
}
export interface CastArgs {
  /** [n] (any shape), f32, f16 or bf16 */
  input: Buffer;
  /** input's element count, in another of f32, f16, bf16; may be input when both are 16-bit (in place) */
  output: Buffer;
}

// ---- validation ----

/** n, the element count of `first` (refused where the kernels cannot take it). */
function elementCount(op: string, arg: string, first: Buffer): number {
  const n = first.elementCount;
  checkPositive(op, `${arg}.elementCount`, n);
  checkAtMost(op, `${arg}.elementCount`, n, ELEMENTWISE_MAX_ELEMENTS, '2^32 - 256');
  return n;
}

function checkScalar(op: string, arg: string, value: unknown): void {
  if (typeof value !== 'number' || !(Math.abs(value) <= F32_MAX)) {
    throw invalid(op, arg, `a finite number of the f32 range (|x| <= ${F32_MAX})`, value);
  }
}

// ---- plans ----

/** Elements per CUDA thread: one 16-byte vector of the narrower dtype. */
export function elementwiseVector(from: DType, to: DType = from): number {
  return 16 / Math.min(dtypeSize(from), dtypeSize(to));
}

/**
 * The launch of n elements: Metal one per thread, min(256, n) a threadgroup;
 * CUDA one vector of `vec` elements per thread, 256 a block.
 */
export function elementwiseLaunch(n: number, vec: number, limits: DeviceLimits): Pick<PlannedDispatch, 'grid' | 'threads' | 'cuda'> {
  const threads = Math.min(ELEMENTWISE_THREADS, n, limits.maxThreadsPerThreadgroup);
  const cudaThreads = Math.min(ELEMENTWISE_THREADS, limits.maxThreadsPerThreadgroup);
  return {
    grid: [Math.ceil(n / threads), 1, 1],
    threads: [threads, 1, 1],
    cuda: { grid: [Math.ceil(n / (cudaThreads * vec)), 1, 1], threads: [cudaThreads, 1, 1] },
  };
}

/**
 * An op of the family: one element per thread over n elements, its params
 * after the buffers; its kernels are named <op>_<dtype> (a cast's
 * cast_<from>_to_<to>).
 */
interface ElementwiseOp<A> {
  op: string;
  /** The scalar argument and its name, checked first. */
  scalar?(a: A): readonly [name: string, value: unknown];
  /** The inputs in binding order, the output last. The first input gives n and the dtype (one of f32, f16, bf16) of the others. */
  buffers(a: A): readonly (readonly [name: string, buf: Buffer])[];
  /** The dtypes the output may have (the first input's where absent). */
  outputDtypes?(from: DType): readonly DType[];
  params(a: A, n: number): Uint8Array;
}

function elementwiseOp<A>(e: ElementwiseOp<A>): OpShape<A> {
  const validate = (a: A, device?: Device): void => {
    const op = e.op;
    if (e.scalar !== undefined) {
      const [arg, value] = e.scalar(a);
      checkScalar(op, arg, value);
    }
    const list = e.buffers(a);
    for (const [arg, buf] of list) checkBuffer(op, arg, buf, device);
    const [firstArg, first] = list[0]!;
    const inputs = list.slice(0, -1), [outArg, output] = list[list.length - 1]!;
    checkDtype(op, firstArg, first, ELEMENTWISE_DTYPES);
    for (const [arg, buf] of inputs.slice(1)) checkDtype(op, arg, buf, first.dtype);
    checkDtype(op, outArg, output, e.outputDtypes?.(first.dtype) ?? first.dtype);
    const n = elementCount(op, firstArg, first);
    for (const [arg, buf] of list.slice(1)) checkElements(op, arg, buf, n);
    // In place (output over exactly an input) is safe: each thread reads the
    // elements it writes before it writes them. Any other overlap is refused.
    checkNoAliasing(op, list, [outArg], `an element of output over another element of ${inputs.length > 1 ? 'an input' : firstArg}`,
      inputs.map(([arg]) => [outArg, arg] as const));
  };
  return opShape(validate, (a, limits) => {
    const buffers = e.buffers(a).map(([, buf]) => buf);
    const first = buffers[0]!, output = buffers[buffers.length - 1]!;
    const n = first.elementCount;
    const bytes: (Uint8Array | undefined)[] = [];
    bytes[buffers.length] = e.params(a, n);
    return planOf({
      kernel: e.op === 'cast' ? `cast_${first.dtype}_to_${output.dtype}` : `${e.op}_${first.dtype}`,
      buffers,
      bytes,
      ...elementwiseLaunch(n, elementwiseVector(first.dtype, output.dtype), limits),
    });
  });
}

const binary = (a: ElementwiseBinaryArgs) => [['a', a.a], ['b', a.b], ['output', a.output]] as const;
const unary = (a: ScalarMulArgs | CastArgs) => [['input', a.input], ['output', a.output]] as const;

const addOp = elementwiseOp<ElementwiseBinaryArgs>({
  op: 'elementwise_add', buffers: binary, params: (_a, n) => packElementwiseParams({ n }),
});
const mulOp = elementwiseOp<ElementwiseBinaryArgs>({
  op: 'elementwise_mul', buffers: binary, params: (_a, n) => packElementwiseParams({ n }),
});
const addScaledOp = elementwiseOp<ElementwiseAddScaledArgs>({
  op: 'elementwise_add_scaled', scalar: (a) => ['scale', a.scale], buffers: binary,
  params: (a, n) => packScalarMulParams({ scalar: a.scale, n }),
});
const scalarMulOp = elementwiseOp<ScalarMulArgs>({
  op: 'scalar_mul', scalar: (a) => ['scalar', a.scalar], buffers: unary,
  params: (a, n) => packScalarMulParams({ scalar: a.scalar, n }),
});
const castOp = elementwiseOp<CastArgs>({
  op: 'cast', buffers: unary, outputDtypes: (from) => ELEMENTWISE_DTYPES.filter((t) => t !== from),
  params: (_a, n) => packElementwiseParams({ n }),
});

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export const validateElementwiseAdd = addOp.validate;
/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export const validateElementwiseMul = mulOp.validate;
/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export const validateElementwiseAddScaled = addScaledOp.validate;
/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export const validateScalarMul = scalarMulOp.validate;
/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export const validateCast = castOp.validate;

/**
 * elementwise_add: output[i] = a[i] + b[i], in f32 and rounded once to the
 * dtype (nearest even): the correctly rounded sum. The residual add.
 *
 * Layouts: a, b, output of n elements (any shapes), one dtype: f32, f16 or
 * bf16; output may be a's or b's buffer.
 * Kernels: elementwise_add_<dtype>. Bindings: 0 a, 1 b, 2 output, 3
 * ElementwiseParams (n_elements).
 * Grid: (ceil(n / 256), 1, 1) threadgroups of min(256, n) threads, one
 * element each; the CUDA twin gives each thread one 16-byte vector.
 */
export const elementwiseAdd = addOp.op;
/** elementwiseAdd's plan: validates, then one dispatch (see elementwiseAdd). */
export const planElementwiseAdd = addOp.plan;

/**
 * elementwise_mul: output[i] = a[i] * b[i], in f32 and rounded once to the
 * dtype (nearest even): the correctly rounded product.
 *
 * Layouts, bindings and grid as elementwiseAdd's. Kernels: elementwise_mul_<dtype>.
 */
export const elementwiseMul = mulOp.op;
/** elementwiseMul's plan: validates, then one dispatch (see elementwiseMul). */
export const planElementwiseMul = mulOp.plan;

/**
 * elementwise_add_scaled: output[i] = a[i] + scale * b[i], one f32 fused
 * multiply-add rounded once more to the dtype: a residual add with the
 * sublayer's output scaled (scale 1 is elementwiseAdd's result). Not in
 * mlx-native; added in its style, with its ScalarMulParams as the params.
 *
 * Layouts: as elementwiseAdd's; scale a finite f32.
 * Kernels: elementwise_add_scaled_<dtype>. Bindings: 0 a, 1 b, 2 output, 3
 * ScalarMulParams (scalar = scale, count = n).
 * Grid: as elementwiseAdd's.
 */
export const elementwiseAddScaled = addScaledOp.op;
/** elementwiseAddScaled's plan: validates, then one dispatch (see elementwiseAddScaled). */
export const planElementwiseAddScaled = addScaledOp.plan;

/**
 * scalar_mul: output[i] = input[i] * scalar, in f32 and rounded once to the
 * dtype (Gemma's embedding scale by sqrt(hidden), a layer scalar).
 * mlx-native has the f32 and bf16 kernels; scalar_mul_f16 is added.
 *
 * Layouts: input, output of n elements (any shapes), one dtype: f32, f16 or
 * bf16; output may be input's buffer; scalar a finite f32.
 * Kernels: scalar_mul_<dtype>. Bindings: 0 input, 1 output, 2
 * ScalarMulParams (scalar, count = n).
 * Grid: as elementwiseAdd's.
 */
export const scalarMul = scalarMulOp.op;
/** scalarMul's plan: validates, then one dispatch (see scalarMul). */
export const planScalarMul = scalarMulOp.plan;

/**
 * cast: output[i] = input[i] in output's dtype, between f32, f16 and bf16 in
 * every direction. Each value is rounded once (through f32, which holds every
 * f16 and bf16 exactly): nearest even, ties to the even significand; values
 * past the largest finite value of the dtype (after rounding) become +-inf;
 * NaN stays NaN (its payload may change); subnormals are kept, not flushed.
 * mlx-native has the casts to and from f32; cast_f16_to_bf16 and
 * cast_bf16_to_f16 are added.
 *
 * Layouts: input, output of n elements (any shapes), two different dtypes;
 * output may be input's buffer when both are 16-bit.
 * Kernels: cast_<from>_to_<to>. Bindings: 0 input, 1 output, 2
 * ElementwiseParams (n_elements).
 * Grid: as elementwiseAdd's; the CUDA twin's vectors are 16 bytes of the
 * 16-bit side (8 elements).
 */
export const cast = castOp.op;
/** cast's plan: validates, then one dispatch (see cast). */
export const planCast = castOp.plan;

// ---- the float64 reference ----

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
