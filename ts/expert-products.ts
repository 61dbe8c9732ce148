// What the per-expert product families share (dense_matmul_id,
// quantized_matmul_id): their four forms, the vector form (`*_mv_id`, routed
// by ids) and the matrix form (`*_mm_id`, over moeDispatchSort's grouping),
// each plain or as the fused gate/up projection; the rules on their sizes and
// buffers; the order of their bindings; and the op shape each form takes
// (validate, plan, op). A family gives what is its own: the buffers of one
// expert set, its extra size rules, its CUDA grid bounds, its params and
// launches.

import type { Buffer } from './buffer.ts';
import type { Device } from './device.ts';
import type { DType } from './dtype.ts';
import { opShape, type CudaLaunch, type OpPlan, type OpShape, type PlannedDispatch } from './plan.ts';
import {
  checkAtMost, checkBufferRules, checkedProduct, checkNoAliasing, checkPositive, invalid, like, ruleBindings, U32_MAX, type BufferRule, type DtypeOf,
} from './validate.ts';

/** The gate's activation of the fused gate/up products: silu (Qwen3.6), gelu with the tanh approximation (Gemma 4). */
export type GateActivation = 'silu' | 'gelu_tanh';
export const GATE_ACTIVATIONS: readonly GateActivation[] = ['silu', 'gelu_tanh'];


/** Tile slots over pairs grouped by expert (moe_tile in the preludes): floor(pairs / bm) + numExperts + 1. */
export function moeTileSlots(pairs: number, numExperts: number, bm: number): number {
  return Math.floor(pairs / bm) + numExperts + 1;
}

/** The pairs (m * nExpertUsed), bounded so that every index and the CUDA grids fit. */
export function checkPairs(op: string, m: number, nExpertUsed: number): number {
  const pairs = checkedProduct(op, 'm * nExpertUsed', m, nExpertUsed);
  checkAtMost(op, 'm * nExpertUsed', pairs, U32_MAX - 1, '2^32 - 2');
  return pairs;
}

/** The sizes of a per-expert product: pairs of (row of x, slot), m * nExpertUsed of them, each with an output row of n. */
export interface ExpertSizes {
  /** Rows of x. */
  m: number;
  /** Output rows of an expert's weight. */
  n: number;
  /** Columns of x and of an expert's weight. */
  k: number;
  /** Slots of each row of x (top-k; 1 for a down projection over pairs). */
  nExpertUsed: number;
  numExperts: number;
  /** Rows from one expert's weight to the next's; n when absent. At least n. */
  expertRows?: number;
}

/** The sizes, the activations and the output of every form. */
export interface ExpertProductBase extends ExpertSizes {
  /** [m, k] */
  x: Buffer;
  /** [m, nExpertUsed, n], x's dtype; output */
  output: Buffer;
}

/** A form's arguments as the code here reads them (the gate/up forms have an activation). */
type FormArgs = ExpertProductBase & { activation?: GateActivation };

/** A form of a per-expert product. */
export interface ExpertForm {
  /** The op's name in messages, and its kernels' names less the dtype. */
  readonly op: string;
  /** Over moeDispatchSort's offsets and order (else over the ids). */
  readonly matrix: boolean;
  /** The fused gate/up projection: two expert sets (else one). */
  readonly gateUp: boolean;
}


/** What a family of per-expert products decides for itself, for its arguments B. */
export interface ExpertFamily<B extends FormArgs> {
  /** The family's plan of a dispatch (familyPlans). */
  readonly plan: (dispatch: PlannedDispatch) => OpPlan;
  /** Dtypes of x in the form (and of the output, unless outputDtype says otherwise). */
  xDtypes(f: ExpertForm): readonly DType[];
  /**
   * The output's dtype where it is not x's: then the output is checked right
   * after x, so the expert sets' rules may be like('output').
   */
  readonly outputDtype?: DtypeOf;
  /** The fields of one expert set, as the plain form names them (the gate/up forms prefix them with gate and up). */
  readonly set: readonly string[];
  /** The family's own rules on the sizes, checked once they are positive u32 values. */
  checkSizes?(op: string, a: B): void;
  /** The CUDA grid of the form within CUDA_GRID_MAX blocks. */
  checkGrid(f: ExpertForm, a: B, pairs: number): void;
  /** Dtype and element count of each field of an expert set (set's order), its experts expertRows = rows apart. */
  expect(op: string, a: B, rows: number): readonly (readonly [dtype: DType | DtypeOf, count: number])[];
  /** The params struct of the form. */
  params(f: ExpertForm, a: B): Uint8Array;
  /**
   * The Metal launch and the CUDA one of the form, and where the family
   * takes another kernel of its own for these sizes, its name (else
   * `<op>_<dtype>`).
   */
  launch(f: ExpertForm, a: B, pairs: number): Pick<PlannedDispatch, 'grid' | 'threads'> & { cuda: CudaLaunch; kernel?: string };
}

function checkActivation(op: string, activation: unknown): void {
  if (activation !== undefined && !(GATE_ACTIVATIONS as readonly unknown[]).includes(activation)) {
    throw invalid(op, 'activation', "'silu', 'gelu_tanh' or absent", activation);
  }
}

const fieldName = (prefix: string, field: string): string => (prefix === '' ? field : prefix + field[0]!.toUpperCase() + field.slice(1));

/** The expert sets of a form, by field names: [the gate's (or the only one)], then the up's. */
function setsOf<B extends FormArgs>(fam: ExpertFamily<B>, f: ExpertForm): string[][] {
  return (f.gateUp ? ['gate', 'up'] : ['']).map((prefix) => fam.set.map((field) => fieldName(prefix, field)));
}

/** The routing of a form, by field names: ids (vector form), or offsets and order (matrix form). */
const routingOf = (f: ExpertForm): string[] => (f.matrix ? ['offsets', 'order'] : ['ids']);

const field = (a: ExpertProductBase, name: string): Buffer => (a as unknown as Record<string, Buffer>)[name]!;

function validateForm<B extends FormArgs>(fam: ExpertFamily<B>, f: ExpertForm, a: B, device?: Device): void {
  const op = f.op;
  if (f.gateUp) checkActivation(op, a.activation);
  for (const arg of ['m', 'n', 'k', 'nExpertUsed', 'numExperts'] as const) {
    checkPositive(op, arg, a[arg]);
    checkAtMost(op, arg, a[arg], U32_MAX, '2^32 - 1');
  }
  fam.checkSizes?.(op, a);
  const rows = a.expertRows ?? a.n;
  if (a.expertRows !== undefined) {
    checkPositive(op, 'expertRows', a.expertRows);
    if (a.expertRows < a.n) throw invalid(op, 'expertRows', `at least n (${a.n})`, a.expertRows);
  }
  const pairs = checkPairs(op, a.m, a.nExpertUsed);
  fam.checkGrid(f, a, pairs);
  const perField = fam.expect(op, a, rows);
  const nx = checkedProduct(op, 'm * k', a.m, a.k);
  const ny = checkedProduct(op, 'm * nExpertUsed * n', pairs, a.n);
  const routingCount: Record<string, number> = { ids: pairs, offsets: a.numExperts + 2, order: pairs };
  const list: BufferRule[] = [['x', a.x, fam.xDtypes(f), nx]];
  if (fam.outputDtype !== undefined) list.push(['output', a.output, fam.outputDtype, ny]);
  for (const set of setsOf(fam, f)) set.forEach((name, i) => list.push([name, field(a, name), ...perField[i]!]));
  for (const name of routingOf(f)) list.push([name, field(a, name), 'u32', routingCount[name]!]);
  if (fam.outputDtype === undefined) list.push(['output', a.output, like('x'), ny]);
  checkBufferRules(op, list, device);
  checkNoAliasing(op, ruleBindings(list), ['output'], 'every output row reads x and weights that other rows read too');
}

/**
 * The bindings of every form: 0 x, the gate's (or the only) expert set, ids
 * or offsets, output, the params struct, then order (matrix form) and the up
 * expert set (gate/up).
 */
function bindingsOf<B extends FormArgs>(fam: ExpertFamily<B>, f: ExpertForm, a: B): Pick<PlannedDispatch, 'buffers' | 'bytes'> {
  const [gate, up = []] = setsOf(fam, f);
  const [routing, order] = routingOf(f);
  const buffers: (Buffer | undefined)[] = [a.x, ...gate!.map((n) => field(a, n)), field(a, routing!), a.output];
  const bytes: (Uint8Array | undefined)[] = [];
  bytes[buffers.length] = fam.params(f, a);
  let i = buffers.length + 1;
  for (const name of [...(order === undefined ? [] : [order]), ...up]) buffers[i++] = field(a, name);
  return { buffers, bytes };
}

/** The op shape of one form of a family: validate, plan (one dispatch), op. */
export function expertProductOp<B extends FormArgs, A extends B>(fam: ExpertFamily<B>, f: ExpertForm): OpShape<A> {
  return opShape<A>((a, device) => validateForm(fam, f, a, device), (a) => {
    const pairs = a.m * a.nExpertUsed;
    const dispatch: PlannedDispatch = { kernel: `${f.op}_${a.x.dtype}`, ...bindingsOf(fam, f, a), ...fam.launch(f, a, pairs) };
    return fam.plan(dispatch);
  });
}

