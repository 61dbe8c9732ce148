// gelu: GELU with the tanh approximation (Gemma's gelu_pytorch_tanh), alone
// (mlx-native's gelu, src/ops/gelu.rs: its kernel names and bindings) and as
// GeGLU, gelu(gate) * up, the activation of Gemma's MLP, from two inputs and
// from rows that hold both halves (not in the crate's gelu module: added in
// its style). Kernels: shaders/gelu.metal and shaders/cuda/gelu.cu.

import src from '../../shaders/gelu.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/gelu.cu' with { type: 'text' };
import header from '../../shaders/gelu.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import { dtypeSize } from '../dtype.ts';
import type { Encoder } from '../encoder.ts';
import {
  GATED_DTYPES, GATED_MAX_ELEMENTS, GATED_THREADS, gatedHalvesRef, gatedLaunch, gatedPairRef, validateGatedHalves, validateGatedPair, type GatedDType,
} from '../gated.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import type { LaunchLimits } from '../launch.ts';
import { familyPlans, record, type Launch, type OpPlan, type PlannedDispatch } from '../plan.ts';
import { familySources } from '../registry.ts';
import { checkAtMost, checkBuffer, checkDtype, checkElements, checkNoAliasing } from '../validate.ts';

export const GELU_FAMILY = 'gelu';
/** The family's kernel sources by backend, as registered by every dispatch. */
export const GELU_SOURCES = familySources(GELU_FAMILY, { header, metal: src, cuda: cudaSrc });
export const GELU_KERNELS = [
  'gelu_f32', 'gelu_f16', 'gelu_bf16',
  'gelu_tanh_mul_f32', 'gelu_tanh_mul_f16', 'gelu_tanh_mul_bf16',
  'gelu_tanh_mul_halves_f32', 'gelu_tanh_mul_halves_f16', 'gelu_tanh_mul_halves_bf16',
] as const;
const planOf = familyPlans({ family: GELU_FAMILY, sources: GELU_SOURCES, kernels: GELU_KERNELS });

/** struct GeluTanhMulParams (gelu_tanh_mul_<t>, buffer 3). */
export const GELU_TANH_MUL_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'GeluTanhMulParams');
/** struct GeluTanhMulHalvesParams (gelu_tanh_mul_halves_<t>, buffer 2). */
export const GELU_TANH_MUL_HALVES_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'GeluTanhMulHalvesParams');

export interface GeluArgs {
  /** [n] (any shape), f32, f16 or bf16 */
  input: Buffer;
  /** input's dtype and element count, output; may be input (in place) */
  output: Buffer;
}

export interface GeluTanhMulArgs {
  /** [n] (any shape), f32, f16 or bf16 */
  gate: Buffer;
  /** gate's dtype and element count */
  up: Buffer;
  /** gate's dtype and element count, output; may be gate or up (in place) */
  output: Buffer;
}

export interface GeluTanhMulHalvesArgs {
  /** [rows, 2 * dim], f32, f16 or bf16: each row is gate (dim elements), then up (dim) */
  gateUp: Buffer;
  /** [rows, dim] in gateUp's dtype, output; not over gateUp */
  output: Buffer;
  rows: number;
  /** Outputs per row (the intermediate size); rows of gateUp hold twice as many. */
  dim: number;
}

export function packGeluTanhMulParams(p: { n: number }): Uint8Array {
  return packFields(GELU_TANH_MUL_PARAMS_LAYOUT, { n: p.n });
}
export function packGeluTanhMulHalvesParams(p: { dim: number; rows: number }): Uint8Array {
  return packFields(GELU_TANH_MUL_HALVES_PARAMS_LAYOUT, { dim: p.dim, rows: p.rows });
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateGelu(a: GeluArgs, device?: Device): void {
  const op = 'gelu';
  checkBuffer(op, 'input', a.input, device);
  checkBuffer(op, 'output', a.output, device);
  checkDtype(op, 'input', a.input, GATED_DTYPES);
  checkDtype(op, 'output', a.output, a.input.dtype);
  const n = a.input.elementCount;
  checkAtMost(op, 'input.elementCount', n, GATED_MAX_ELEMENTS, '2^32 - 256');
  checkElements(op, 'output', a.output, n);
  checkNoAliasing(op, [['input', a.input], ['output', a.output]], ['output'], 'an element of output over another element of input',
    [['output', 'input']]);
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateGeluTanhMul(a: GeluTanhMulArgs, device?: Device): void {
  validateGatedPair('gelu_tanh_mul', ['gate', 'up'], a.gate, a.up, a.output, device);
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateGeluTanhMulHalves(a: GeluTanhMulHalvesArgs, device?: Device): void {
  validateGatedHalves('gelu_tanh_mul_halves', 'gateUp', a.gateUp, a.output, a.rows, a.dim, device);
}

/** Threads per threadgroup of gelu_<t>: 256 (mlx-native's), fewer only on a device that allows fewer (a power of two). */
function geluThreads(limits: DeviceLimits): number {
  let t = GATED_THREADS;
  while (t > limits.maxThreadsPerThreadgroup) t /= 2;
  return t;
}

/**
 * The CUDA launch of a gelu_<t> dispatch over `count` elements
 * (shaders/cuda/gelu.cu): one 16-byte vector (vec elements) a thread, said
 * by two-dimensional blocks, (T / 2, 2) with T the largest power of two up
 * to 256 that divides count / vec, grid (count / (vec * T), 1, 1). Null
 * where count / vec is not a whole even number (the Metal launch then).
 */
export function geluCudaLaunch(count: number, dtype: GatedDType, limits: LaunchLimits): Launch | null {
  const vec = 16 / dtypeSize(dtype);
  if (count % vec !== 0) return null;
  const vectors = count / vec;
  let t = 1;
  while (t * 2 <= Math.min(GATED_THREADS, limits.maxThreadsPerThreadgroup)) t *= 2;
  while (t >= 2 && vectors % t !== 0) t /= 2;
  if (t < 2) return null;
  return { grid: [vectors / t, 1, 1], threads: [t / 2, 2, 1] };
}

/**
 * gelu: output[i] = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), x =
 * input[i] (the tanh approximation, PyTorch's approximate='tanh'; computed as
 * x / (1 + exp(-2u)), the same function). Arithmetic in f32; finite inputs
 * never give NaN.
 *
 * Layouts: input, output of n elements (any shapes), one dtype: f32, f16 or
 * bf16; output may be input. mlx-native checks only output's element count;
 * here output also has input's dtype.
 * Kernels: gelu_<dtype>. Bindings: 0 input, 1 output (mlx-native's: no
 * params, so each launch holds exactly one thread per element).
 * Grid: (floor(n / 256), 1, 1) threadgroups of 256, then, for the n % 256
 * elements left, one threadgroup of n % 256 threads over views of input and
 * output at that element (two dispatches where n is not a multiple of 256).
 * The CUDA twin covers the first dispatch's elements with one 16-byte vector
 * a thread (geluCudaLaunch: its blocks are two-dimensional, which tells the
 * kernel so; the crate's bindings and Metal launch are unchanged).
 */
export function gelu(enc: Encoder, args: GeluArgs): void {
  record(enc, planGelu(args, enc.device.limits, enc.device));
}

/** gelu's plan: validates, then one dispatch, or two (see gelu). */
export function planGelu(a: GeluArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateGelu(a, device);
  const n = a.input.elementCount;
  const dtype = a.input.dtype;
  const kernel = `gelu_${dtype}`;
  const t = geluThreads(limits);
  const full = Math.floor(n / t);
  const rest = n - full * t;
  const dispatches: PlannedDispatch[] = [];
  if (full > 0) {
    const cuda = geluCudaLaunch(full * t, dtype as GatedDType, limits);
    dispatches.push({ kernel, buffers: [a.input, a.output], grid: [full, 1, 1], threads: [t, 1, 1], ...(cuda === null ? {} : { cuda }) });
  }
  if (rest > 0) {
    const at = full * t * dtypeSize(dtype);
    dispatches.push({
      kernel,
      buffers: [a.input.view(dtype, [rest], at), a.output.view(dtype, [rest], at)],
      grid: [1, 1, 1],
      threads: [rest, 1, 1],
    });
  }
  return planOf(...dispatches);
}

/**
 * gelu_tanh_mul: output[i] = gelu(gate[i]) * up[i], gelu as above (GeGLU,
 * the MLP activation of Gemma 4). Not in mlx-native's gelu module: added in
 * its style, with the bindings of the crate's fused_gelu_mul (moe_dispatch),
 * the same function of f32 or bf16 inputs.
 *
 * Layouts: gate, up, output of n elements (any shapes), one dtype: f32, f16
 * or bf16. output may be gate or up.
 * Kernels: gelu_tanh_mul_<dtype>. Bindings: 0 gate, 1 up, 2 output, 3
 * GeluTanhMulParams (n as a u32).
 * Grid: (ceil(n / 256), 1, 1) threadgroups of min(256, n) threads, one
 * element each; the CUDA twin gives each thread one 16-byte vector.
 */
export function geluTanhMul(enc: Encoder, args: GeluTanhMulArgs): void {
  record(enc, planGeluTanhMul(args, enc.device.limits, enc.device));
}

/** geluTanhMul's plan: validates, then one dispatch (see geluTanhMul). */
export function planGeluTanhMul(a: GeluTanhMulArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateGeluTanhMul(a, device);
  const n = a.gate.elementCount;
  const dtype = a.gate.dtype as GatedDType;
  return planOf({
    kernel: `gelu_tanh_mul_${dtype}`,
    buffers: [a.gate, a.up, a.output],
    bytes: [, , , packGeluTanhMulParams({ n })],
    ...gatedLaunch(1, n, dtype, limits),
  });
}

/**
 * gelu_tanh_mul_halves: output[r, c] = gelu(gateUp[r, c]) * gateUp[r, dim + c],
 * GeGLU over the output of a fused gate_up projection, whose rows hold the
 * gate half first, then the up half (halves, not interleaved: the order of
 * mlx-native's moe_swiglu_fused, which applies this same GELU to Gemma 4's
 * fused MoE gate_up projection). Not in mlx-native's gelu module: added in
 * its style.
 *
 * Layouts: gateUp [rows, 2 * dim], output [rows, dim], one dtype: f32, f16
 * or bf16; output shares no memory with gateUp.
 * Kernels: gelu_tanh_mul_halves_<dtype>. Bindings: 0 gateUp, 1 output, 2
 * GeluTanhMulHalvesParams (dim, rows).
 * Grid: (ceil(dim / tg), rows, 1) threadgroups of tg = min(256, dim)
 * threads, one element each; the CUDA twin gives each thread one 16-byte
 * vector of a row (gatedLaunch).
 */
export function geluTanhMulHalves(enc: Encoder, args: GeluTanhMulHalvesArgs): void {
  record(enc, planGeluTanhMulHalves(args, enc.device.limits, enc.device));
}

/** geluTanhMulHalves's plan: validates, then one dispatch (see geluTanhMulHalves). */
export function planGeluTanhMulHalves(a: GeluTanhMulHalvesArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateGeluTanhMulHalves(a, device);
  const dtype = a.gateUp.dtype as GatedDType;
  return planOf({
    kernel: `gelu_tanh_mul_halves_${dtype}`,
    buffers: [a.gateUp, a.output],
    bytes: [, , packGeluTanhMulHalvesParams({ dim: a.dim, rows: a.rows })],
    ...gatedLaunch(a.rows, a.dim, dtype, limits),
  });
}

// ---- the float64 reference ----

// CPU reference of gelu: float64 arithmetic, the tanh approximation.

/**
 * gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2 / pi) (x + 0.044715 x^3),
 * evaluated as x / (1 + exp(-2 u)) (the same function): 1 + tanh(u) as
 * written cancels to 0 in float64 for u below about -19 (x below about -7.2),
 * where the function is x times a tiny positive number, which the kernels'
 * f32 form (shaders/common.metal's gelu_tanh) still gives for x down to about
 * -10; a zero there would make every relative error bound of a gated product
 * zero.
 */
export function geluTanhRef(x: number): number {
  return x / (1 + Math.exp(-2 * Math.sqrt(2 / Math.PI) * (x + 0.044715 * x * x * x)));
}

/** output[i] = gelu(input[i]). */
export function geluRef(input: ArrayLike<number>): Float64Array {
  const y = new Float64Array(input.length);
  for (let i = 0; i < input.length; i++) y[i] = geluTanhRef(input[i]!);
  return y;
}

/** output[i] = gelu(gate[i]) * up[i]. */
export function geluTanhMulRef(gate: ArrayLike<number>, up: ArrayLike<number>): Float64Array {
  return gatedPairRef(geluTanhRef, gate, up);
}

/** output[r, c] = gelu(gateUp[r, c]) * gateUp[r, dim + c], gateUp [rows, 2 * dim] (gate half first). */
export function geluTanhMulHalvesRef(gateUp: ArrayLike<number>, rows: number, dim: number): Float64Array {
  return gatedHalvesRef(geluTanhRef, gateUp, rows, dim);
}
