// A consumer app of the package as npm would install it: the files `npm pack`
// lists, copied into <dir>/node_modules/mlx-native, and the README's "Use"
// examples as its sources. Shared by tests/consumer-types.test.ts; the full
// install (tarball, bun add, run, bun build --compile) is scripts/install-test.sh.
import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

export const ROOT = join(import.meta.dir, '..');

/** The ```ts blocks of the README's "## Use" section, in order. */
export function readmeUseExamples(): string[] {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const start = readme.indexOf('\n## Use\n');
  const end = readme.indexOf('\n## ', start + 1);
  if (start < 0) throw new Error('README.md has no "## Use" section');
  return [...readme.slice(start, end).matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);
}

/** The files `npm pack` would put in the tarball (types/ built first). */
export function packedFiles(): string[] {
  const b = spawnSync('bash', [join(ROOT, 'scripts', 'build-types.sh')], { encoding: 'utf8' });
  if (b.status !== 0) throw new Error(`build-types failed: ${b.stdout}${b.stderr}`);
  const r = spawnSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: ROOT, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`npm pack --dry-run failed: ${r.stderr}`);
  return (JSON.parse(r.stdout) as { files: { path: string }[] }[])[0]!.files.map((f) => f.path);
}

/** A temporary app with the package installed from its packed files and Bun's types linked from this checkout. */
export function makeConsumerApp(files: string[]): string {
  const dir = mkdtempSync(join(tmpdir(), 'mlxn-consumer-'));
  const pkg = join(dir, 'node_modules', 'mlx-native');
  for (const f of files) {
    mkdirSync(dirname(join(pkg, f)), { recursive: true });
    cpSync(join(ROOT, f), join(pkg, f));
  }
  mkdirSync(join(dir, 'node_modules', '@types'), { recursive: true });
  for (const dep of ['@types/bun', '@types/node', 'bun-types', 'undici-types']) {
    symlinkSync(join(ROOT, 'node_modules', dep), join(dir, 'node_modules', dep));
  }
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'app', type: 'module', private: true }));
  return dir;
}

/** Consumer compiler settings the declarations must pass under. */
export const CONSUMER_TSCONFIGS: Record<string, object> = {
  // What `bun init` writes (TypeScript's strict family, skipLibCheck on).
  'bun-init': {
    lib: ['ESNext'], target: 'ESNext', module: 'Preserve', moduleDetection: 'force', moduleResolution: 'bundler',
    allowImportingTsExtensions: true, verbatimModuleSyntax: true, noEmit: true, strict: true, skipLibCheck: true,
    noFallthroughCasesInSwitch: true, noUncheckedIndexedAccess: true, noImplicitOverride: true, types: ['bun'],
  },
  // Every strict flag, libraries checked too.
  strictest: {
    lib: ['ESNext'], target: 'ESNext', module: 'Preserve', moduleResolution: 'bundler', noEmit: true, strict: true,
    skipLibCheck: false, noUncheckedIndexedAccess: true, noImplicitOverride: true, noPropertyAccessFromIndexSignature: true,
    exactOptionalPropertyTypes: true, noImplicitReturns: true, noUnusedLocals: true, noUnusedParameters: true,
    noFallthroughCasesInSwitch: true, verbatimModuleSyntax: true, isolatedModules: true,
  },
  // Node's ESM resolution, and nothing but the compiler's defaults.
  nodenext: { module: 'nodenext', strict: true, skipLibCheck: false, noPropertyAccessFromIndexSignature: true, noEmit: true },
  defaults: { noEmit: true },
  // An older library and target, libraries checked.
  es2022: { lib: ['ES2022'], target: 'ES2022', module: 'ESNext', moduleResolution: 'bundler', strict: true, skipLibCheck: false, noEmit: true },
};

/** Writes tsconfig.<name>.json over `sources` and runs tsc: its output, '' when clean. */
export function typecheck(dir: string, name: string, sources: string[]): { status: number | null; output: string } {
  writeFileSync(join(dir, `tsconfig.${name}.json`), JSON.stringify({ compilerOptions: CONSUMER_TSCONFIGS[name], files: sources }));
  const r = spawnSync(join(ROOT, 'node_modules', '.bin', 'tsc'), ['-p', `tsconfig.${name}.json`], { cwd: dir, encoding: 'utf8' });
  return { status: r.status, output: `${r.stdout}${r.stderr}` };
}
