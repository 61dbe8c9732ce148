// Platform packages and builds from source, as an installed package sees them:
// the loader takes the libraries of @mlx-native/<platform>-<arch> from its
// file imports, else a build in the per-user directory keyed by version
// (which reinstalling does not delete), and says what it tried; build-emu.sh
// refuses a compiler the emulator cannot run kernels with.
import { afterAll, describe, expect, test } from 'bun:test';
import { spawnSync } from 'node:child_process';
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VERSION } from '../ts/version.ts';
import { ROOT, makeConsumerApp, packedFiles } from './consumer.ts';
import { backendAbsence } from './helpers.ts';

const npm = spawnSync('npm', ['--version']).status === 0;
const linuxX64 = process.platform === 'linux' && process.arch === 'x64';
const gxx = spawnSync('g++', ['--version']).status === 0;

function env(extra: Record<string, string>): Record<string, string> {
  const e: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('MLX_NATIVE_')) e[k] = v;
  return { ...e, ...extra };
}

/** Runs TypeScript in the app directory; stdout + stderr. */
function runIn(dir: string, code: string, extra: Record<string, string> = {}): string {
  const r = spawnSync(process.execPath, ['-e', code], { cwd: dir, env: env(extra), encoding: 'utf8' });
  return r.stdout + r.stderr;
}

test.if(gxx)('build-emu.sh refuses a compiler that is not clang, saying why', () => {
  const out = mkdtempSync(join(tmpdir(), 'mlxn-gxx-'));
  try {
    const r = spawnSync('bash', [join(ROOT, 'scripts', 'build-emu.sh')], { env: env({ CXX: 'g++', MLX_NATIVE_BUILD_DIR: out }), encoding: 'utf8' });
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('build-emu: g++ is not clang');
    expect(r.stderr).toContain('apt-get install clang-19');
    expect(existsSync(join(out, 'emu', 'libmlx_native_emu.so'))).toBe(false);
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});

describe.if(npm && linuxX64)('installed package', () => {
  let app = '';
  const dir = (): string => (app ||= makeConsumerApp(packedFiles()));
  afterAll(() => {
    if (app !== '') rmSync(app, { recursive: true, force: true });
  });

  test('without a platform package or a build: DeviceNotFound names what was tried and the script that builds into the per-user directory', () => {
    const cache = join(dir(), 'cache');
    const out = runIn(dir(), `import { loadBackend } from './node_modules/mlx-native/ts/native.ts'; try { loadBackend('cuda'); } catch (e) { console.log(e.message); }`, { XDG_CACHE_HOME: cache });
    expect(out).toContain('@mlx-native/linux-x64: not installed');
    expect(out).toContain(`${cache}/mlx-native/${VERSION}/cuda/libmlx_native_cuda.so: not found`);
    expect(out).toContain(`bash ${dir()}/node_modules/mlx-native/scripts/build-cuda.sh`);
    expect(out).toContain(`writes ${cache}/mlx-native/${VERSION}/cuda`);
  });

  test('a build from source goes to the per-user directory keyed by version, which reinstalling keeps; one writable by others is refused', () => {
    const cache = join(dir(), 'cache');
    const r = spawnSync('bash', [join(dir(), 'node_modules', 'mlx-native', 'scripts', 'build-cuda.sh')], { env: env({ XDG_CACHE_HOME: cache }), encoding: 'utf8' });
    expect(r.status).toBe(0);
    const lib = join(cache, 'mlx-native', VERSION, 'cuda', 'libmlx_native_cuda.so');
    expect(existsSync(lib)).toBe(true);
    expect(existsSync(join(dir(), 'node_modules', 'mlx-native', 'build'))).toBe(false);
    // Reinstall: the package directory replaced.
    rmSync(join(dir(), 'node_modules', 'mlx-native'), { recursive: true });
    for (const f of packedFiles()) {
      mkdirSync(join(dir(), 'node_modules', 'mlx-native', f, '..'), { recursive: true });
      cpSync(join(ROOT, f), join(dir(), 'node_modules', 'mlx-native', f));
    }
    const load = `import { loadBackend } from './node_modules/mlx-native/ts/native.ts'; try { console.log('loaded ' + loadBackend('cuda').path); } catch (e) { console.log(e.message); }`;
    expect(runIn(dir(), load, { XDG_CACHE_HOME: cache })).toContain(`loaded ${lib}`);
    chmodSync(join(lib, '..'), 0o777);
    try {
      expect(runIn(dir(), load, { XDG_CACHE_HOME: cache })).toContain(`${lib}: not loaded: ${join(lib, '..')} is writable by group or others`);
    } finally {
      chmodSync(join(lib, '..'), 0o755);
    }
  }, 120_000);

  test.if(backendAbsence('emu') === null)('the platform package\'s libraries are found through its file imports, also embedded by bun build --compile', () => {
    const pkg = join(dir(), 'node_modules', '@mlx-native', 'linux-x64');
    mkdirSync(pkg, { recursive: true });
    for (const f of ['package.json', 'index.js', 'index.d.ts']) cpSync(join(ROOT, 'npm', 'linux-x64', f), join(pkg, f));
    cpSync(join(ROOT, 'build', 'emu', 'libmlx_native_emu.so'), join(pkg, 'libmlx_native_emu.so'));
    cpSync(join(ROOT, 'build', 'cuda', 'libmlx_native_cuda.so'), join(pkg, 'libmlx_native_cuda.so'));
    const code = `import { Device } from 'mlx-native'; using d = Device.open({ backend: 'emu' }); console.log('emu from ' + d.libraryPath);`;
    const cache = { XDG_CACHE_HOME: join(dir(), 'cache') };
    expect(runIn(dir(), code, cache)).toContain(`emu from ${pkg}/libmlx_native_emu.so`);
    // Compiled into one executable, which runs with node_modules gone: the library is embedded.
    writeFileSync(join(dir(), 'open.ts'), code);
    const build = spawnSync(process.execPath, ['build', '--compile', 'open.ts', '--outfile', 'open-exe'], { cwd: dir(), env: env({}), encoding: 'utf8' });
    expect(build.status).toBe(0);
    renameSync(join(dir(), 'node_modules'), join(dir(), 'node_modules.away'));
    try {
      const r = spawnSync(join(dir(), 'open-exe'), [], { cwd: dir(), env: env(cache), encoding: 'utf8' });
      expect(r.stdout).toContain('emu from /$bunfs/');
    } finally {
      renameSync(join(dir(), 'node_modules.away'), join(dir(), 'node_modules'));
      rmSync(join(dir(), 'open-exe'), { force: true });
    }
    rmSync(pkg, { recursive: true });
  }, 120_000);
});
