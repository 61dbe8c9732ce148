// The package surface: every export path exists (the ops and reference
// indexes holding every family module: tests/contract-families.test.ts).
import { describe, expect, test } from 'bun:test';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { VERSION } from '../ts/version.ts';

const ROOT = join(import.meta.dir, '..');
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { exports: Record<string, { types: string; default: string }> };

describe('package', () => {
  test('every export path points at a file', () => {
    expect(Object.keys(pkg.exports).sort()).toEqual(['.', './models', './ops', './reference', './testing', './weights']);
    for (const target of Object.values(pkg.exports)) {
      expect(existsSync(join(ROOT, target.default))).toBe(true);
      // The declarations (built by scripts/build-types.sh at pack time) mirror the sources.
      expect(target.types).toBe(target.default.replace(/^\.\/ts\//, './types/').replace(/\.ts$/, '.d.ts'));
      expect(Object.keys(target)).toEqual(['types', 'default']); // "types" must come first to be used
    }
  });

  const npm = spawnSync('npm', ['--version'], { encoding: 'utf8' }).status === 0;
  test.if(npm)('the tarball: LICENSE, the docs the README links, every file the sources import; no tests, logs or bench results', () => {
    const r = spawnSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: ROOT, encoding: 'utf8' });
    expect(r.status).toBe(0);
    const files = new Set((JSON.parse(r.stdout) as { files: { path: string }[] }[])[0]!.files.map((f) => f.path));
    expect(files.has('LICENSE')).toBe(true);
    expect(readFileSync(join(ROOT, 'LICENSE'), 'utf8')).toStartWith('MIT License');
    expect((pkg as unknown as { license: string }).license).toBe('MIT');
    // Local links of the README (bench/ is the repository's, not the package's).
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    const links = [...readme.matchAll(/\]\(([^)#:]+)\)/g)].map((m) => m[1]!).filter((l) => !l.startsWith('bench/'));
    expect(links).toContain('docs/internals.md');
    for (const l of links) expect({ link: l, shipped: files.has(l) }).toEqual({ link: l, shipped: true });
    // Every relative import of a shipped TypeScript file (shader text imports included) is shipped.
    for (const f of files) {
      if (!f.endsWith('.ts') || f.endsWith('.d.ts')) continue;
      const code = readFileSync(join(ROOT, f), 'utf8').replace(/^\s*(\/\/|\*|\/\*).*$/gm, ''); // comments hold examples
      for (const m of code.matchAll(/from '(\.{1,2}\/[^']+)'/g)) {
        const target = join(f, '..', m[1]!);
        expect({ from: f, target, shipped: files.has(target) }).toEqual({ from: f, target, shipped: true });
      }
    }
    const extra = [...files].filter((f) => /(^|\/)tests?\/|\.log$|^bench\/|\.(o|so|dylib)$/.test(f));
    expect(extra).toEqual([]);
  });

  test('platform packages: one version everywhere, os/cpu set, no install scripts, their libraries exported as file imports', () => {
    const main = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string; optionalDependencies: Record<string, string> };
    expect(VERSION).toBe(main.version);
    const platforms = readdirSync(join(ROOT, 'npm')).sort();
    expect(platforms).toEqual(['darwin-arm64', 'linux-x64']);
    for (const p of platforms) {
      const dir = join(ROOT, 'npm', p);
      const meta = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as Record<string, unknown>;
      const [os, cpu] = p.split('-');
      expect({ name: meta['name'], version: meta['version'], os: meta['os'], cpu: meta['cpu'], scripts: meta['scripts'] }).toEqual({
        name: `@mlx-native/${p}`, version: VERSION, os: [os], cpu: [cpu], scripts: undefined,
      });
      expect(main.optionalDependencies[`@mlx-native/${p}`]).toBe(VERSION);
      const index = readFileSync(join(dir, 'index.js'), 'utf8');
      const libs = [...index.matchAll(/^import (\w+) from '\.\/([^']+)' with \{ type: 'file' \};$/gm)].map((m) => m[2]!);
      expect(libs.length).toBeGreaterThan(0);
      for (const lib of libs) expect(meta['files']).toContain(lib);
      expect(meta['files']).toContain('LICENSE');
      expect(existsSync(join(dir, 'LICENSE'))).toBe(true);
    }
    // The loader names each platform package literally, so that bun build --compile embeds it.
    const loader = readFileSync(join(ROOT, 'ts', 'native.ts'), 'utf8');
    for (const p of platforms) expect(loader).toContain(`require('@mlx-native/${p}')`);
  });
});
