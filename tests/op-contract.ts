// The contract every op of ts/ops keeps, checked at argument sets that the
// family's own test file gives: tests/<family>.test.ts ends with one call,
// `opContract('<family>', cases)`. A case says what each argument of one op
// is and makes a valid set at a small shape. From the cases the call
// registers, in the family's test file:
// - coverage: a case for every op of ts/ops/<family>.ts, and only for those;
// - the validation fuzz, on emu (tests/fuzz-validation.ts): the valid sets
//   run; every buffer argument refuses non-buffers, released and foreign
//   buffers; seeded mutations are refused with an MlxError naming op and
//   argument, or accepted and run; an output bound as another argument is
//   refused or gives what separate buffers give;
// - views, on every backend: one set per op, each buffer a view at a
//   non-zero offset inside a larger allocation, gives the results of plain
//   buffers and writes nothing around the views;
// - plans (ts/plan.ts), for an Apple GPU and an H100 (TARGET_LIMITS) on a
//   machine with neither: within the limits, binding only the kernel's
//   bindings, writing only what they bind, a compact CUDA entry (CudaLaunch)
//   taking the kernel's parameters; recorded on every backend, a plan does
//   what the op does.
// tests/contract-families.test.ts holds every family's test file to the call.

import { afterAll, expect, test } from 'bun:test';
import { Device, type Buffer, type DType } from '../ts/index.ts';
import { BUFFER_ATTR, kernelParams } from '../ts/metal-source.ts';
import * as ops from '../ts/ops/index.ts';
import { GGML_QUANT_TYPES, ggmlBlockOf, type GgmlQuantType, ggmlQuantize } from '../ts/ops/quantized_matmul_ggml.ts';
import { launchOf, planAccess, record, type OpPlan } from '../ts/plan.ts';
import { joinSources } from '../ts/registry.ts';
import { compactEntryProblem, CXX } from './cuda-source.ts';
import { fuzzAliasing, fuzzBufferRefusals, fuzzMutations, fuzzValidSets, opsOf } from './fuzz-validation.ts';
import { TARGET_LIMITS, backends, describeBackends, maxRelErr, rng, TOL, type Rng } from './helpers.ts';

/**
 * Wall time of the fuzz's mutation loop per case (MLX_NATIVE_FUZZ_MS
 * overrides), the committed sets' runs included: about 5 s over the 106
 * cases of all families.
 */
const FUZZ_MS_PER_CASE = Number(process.env.MLX_NATIVE_FUZZ_MS ?? 45);

// ---- cases ----

export type Kind =
  | 'buf' // a live buffer of the device (required)
  | 'buf?' // absent, or as buf
  | 'int' // a safe integer > 0
  | 'int?' // absent, or as int
  | 'num' // a finite number
  | 'num?'
  | 'nonneg' // a finite number >= 0
  | 'nonneg?'
  | 'bool'
  | 'bool?'
  | 'enum' // one of `values`
  | 'offsets?' // cuSeqlens: absent or an array of offsets
  | 'free'; // anything (ignored by the op in this set)

export interface KeySpec {
  kind: Kind;
  /** Buffers: every dtype the argument takes in some valid set. */
  dtypes?: readonly DType[];
  /** Buffers: the element count may differ with no size changed (e.g. a scalar of 1 or dim elements). */
  freeCount?: boolean;
  /** Buffers: a table whose contents index memory (random contents are a mutation). */
  table?: boolean;
  /** Buffers: written by the op. */
  output?: boolean;
  /**
   * Buffers: the op's working memory, whose contents after the op are not
   * specified (a multi-block selection's candidates arrive in the order the
   * blocks append them): compared by neither the views nor the plans test.
   */
  working?: boolean;
  values?: readonly unknown[];
  /** When the op reads the argument (default: always); otherwise a buffer must only be live if given, and a scalar is free. */
  readWhen?: (args: Args) => boolean;
}

export interface Case {
  /** The exported function. */
  fn: string;
  /** The first word of its messages. */
  op: string;
  /** The arguments and what they are. */
  keys: Record<string, KeySpec>;
  /** Pairs of arguments that may be one buffer (in place, documented). */
  inPlace?: readonly (readonly [string, string])[];
  /** A valid argument set at a small shape on device d. */
  make(d: Device): Record<string, unknown>;
  /** Valid contents of the tables and other inputs that must hold particular values. */
  fill?(args: Record<string, unknown>): void;
}

export type Args = Record<string, unknown>;

// ---- building cases ----

export const F = ['f32'] as const;
export const BF = ['bf16'] as const;
export const U32 = ['u32'] as const;
/** The float dtypes. */
export const EW = ['f32', 'f16', 'bf16'] as const;
/** A buffer argument taking these dtypes, an output one. */
export const buf = (dtypes: readonly DType[], extra: Partial<KeySpec> = {}): KeySpec => ({ kind: 'buf', dtypes, ...extra });
export const out = (dtypes: readonly DType[], extra: Partial<KeySpec> = {}): KeySpec => ({ kind: 'buf', dtypes, output: true, ...extra });
export const int: KeySpec = { kind: 'int' };
/** A buffer of n elements. */
export const a = (d: Device, dtype: DType, n: number): Buffer => d.alloc(dtype, [n]);

/** Packed quantized weights: any bits are valid values (a fixed scramble of the word index). */
export const randomWords = (b: Buffer): void => b.writeNumbers(Array.from({ length: b.elementCount }, (_, i) => Math.imul(i + 1, 0x9e3779b1) >>> 0));
/**
 * GGUF blocks in a u8 buffer: as many whole blocks of the type as it holds,
 * quantized from values in [-1, 1) (any bytes are valid blocks; quantized
 * ones keep the f16 scales finite, so results compare bit for bit).
 */
export const ggmlBlocks = (b: Buffer, type: unknown): void => {
  if (!(GGML_QUANT_TYPES as readonly unknown[]).includes(type)) return;
  const { qk, bytes } = ggmlBlockOf(type as GgmlQuantType);
  const blocks = Math.floor(b.byteLength / bytes);
  if (blocks === 0) return;
  const q = ggmlQuantize(type as GgmlQuantType, Array.from({ length: blocks * qk }, (_, i) => Math.sin(i * 0.37)), 1, blocks * qk);
  const all = new Uint8Array(b.byteLength);
  all.set(q);
  b.write(all);
};

// ---- argument sets ----

/** The value of an argument. */
export function getPath(args: Args, path: string): unknown {
  return args[path];
}

/** Seeded values in every input buffer of the set (u32 tables zeroed, u8 random bytes), then the case's own contents. */
export function fillInputs(c: Case, args: Args, r: Rng): void {
  for (const [path, spec] of Object.entries(c.keys)) {
    if (spec.kind !== 'buf' && spec.kind !== 'buf?') continue;
    const b = getPath(args, path) as Buffer | undefined;
    if (b === undefined) continue;
    if (b.dtype === 'u32' || b.dtype === 'i32') b.writeNumbers(Array.from({ length: b.elementCount }, () => 0));
    else if (b.dtype === 'u8') b.writeNumbers(Array.from({ length: b.elementCount }, () => Math.floor(r.uniform(0, 256))));
    else b.writeNumbers(Array.from({ length: b.elementCount }, () => r.uniform(-1, 1)));
  }
  c.fill?.(args);
}

// ---- the contract ----

type OpFn = (enc: unknown, args: unknown) => void;
type PlanFn = (args: unknown, limits: unknown, device?: Device) => OpPlan;
const opOf = (fn: string): OpFn => (ops as unknown as Record<string, OpFn>)[fn]!;
const planOf = (fn: string): PlanFn | undefined =>
  (ops as Record<string, unknown>)[`plan${fn[0]!.toUpperCase()}${fn.slice(1)}`] as PlanFn | undefined;

/** Registers the contract's tests for the family's cases (see the top of this file). */
export function opContract(family: string, cases: readonly Case[]): void {
  test(`op contract ${family}: a case for every op of ts/ops/${family}.ts, each op with a plan`, async () => {
    const own = opsOf((await import(`../ts/ops/${family}.ts`)) as Record<string, unknown>);
    const given = [...new Set(cases.map((c) => c.fn))].sort();
    expect({ family, withoutCase: own.filter((f) => !given.includes(f)), notOfFamily: given.filter((f) => !own.includes(f)) })
      .toEqual({ family, withoutCase: [], notOfFamily: [] });
    expect(given.filter((f) => planOf(f) === undefined)).toEqual([]);
  });

  const first = backends()[0]?.label;
  describeBackends(`op contract ${family}`, ({ device, label }) => {
    if (label === 'emu') {
      let other: Device | null = null;
      const otherDevice = (): Device => (other ??= Device.open({ backend: 'emu' }));
      afterAll(() => other?.close());
      test('fuzz: every case gives a valid set that runs', () => fuzzValidSets(device(), cases));
      test('fuzz: every buffer argument refuses null, undefined, a non-buffer, a released buffer and a foreign one', () => {
        expect(fuzzBufferRefusals(device(), otherDevice(), cases)).toEqual([]);
      });
      test('fuzz: mutated argument sets: refused with an MlxError naming op and argument, or accepted and run', () => {
        const { tried, failures } = fuzzMutations(device(), otherDevice(), cases, FUZZ_MS_PER_CASE, family);
        expect(failures.slice(0, 30)).toEqual([]);
        expect(tried).toBeGreaterThanOrEqual(cases.length);
      }, 120_000);
      test('fuzz: aliasing: an output bound as another argument is refused, or gives what separate buffers give', () => {
        expect(fuzzAliasing(device(), cases, family)).toEqual([]);
      }, 120_000);
    }
    if (label === first) {
      for (const [target, limits] of Object.entries(TARGET_LIMITS)) {
        for (const c of cases) test(`plan for ${target} (${limits.maxThreadgroupMemory} bytes of threadgroup memory): ${c.fn}`, () => checkPlan(device(), c, target, limits));
      }
    }
    test('views: every op binds views at non-zero offsets: the same results as plain buffers, nothing written around them', () => {
      checkViews(device(), cases);
    }, 120_000);
    for (const c of cases) test(`a plan recorded is what the op records: ${c.fn}`, () => checkRecordedPlan(device(), c));
  });
}

/** The case's plan for a target's limits, against the rules a backend would refuse at dispatch. */
function checkPlan(device: Device, c: Case, target: string, limits: (typeof TARGET_LIMITS)[keyof typeof TARGET_LIMITS]): void {
  const plan = planOf(c.fn)!(c.make(device), limits, device);
  expect(plan.dispatches.length).toBeGreaterThan(0);
  const metal = joinSources(plan.sources.metal);
  for (const [i, d] of plan.dispatches.entries()) {
    expect(plan.kernels).toContain(d.kernel);
    const l = launchOf(d, target === 'cuda' ? 'cuda' : 'metal');
    // A compact CUDA entry named by the plan takes the kernel's parameters (tests/cuda-source.ts).
    if (l.entry !== undefined && CXX !== undefined) expect(compactEntryProblem(plan.family, d.kernel, l.entry)).toBe('');
    const threads = l.threads[0] * l.threads[1] * l.threads[2];
    expect(threads).toBeGreaterThan(0);
    expect(threads).toBeLessThanOrEqual(limits.maxThreadsPerThreadgroup);
    for (const g of l.grid) expect(Number.isInteger(g) && g >= 1 && g <= 0xffff_ffff).toBe(true);
    const shared = Object.values(l.threadgroupMemory ?? {}).reduce((x: number, y) => x + (y ?? 0), 0);
    expect(shared).toBeLessThanOrEqual(limits.maxThreadgroupMemory);
    // Every bound index is a binding of the kernel, buffers and bytes never on one index.
    const declared = kernelParams(metal, d.kernel).flatMap((p) => [...BUFFER_ATTR.exec(p)?.slice(1) ?? []]);
    const bound = [...Object.keys(d.buffers), ...Object.keys(d.bytes ?? {})].map(Number);
    expect(new Set(bound).size).toBe(bound.length);
    for (const b of bound) expect([d.kernel, declared]).toEqual([d.kernel, expect.arrayContaining([String(b)])]);
    // What it writes is a subset of what it binds.
    const access = planAccess(plan, i);
    for (const w of access.writes) expect(access.reads).toContain(w);
  }
}

/** The case's plan recorded gives what the op gives, with the same barriers. */
function checkRecordedPlan(device: Device, c: Case): void {
  const viaOp = c.make(device);
  const viaPlan = c.make(device);
  fillInputs(c, viaOp, rng(7));
  for (const [k, v] of Object.entries(viaOp)) {
    const b = v as { readNumbers?: () => Float64Array };
    const t = viaPlan[k] as { writeNumbers?: (x: ArrayLike<number>) => void };
    if (b?.readNumbers !== undefined && t?.writeNumbers !== undefined) t.writeNumbers(b.readNumbers());
  }
  const e1 = device.encoder();
  opOf(c.fn)(e1, viaOp);
  e1.commitAndWait();
  const e2 = device.encoder();
  record(e2, planOf(c.fn)!(viaPlan, device.limits, device));
  e2.commitAndWait();
  expect(e2.barrierCount).toBe(e1.barrierCount);
  for (const [k, v] of Object.entries(viaOp)) {
    const b = v as { readNumbers?: () => Float64Array };
    const t = viaPlan[k] as { readNumbers?: () => Float64Array };
    if (b?.readNumbers !== undefined && !c.keys[k]?.working) {
      expect([k, Array.from(t.readNumbers!())]).toEqual([k, Array.from(b.readNumbers())]);
    }
  }
  e1.release();
  e2.release();
}

/**
 * One set per op, each buffer argument a view at a non-zero offset inside a
 * larger allocation of sentinel bytes: the results equal those of plain
 * buffers, and the bytes around each view keep their sentinel.
 */
function checkViews(dev: Device, cases: readonly Case[]): void {
  const seen = new Set<string>();
  for (const c of cases) {
    if (seen.has(c.fn)) continue;
    seen.add(c.fn);
    const base = c.make(dev);
    fillInputs(c, base, rng(31));
    // A view per distinct buffer (in-place pairs share one), 16 * (i + 1) bytes in.
    const viewOf = new Map<Buffer, { view: Buffer; alloc: Buffer; pad: number; key: string }>();
    const viewed: Record<string, unknown> = { ...base };
    let i = 0;
    for (const path of Object.keys(c.keys)) {
      const b = getPath(base, path);
      if (typeof b !== 'object' || b === null || !('dtype' in b)) continue;
      const buf = b as Buffer;
      let v = viewOf.get(buf);
      if (v === undefined) {
        const pad = 16 * ++i;
        const alloc = dev.alloc('u8', [pad + buf.byteLength + 48]);
        alloc.fill(0xa5);
        const view = alloc.view(buf.dtype, buf.shape, pad);
        view.write(buf.read());
        v = { view, alloc, pad, key: path };
        viewOf.set(buf, v);
      }
      viewed[path] = v.view;
    }
    using e1 = dev.encoder();
    opOf(c.fn)(e1, base);
    e1.commitAndWait();
    using e2 = dev.encoder();
    opOf(c.fn)(e2, viewed);
    e2.commitAndWait();
    for (const [buf, { view, alloc, pad, key }] of viewOf) {
      const want = new Uint8Array(buf.read().buffer);
      const got = new Uint8Array(view.read().buffer);
      // Exact, but for float rounding where a kernel's reduction order may
      // differ between launches; working memory has no specified contents.
      if (!c.keys[key]!.working && !want.every((x, j) => x === got[j])) {
        expect([c.fn, key, maxRelErr(view.readNumbers(), buf.readNumbers(), 1) < TOL.bf16]).toEqual([c.fn, key, true]);
      }
      const around = alloc.read() as Uint8Array;
      for (let j = 0; j < pad; j++) if (around[j] !== 0xa5) throw new Error(`${c.fn}: byte ${j} before a view was written`);
      for (let j = pad + buf.byteLength; j < around.length; j++) if (around[j] !== 0xa5) throw new Error(`${c.fn}: byte ${j} after a view was written`);
      alloc.release();
    }
  }
}
