// A kernel family's files and what it registers outside them, checked so
// that a failure names the file or the line to write (docs/internals.md,
// "Adding a family"):
// - each ts/ops/<family>.ts has shaders/<family>.metal,
//   shaders/cuda/<family>.cu, ts/reference/<family>.ts and
//   tests/<family>.test.ts (shaders/<family>.h where it has param structs:
//   tests/contract-structs.test.ts);
// - ts/ops/index.ts and ts/reference/index.ts each re-export every module of
//   their folder (`export * from './<family>.ts';`: static re-exports, which
//   bundlers and `bun build --compile` follow), and every export of a module
//   is reachable through its index (`export *` drops a name two modules export);
// - every family with ops registers their cases: tests/<family>.test.ts calls
//   opContract('<family>', cases) (tests/op-contract.ts), which checks there
//   that each op of the family has a case.

import { expect, test } from 'bun:test';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { opsOf } from './fuzz-validation.ts';

const ROOT = join(import.meta.dir, '..');
const modulesOf = (dir: string): string[] =>
  readdirSync(join(ROOT, 'ts', dir)).filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts') && f !== 'index.ts').sort();

test('every family of ts/ops has its Metal, CUDA, reference and test files', () => {
  const families = modulesOf('ops').map((m) => m.slice(0, -3));
  expect(families.length).toBeGreaterThan(20);
  const missing = families.flatMap((f) =>
    [`shaders/${f}.metal`, `shaders/cuda/${f}.cu`, `ts/reference/${f}.ts`, `tests/${f}.test.ts`].filter((p) => !existsSync(join(ROOT, p))));
  expect(missing).toEqual([]);
});

for (const dir of ['ops', 'reference']) {
  test(`ts/${dir}/index.ts re-exports every module of ts/${dir}, each export reachable`, async () => {
    const modules = modulesOf(dir);
    expect(modules.length).toBeGreaterThan(20);
    const index = readFileSync(join(ROOT, 'ts', dir, 'index.ts'), 'utf8');
    const missing = modules.filter((m) => !index.includes(`export * from './${m}';`)).map((m) => `ts/${dir}/index.ts: export * from './${m}';`);
    expect(missing).toEqual([]);
    const all = (await import(join(ROOT, 'ts', dir, 'index.ts'))) as Record<string, unknown>;
    const unreachable: string[] = [];
    for (const m of modules) {
      const mod = (await import(join(ROOT, 'ts', dir, m))) as Record<string, unknown>;
      for (const name of Object.keys(mod)) if (all[name] === undefined) unreachable.push(`ts/${dir}/${m}: ${name}`);
    }
    expect(unreachable).toEqual([]);
  });
}

test('every family with ops registers their cases: tests/<family>.test.ts calls opContract(\'<family>\', ...)', async () => {
  const problems: string[] = [];
  let families = 0;
  for (const m of modulesOf('ops')) {
    const family = m.slice(0, -3);
    const own = opsOf((await import(join(ROOT, 'ts', 'ops', m))) as Record<string, unknown>);
    if (own.length === 0) continue;
    families++;
    const file = join(ROOT, 'tests', `${family}.test.ts`);
    const text = existsSync(file) ? readFileSync(file, 'utf8') : '';
    if (!new RegExp(`^opContract\\('${family}',`, 'm').test(text)) {
      problems.push(`tests/${family}.test.ts: no opContract('${family}', cases) for ${own.join(', ')}`);
    }
  }
  // A call names the family of its file.
  for (const f of readdirSync(join(ROOT, 'tests')).filter((x) => x.endsWith('.test.ts'))) {
    for (const c of readFileSync(join(ROOT, 'tests', f), 'utf8').matchAll(/^opContract\('(\w+)'/gm)) {
      if (`${c[1]}.test.ts` !== f) problems.push(`tests/${f}: opContract('${c[1]}', ...) belongs in tests/${c[1]}.test.ts`);
    }
  }
  expect(problems).toEqual([]);
  expect(families).toBeGreaterThan(20);
});
