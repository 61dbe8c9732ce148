// The package surface: every export path exists, and the ops and reference
// indexes re-export every family module, so a new family cannot be left out
// of 'mlx-native/ops' or 'mlx-native/reference'.
import { describe, expect, test } from 'bun:test';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const ROOT = join(import.meta.dir, '..');
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { exports: Record<string, string> };

describe('package', () => {
  test('every export path points at a file', () => {
    expect(Object.keys(pkg.exports).sort()).toEqual(['.', './ops', './reference']);
    for (const target of Object.values(pkg.exports)) expect(existsSync(join(ROOT, target))).toBe(true);
  });

  for (const dir of ['ops', 'reference']) {
    test(`ts/${dir}/index.ts re-exports every family module, and each module's exports are reachable`, async () => {
      const modules = readdirSync(join(ROOT, 'ts', dir)).filter((f) => f.endsWith('.ts') && f !== 'index.ts');
      expect(modules.length).toBeGreaterThan(0);
      const index = readFileSync(join(ROOT, 'ts', dir, 'index.ts'), 'utf8');
      const all = (await import(join(ROOT, 'ts', dir, 'index.ts'))) as Record<string, unknown>;
      for (const m of modules) {
        expect(index).toContain(`export * from './${m}';`);
        const mod = (await import(join(ROOT, 'ts', dir, m))) as Record<string, unknown>;
        for (const name of Object.keys(mod)) expect(all[name]).toBeDefined();
      }
    });
  }
});
