// A kernel family is five files of its name and one line (docs/internals.md,
// "Adding a family"), checked so that a failure names the file, the section
// or the line to write:
// - each ts/ops/<family>.ts has shaders/<family>.metal,
//   shaders/cuda/<family>.cu and tests/<family>.test.ts (shaders/<family>.h
//   where it has param structs: tests/contract-structs.test.ts), and ends
//   with its float64 reference, the section REFERENCE_SECTION exporting at
//   least one <name>Ref;
// - ts/ops/index.ts re-exports every module of ts/ops (`export * from
//   './<family>.ts';`: static re-exports, which bundlers and `bun build
//   --compile` follow), and every export of a module is reachable through it
//   (`export *` drops a name two modules export);
// - ts/reference/ holds only index.ts, 'mlx-native/reference', which
//   re-exports the ops index: the references have no files of their own;
// - every family with ops registers their cases: tests/<family>.test.ts calls
//   opContract('<family>', cases) (tests/op-contract.ts), which checks there
//   that each op of the family has a case.

import { expect, test } from 'bun:test';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { opsOf } from './fuzz-validation.ts';

const ROOT = join(import.meta.dir, '..');
const REFERENCE_SECTION = '// ---- the float64 reference ----';
const modulesOf = (dir: string): string[] =>
  readdirSync(join(ROOT, 'ts', dir)).filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts') && f !== 'index.ts').sort();

test('every family of ts/ops has its Metal, CUDA and test files, and its reference at the end of its op module', () => {
  const families = modulesOf('ops').map((m) => m.slice(0, -3));
  expect(families.length).toBeGreaterThan(20);
  const missing = families.flatMap((f) => {
    const files = [`shaders/${f}.metal`, `shaders/cuda/${f}.cu`, `tests/${f}.test.ts`].filter((p) => !existsSync(join(ROOT, p)));
    const text = readFileSync(join(ROOT, 'ts', 'ops', `${f}.ts`), 'utf8');
    const at = text.indexOf(REFERENCE_SECTION);
    const section = at < 0 ? '' : text.slice(at);
    const refs = /^export (?:function|const) \w+Ref\b/m.test(section);
    return at < 0 ? [...files, `ts/ops/${f}.ts: the section '${REFERENCE_SECTION}' at its end`]
      : refs ? files : [...files, `ts/ops/${f}.ts: an exported <name>Ref after '${REFERENCE_SECTION}'`];
  });
  expect(missing).toEqual([]);
});

test('ts/ops/index.ts re-exports every module of ts/ops, each export reachable', async () => {
  const modules = modulesOf('ops');
  expect(modules.length).toBeGreaterThan(20);
  const index = readFileSync(join(ROOT, 'ts', 'ops', 'index.ts'), 'utf8');
  const missing = modules.filter((m) => !index.includes(`export * from './${m}';`)).map((m) => `ts/ops/index.ts: export * from './${m}';`);
  expect(missing).toEqual([]);
  const all = (await import(join(ROOT, 'ts', 'ops', 'index.ts'))) as Record<string, unknown>;
  const unreachable: string[] = [];
  for (const m of modules) {
    const mod = (await import(join(ROOT, 'ts', 'ops', m))) as Record<string, unknown>;
    for (const name of Object.keys(mod)) if (all[name] === undefined) unreachable.push(`ts/ops/${m}: ${name}`);
  }
  expect(unreachable).toEqual([]);
});

test("ts/reference/ is only index.ts, 'mlx-native/reference': the ops index re-exported", async () => {
  const stray = readdirSync(join(ROOT, 'ts', 'reference')).filter((f) => f !== 'index.ts')
    .map((f) => `ts/reference/${f}: a reference goes at the end of ts/ops/<family>.ts, after '${REFERENCE_SECTION}'`);
  expect(stray).toEqual([]);
  const reference = (await import(join(ROOT, 'ts', 'reference', 'index.ts'))) as Record<string, unknown>;
  const ops = (await import(join(ROOT, 'ts', 'ops', 'index.ts'))) as Record<string, unknown>;
  expect(Object.keys(reference).sort()).toEqual(Object.keys(ops).sort());
  expect(Object.keys(reference).filter((name) => name.endsWith('Ref')).length).toBeGreaterThan(50);
});

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
