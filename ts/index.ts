// mlx-native: GPU kernels for LLM inference from Bun. The public core API.

export { Buffer, type WriteOptions } from './buffer.ts';
export { Device, type CompileOptions, type DeviceLimits, type OpenOptions } from './device.ts';
export {
  bf16BitsToF32,
  dtypeSize,
  f16BitsToF32,
  f32ToBf16Bits,
  f32ToF16Bits,
  fromBf16,
  fromF16,
  toBf16,
  toF16,
  type DType,
  type TypedArray,
} from './dtype.ts';
export { Encoder, type Dim3, type DispatchBindings, type EncoderOptions, type PatchDispatch, type TensorMapBinding } from './encoder.ts';
export { MlxError, type MlxErrorKind } from './errors.ts';
export { CompileJob, Library, Pipeline, type FunctionConstantType, type FunctionConstants } from './library.ts';
export type { BackendName } from './native.ts';
export {
  KernelRegistry,
  familySources,
  joinSources,
  knownFamilyNames,
  type FamilySources,
  type SourceFile,
  type WarmupOptions,
  type WarmupProgress,
} from './registry.ts';
export { launchOf, patchPlan, planAccess, record, type CudaLaunch, type Launch, type OpPlan, type PlannedDispatch } from './plan.ts';
export * from './validate.ts';
export { packFields, paramSize, structLayout, structSize, type ParamField, type ParamType } from './params.ts';
