// The one shape of an op: validate, then plan, then record.
//
//   validate<Op>(args, device?): void              throws MlxError naming op, argument, expected, actual
//   plan<Op>(args, limits, device?): OpPlan        validates, then plans
//   <op>(enc, args): void                          record(enc, plan<Op>(args, enc.device.limits, enc.device))
//
// A plan is plain data: the family to register, and for each dispatch its
// kernel, bindings, grid and threads (and, for a kernel whose CUDA twin runs
// at another launch shape, that shape too). Planning needs the device's
// limits (DeviceLimits), not the device: plans for every backend can be made
// and checked on a machine that has none of them; `device`, when given, is
// the one the buffers must belong to. record() is the only step that touches
// an encoder.

import type { Buffer } from './buffer.ts';
import type { Device, DeviceLimits } from './device.ts';
import type { DispatchBindings, Dim3, Encoder, TensorMapBinding } from './encoder.ts';
import type { FunctionConstants } from './library.ts';
import { MlxError } from './errors.ts';
import { kernelWrites } from './metal-source.ts';
import { joinSources, type FamilySources } from './registry.ts';

/** Where a kernel runs at a launch shape of its own. */
export interface Launch {
  readonly grid: Dim3;
  readonly threads: Dim3;
  /** Threadgroup (CUDA: dynamic shared) memory byte lengths by threadgroup binding index. */
  readonly threadgroupMemory?: Record<number, number | undefined>;
}

/**
 * The launch of a kernel's CUDA twin. `entry`: the CUDA-only entry of the
 * family that runs this dispatch instead of the kernel's own, where the
 * kernel's entry holds several ways of computing chosen at run time and the
 * sizes name one of them (a compact entry: the kernel's parameters, and that
 * way's code alone, so its results are the kernel's bit for bit). A large
 * entry costs a decode dispatch microseconds of instruction fetch once its
 * code has left the caches (docs/internals.md, "Compact CUDA entries").
 * Kernels that share an entry write alike (their Metal declarations): the
 * entry's one pipeline takes the writes of the kernel it runs for.
 */
export interface CudaLaunch extends Launch {
  readonly entry?: string;
  /**
   * Parameters of the CUDA twin past its Metal kernel's bindings (indices
   * the Metal kernel does not declare), bound besides the dispatch's: tensor
   * maps (TMA, compute capability 9.0 on), and buffers (stand-ins where a
   * launch reads no map).
   */
  readonly tensorMaps?: Record<number, TensorMapBinding | undefined>;
  readonly buffers?: Record<number, Buffer | undefined>;
}

export interface PlannedDispatch extends Launch {
  readonly kernel: string;
  readonly constants?: FunctionConstants;
  readonly buffers: Record<number, Buffer | undefined>;
  readonly bytes?: Record<number, ArrayBufferView | undefined>;
  /**
   * The launch of the CUDA twin (shaders/cuda/<family>.cu) where it is not
   * the Metal one: same kernel, bindings and results, another grid, block or
   * shared memory (or, where `entry` names one, a compact entry of the
   * kernel: CudaLaunch).
   */
  readonly cuda?: CudaLaunch;
  /**
   * A binding the encoder fills at record time with `count` of its own
   * zeroed words (Encoder._syncWords), where the dispatch's blocks meet.
   */
  readonly syncWords?: { readonly binding: number; readonly count: number };
  /**
   * A binding the encoder fills at record time with `count` words of its
   * own working memory (Encoder._scratchWords), which the dispatch writes
   * before it reads: where an op's caller gave no scratch.
   */
  readonly scratchWords?: { readonly binding: number; readonly count: number };
}

export interface OpPlan {
  readonly family: string;
  readonly sources: FamilySources;
  readonly kernels: readonly string[];
  /** In order; each may depend on the ones before (the encoder places the barriers). */
  readonly dispatches: readonly PlannedDispatch[];
}

/** The plans of a family: its name, sources and kernel list around the dispatches of one op call. */
export function familyPlans(family: Omit<OpPlan, 'dispatches'>): (...dispatches: PlannedDispatch[]) => OpPlan {
  return (...dispatches) => ({ ...family, dispatches });
}

/** The launch of a planned dispatch on a backend that compiles the given language (a compact entry only on cuda). */
export function launchOf(d: PlannedDispatch, language: 'metal' | 'cuda'): CudaLaunch {
  if (language === 'cuda') return d.cuda ?? d;
  return { grid: d.grid, threads: d.threads, threadgroupMemory: d.threadgroupMemory };
}

/**
 * The binding indices a planned dispatch may read (every bound buffer: a
 * kernel may read what it writes) and write (those its kernel's Metal
 * declaration leaves writable: what the encoder's barriers follow).
 */
export function planAccess(plan: OpPlan, i: number): { reads: number[]; writes: number[] } {
  const d = plan.dispatches[i]!;
  const mask = kernelWrites(joinSources(plan.sources.metal), d.kernel);
  const bound = Object.keys(d.buffers).map(Number).filter((k) => d.buffers[k] !== undefined).sort((a, b) => a - b);
  return { reads: bound, writes: bound.filter((k) => ((mask >>> k) & 1) !== 0) };
}

/**
 * Records a plan: registers its family, then dispatches each step (inside
 * enc.atomic when there are several, so that a refusal records none).
 */
export function record(enc: Encoder, plan: OpPlan): void {
  const kernels = enc.device.kernels;
  kernels.register(plan.family, plan.sources, plan.kernels);
  const ds = plan.dispatches;
  if (ds.length === 1) {
    dispatchOne(enc, ds[0]!);
    return;
  }
  enc.atomic(() => {
    for (const d of ds) dispatchOne(enc, d);
  });
}

/** The three functions of an op (the shape above). */
export interface OpShape<A> {
  validate(a: A, device?: Device): void;
  plan(a: A, limits: DeviceLimits, device?: Device): OpPlan;
  op(enc: Encoder, a: A): void;
}

/**
 * The op shape of a validation and a planner of valid arguments, for ops
 * defined from a table: plan validates, then plans; op records the plan. op
 * is a function taking `enc` first, the shape by which the op contract
 * finds a family's ops.
 */
export function opShape<A>(validate: (a: A, device?: Device) => void, planValid: (a: A, limits: DeviceLimits) => OpPlan): OpShape<A> {
  const plan = (a: A, limits: DeviceLimits, device?: Device): OpPlan => {
    validate(a, device);
    return planValid(a, limits);
  };
  const op = function (enc: Encoder, a: A): void {
    record(enc, plan(a, enc.device.limits, enc.device));
  };
  return { validate, plan, op };
}

/** The buffers a launch binds: the dispatch's, and the CUDA twin's own. */
function launchBuffers(d: PlannedDispatch, l: CudaLaunch): Record<number, Buffer | undefined> {
  return l.buffers === undefined ? d.buffers : { ...d.buffers, ...l.buffers };
}

function dispatchOne(enc: Encoder, d: PlannedDispatch): void {
  const kernels = enc.device.kernels;
  const l = launchOf(d, kernels.language);
  const pipeline = kernels.pipeline(d.kernel, d.constants, l.entry);
  let buffers: DispatchBindings['buffers'] = launchBuffers(d, l);
  if (d.syncWords !== undefined) buffers = { ...buffers, [d.syncWords.binding]: enc._syncWords(d.syncWords.count) };
  if (d.scratchWords !== undefined) buffers = { ...buffers, [d.scratchWords.binding]: enc._scratchWords(d.scratchWords.count) };
  enc.dispatch(pipeline, { buffers, bytes: d.bytes, threadgroupMemory: l.threadgroupMemory, tensorMaps: l.tensorMaps }, l.grid, l.threads);
}

/** The buffers of a planned dispatch given again to dispatch `index` of a recording: its sync and scratch words those recorded. */
function patchBuffers(enc: Encoder, d: PlannedDispatch, l: CudaLaunch, index: number): DispatchBindings['buffers'] {
  let buffers: DispatchBindings['buffers'] = launchBuffers(d, l);
  for (const [kind, want, words] of [
    ['sync', d.syncWords, d.syncWords && enc._syncWordsOf(index, d.syncWords.count)],
    ['scratch', d.scratchWords, d.scratchWords && enc._scratchWordsOf(index, d.scratchWords.count)],
  ] as const) {
    if (want === undefined) continue;
    if (words === undefined) {
      throw new MlxError('InvalidArgument', `patchPlan: dispatch ${index} (${d.kernel}) must have been recorded with ${want.count} ${kind} words (got a dispatch recorded without them)`);
    }
    buffers = { ...buffers, [want.binding]: words };
  }
  return buffers;
}

/**
 * Gives a plan again to the dispatches recorded from `first` on by a
 * replayable encoder (Encoder.patch): the plan for an op's new arguments must
 * be the recorded one but for the contents of its inline bytes (a position,
 * a length), so only those change for the replays that follow. A plan that
 * needs another grid, other buffers or more dispatches is refused before
 * anything is patched.
 */
export function patchPlan(enc: Encoder, first: number, plan: OpPlan): void {
  const kernels = enc.device.kernels;
  enc.patch(first, plan.dispatches.map((d, i) => {
    const l = launchOf(d, kernels.language);
    return {
      pipeline: kernels.pipeline(d.kernel, d.constants, l.entry),
      bindings: { buffers: patchBuffers(enc, d, l, first + i), bytes: d.bytes, threadgroupMemory: l.threadgroupMemory, tensorMaps: l.tensorMaps },
      grid: l.grid,
      threads: l.threads,
    };
  }));
}
