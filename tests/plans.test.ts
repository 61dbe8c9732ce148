// Op plans (ts/plan.ts), made for the limits of devices this machine need not
// have: every op's plan at the argument sets of tests/op-cases.ts, for an
// Apple GPU and for an H100, against the rules a backend would refuse at
// dispatch (the buffers come from the first backend present), and recorded
// on every backend present as the op records it.

import { afterAll, describe, expect, test } from 'bun:test';
import type { Device } from '../ts/index.ts';
import * as ops from '../ts/ops/index.ts';
import { joinSources } from '../ts/registry.ts';
import { BUFFER_ATTR, kernelParams } from '../ts/metal-source.ts';
import { launchOf, planAccess, record, type OpPlan } from '../ts/plan.ts';
import { TARGET_LIMITS, backends, describeBackends, openDevice, rng } from './helpers.ts';
import { CASES, fillInputs } from './op-cases.ts';

type PlanFn = (args: unknown, limits: unknown, device?: Device) => OpPlan;
const planOf = (fn: string): PlanFn | undefined =>
  (ops as Record<string, unknown>)[`plan${fn[0]!.toUpperCase()}${fn.slice(1)}`] as PlanFn | undefined;

let first: Device | null = null;
const anyDevice = (): Device => (first ??= openDevice(backends()[0]!));
afterAll(() => first?.close());

const planned = CASES.filter((c) => planOf(c.fn) !== undefined);

test('every op has a plan', () => {
  expect(CASES.length).toBeGreaterThanOrEqual(20);
  expect(CASES.filter((c) => planOf(c.fn) === undefined).map((c) => c.fn)).toEqual([]);
});

for (const [target, limits] of Object.entries(TARGET_LIMITS) as [keyof typeof TARGET_LIMITS, (typeof TARGET_LIMITS)['metal']][]) {
  describe(`plans for ${target} (${limits.maxThreadgroupMemory} bytes of threadgroup memory)`, () => {
    for (const c of planned) {
      test(c.fn, () => {
        const device = anyDevice();
        const args = c.make(device);
        const plan = planOf(c.fn)!(args, limits, device);
        expect(plan.dispatches.length).toBeGreaterThan(0);
        const metal = joinSources(plan.sources.metal);
        for (const [i, d] of plan.dispatches.entries()) {
          expect(plan.kernels).toContain(d.kernel);
          const l = launchOf(d, target === 'cuda' ? 'cuda' : 'metal');
          const threads = l.threads[0] * l.threads[1] * l.threads[2];
          expect(threads).toBeGreaterThan(0);
          expect(threads).toBeLessThanOrEqual(limits.maxThreadsPerThreadgroup);
          for (const g of l.grid) expect(Number.isInteger(g) && g >= 1 && g <= 0xffff_ffff).toBe(true);
          const shared = Object.values(l.threadgroupMemory ?? {}).reduce((a: number, b) => a + (b ?? 0), 0);
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
      });
    }
  });
}

describeBackends('a plan recorded is what the op records', ({ device: dev }) => {
  for (const c of planned) {
    test(c.fn, () => {
      const device = dev();
      const r = rng(7);
      const viaOp = c.make(device);
      const viaPlan = c.make(device);
      fillInputs(c, viaOp, r);
      for (const [k, v] of Object.entries(viaOp)) {
        const b = v as { readNumbers?: () => Float64Array };
        const t = viaPlan[k] as { writeNumbers?: (x: ArrayLike<number>) => void };
        if (b?.readNumbers !== undefined && t?.writeNumbers !== undefined) t.writeNumbers(b.readNumbers());
      }
      const e1 = device.encoder();
      (ops as unknown as Record<string, (e: unknown, a: unknown) => void>)[c.fn]!(e1, viaOp);
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
    });
  }
});
