// What the parity tests of the per-expert products share (dense_matmul_id,
// quantized_matmul_id): the ids of a case, and the cases run in both the
// same way: the matrix form after moe_dispatch_sort, the fused gate/up
// projections in both forms, a down projection over pairs. Each family
// gives its own product check (its weights, its views, its reference).

import type { GateActivation } from '../ts/ops/quantized_matmul_id.ts';
import { dotTolerance, rng, type Rng } from './helpers.ts';

export type IdForm = 'vector' | 'matrix';

/** The sizes every per-expert product case has, and the dtype that x meets the weight in. */
export interface IdShape {
  dt: 'f32' | 'f16' | 'bf16';
  m: number;
  n: number;
  k: number;
  nExpertUsed: number;
  numExperts: number;
}

/**
 * One product on the device against the reference (the matrix form after
 * moe_dispatch_sort in the same encoder): the error, Infinity where the
 * bytes around the output were written.
 */
export type IdProduct<S extends IdShape> = (s: S, ids: number[], form: IdForm, seed: number,
  gateUp?: { activation: GateActivation; fused: boolean }) => number;

/** Ids [pairs]: pick(p) where it gives one, else experts 0 .. E - 1 and, where `bad`, some past them. */
export function idsFor(r: Rng, pairs: number, numExperts: number, pick: (p: number) => number | null, bad: boolean): number[] {
  return Array.from({ length: pairs }, (_, p) => {
    const fixed = pick(p);
    if (fixed !== null) return fixed;
    if (bad && r.next() < 0.1) return numExperts + Math.floor(r.uniform(0, 1e9));
    return Math.floor(r.uniform(0, numExperts));
  });
}

/** A matrix-form case: its ids from pick and bad, with expert `empty` (if any) given no pair (its ids moved to the next). */
export type IdMatrixCase<S extends IdShape> = [name: string, s: S, pick: (p: number) => number | null, bad: boolean, empty: number | null];

/** The matrix-form cases (seeds from 100): those over dotTolerance, named. */
export function matrixCasesOver<S extends IdShape>(check: IdProduct<S>, cases: IdMatrixCase<S>[]): string[] {
  const over: string[] = [];
  let seed = 100;
  for (const [name, s, pick, bad, empty] of cases) {
    const ids = idsFor(rng(seed), s.m * s.nExpertUsed, s.numExperts, pick, bad).map((e) => (e === empty ? e + 1 : e));
    const e = check(s, ids, 'matrix', seed++);
    if (!(e < dotTolerance(s.dt, s.k))) over.push(`${name}: ${e}`);
  }
  return over;
}

/** The fused gate/up cases (silu, gelu_tanh; separate and fused weights; both forms; seeds from 200): those over dotTolerance. */
export function gateUpCasesOver<S extends IdShape>(check: IdProduct<S>, shape: (form: IdForm, fused: boolean) => S): string[] {
  const over: string[] = [];
  let seed = 200;
  for (const activation of ['silu', 'gelu_tanh'] as const) {
    for (const fused of [false, true]) {
      for (const form of ['vector', 'matrix'] as const) {
        const s = shape(form, fused);
        const ids = idsFor(rng(seed), s.m * s.nExpertUsed, s.numExperts, () => null, true);
        const e = check(s, ids, form, seed++, { activation, fused });
        if (!(e < dotTolerance(s.dt, s.k))) over.push(`${activation} ${fused ? 'fused' : 'separate'} ${form}: ${e}`);
      }
    }
  }
  return over;
}

/** A down projection over pairs (s.nExpertUsed = 1), both forms (seeds 301, 302): their errors. */
export function downErrors<S extends IdShape>(check: IdProduct<S>, s: S): number[] {
  const ids = idsFor(rng(300), s.m, s.numExperts, () => null, false);
  return (['vector', 'matrix'] as const).map((form) => check(s, ids, form, form === 'vector' ? 301 : 302));
}
