// mlx-native/testing (ts/testing.ts): the measures, tolerances, poisoning and
// seeded inputs that parity suites share, and the backend matrix that lists
// absent backends as skipped.
import { describe, expect, test } from 'bun:test';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  TOL,
  backendAbsence,
  expectClose,
  maxRelErr,
  nmse,
  poisoned,
  randomArray,
  rng,
  scaledErr,
  tolerance,
} from '../ts/testing.ts';
import { Device } from '../ts/index.ts';
import * as helpers from './helpers.ts';

const ROOT = join(import.meta.dir, '..');

describe('testing', () => {
  test('the project\'s helpers are the package\'s', () => {
    expect(helpers.maxRelErr).toBe(maxRelErr);
    expect(helpers.nmse).toBe(nmse);
    expect(helpers.rng).toBe(rng);
    expect(helpers.TOL).toBe(TOL);
    expect(helpers.backendAbsence).toBe(backendAbsence);
  });

  test('tolerances by dtype', () => {
    expect(TOL).toEqual({ f32: 1e-5, f16: 1e-3, bf16: 1e-2 });
    expect([tolerance('f32'), tolerance('f16'), tolerance('bf16'), tolerance('u32'), tolerance('i32')]).toEqual([1e-5, 1e-3, 1e-2, 0, 0]);
  });

  test('error measures: max relative (floored at the data scale), NMSE; NaN poisoning fails them', () => {
    expect(maxRelErr([1, 2, 4], [1, 2, 4])).toBe(0);
    expect(maxRelErr([1.1, 2, 4], [1, 2, 4])).toBeCloseTo(0.1, 12);
    expect(maxRelErr([1e-9], [0])).toBe(1e-9 / Number.MIN_VALUE); // an all-zero reference has no scale
    expect(maxRelErr([1, 0.001], [1, 0])).toBeCloseTo(1, 12); // near zero: measured against 1e-3 of the largest
    expect(maxRelErr([NaN, 1], [1, 1])).toBe(Infinity);
    expect(maxRelErr([NaN], [NaN])).toBe(0);
    expect(nmse([1, 2], [1, 2])).toBe(0);
    expect(nmse([2, 0], [1, 1])).toBeCloseTo(1, 12);
    expect(nmse([NaN, 0], [1, 1])).toBe(Infinity);
    expect(scaledErr([1, 1e-3], [1, 0])).toBeCloseTo(1e-3, 12);
    expect(() => maxRelErr([1], [1, 2])).toThrow('length mismatch');
    expectClose([1, 2 + 1e-6], [1, 2], 'f32');
    expect(() => expectClose([1, 2.1, 3], [1, 2, 3], 'f16', 'y')).toThrow('y: max relative error');
    expect(() => expectClose([1, NaN], [1, 2], 1e-2)).toThrow('element 1: got NaN, want 2');
  });

  test('seeded inputs: the same sequence for the same seed, another for another', () => {
    expect([...randomArray(rng(7), 5)]).toEqual([...randomArray(rng(7), 5)]);
    expect([...randomArray(rng(7), 5)]).not.toEqual([...randomArray(rng(8), 5)]);
    const a = randomArray(rng(1), 1000, 2, 3);
    expect(Math.min(...a)).toBeGreaterThanOrEqual(2);
    expect(Math.max(...a)).toBeLessThan(3);
    // Fixed values: the sequence is part of the contract (references made elsewhere replay it).
    const fixed = rng(20240611);
    expect([fixed.next(), fixed.next()]).toEqual([0.5837658101227134,0.6412668467964977]);
    const r = rng(1);
    let s = 0;
    for (let i = 0; i < 10000; i++) s += r.normal();
    expect(Math.abs(s / 10000)).toBeLessThan(0.05);
  });

  test.if(backendAbsence('emu') === null)('poisoned outputs: NaN for floats, all bits set for integers', () => {
    using d = Device.open({ backend: 'emu' });
    for (const dt of ['f32', 'f16', 'bf16'] as const) {
      using b = poisoned(d, dt, [3]);
      expect([...b.readNumbers()].every(Number.isNaN)).toBe(true);
    }
    using u = poisoned(d, 'u32', [2]);
    expect([...u.read()]).toEqual([0xffffffff, 0xffffffff]);
    using i = poisoned(d, 'i32', [1]);
    expect([...i.read()]).toEqual([-1]);
  });

  test('the backend matrix: a block per backend, absent ones listed as skipped; a required one that is absent fails', () => {
    const dir = mkdtempSync(join(tmpdir(), 'mlxn-matrix-'));
    try {
      const file = join(dir, 'matrix.test.ts');
      writeFileSync(
        file,
        `import { expect, test } from 'bun:test';
import { describeBackends } from '${join(ROOT, 'ts', 'testing.ts')}';
describeBackends('m', ({ backend }) => { test('runs', () => expect(typeof backend).toBe('string')); });
describeBackends('r', () => { test('runs', () => {}); }, { required: ['metal'] });
`,
      );
      // Only emu selected: cuda and metal are listed as skipped, whatever this machine has.
      const env: Record<string, string> = {};
      for (const [k, v] of Object.entries(process.env)) if (v !== undefined) env[k] = v;
      env['MLX_NATIVE_TEST_BACKENDS'] = 'emu';
      const r = spawnSync(process.execPath, ['test', file], { cwd: dir, env, encoding: 'utf8' });
      const out = r.stdout + r.stderr;
      expect(out).toContain('(skip) m [cuda] > runs');
      expect(out).toContain('(skip) m [metal] > runs');
      expect(out).toContain('(fail) r > the metal backend is present');
      if (backendAbsence('emu') === null) {
        expect(out).toContain('(pass) m [emu] > runs');
        expect(out).toContain('(pass) m [emu-random] > runs');
      }
      expect(r.status).not.toBe(0); // the required metal is absent
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
