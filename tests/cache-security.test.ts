// The emulator's kernel cache cannot be poisoned (native/common/private_cache.h):
// it is used only when private, never under a shared /tmp name; entries are
// checked against their key and the SHA-256 of their contents before loading;
// a corrupt, truncated or linked entry is rebuilt, never loaded; compile names
// cannot inject lines into the generated C++.
//
// Each step runs in its own process (the cache directory is chosen once per
// process). A planted shared object writes a marker file from its constructor:
// the marker must never appear.

import { afterAll, beforeAll, describe, expect, test } from 'bun:test';
import { spawnSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { backendAbsence } from './helpers.ts';

const absent = backendAbsence('emu');
const ROOT = join(import.meta.dir, '..');

describe.if(absent === null)('emu kernel cache: private and verified', () => {
  const dir = mkdtempSync(join(tmpdir(), 'mlxn-cache-security-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const marker = join(dir, 'PLANTED-CODE-RAN');

  const script = join(dir, 'compile.ts');
  writeFileSync(script, `
import { Device } from ${JSON.stringify(join(ROOT, 'ts', 'index.ts'))};
const device = Device.open({ backend: 'emu' });
const name = process.env.COMPILE_NAME ?? 'cache_security.metal';
try {
  const lib = device.compile(\`#include <metal_stdlib>
using namespace metal;
kernel void thrice(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = 3.0f * x[i]; }
\`, { name });
  const x = device.upload('f32', [4], [1, 2, 3, 4]);
  const enc = device.encoder();
  enc.dispatch(lib.pipeline('thrice'), { buffers: [x] }, [1, 1, 1], [4, 1, 1]);
  enc.commitAndWait();
  console.log(JSON.stringify(Array.from(x.read() as Float32Array)));
} catch (e) {
  console.log('ERROR ' + (e as Error).message.split('\\n')[0]);
}
device.close();
`);

  /** Runs the compile step; returns its output line, stderr and exit status. */
  function run(env: Record<string, string | undefined>): { out: string; err: string; status: number | null } {
    const full: Record<string, string> = {};
    for (const [k, v] of Object.entries({ ...process.env, MLX_NATIVE_BACKEND: 'emu', TMPDIR: dir, ...env })) {
      if (v !== undefined) full[k] = v;
    }
    const r = spawnSync('bun', [script], { encoding: 'utf8', env: full });
    return { out: r.stdout.trim(), err: r.stderr, status: r.status };
  }

  // A shared object whose constructor writes the marker (built before the tests run).
  const evil = join(dir, 'evil.so');
  let evilBytes = Buffer.alloc(0);
  beforeAll(() => {
    const cxx = spawnSync('bash', ['-c', 'command -v clang++-19 || command -v clang++'], { encoding: 'utf8' }).stdout.trim();
    writeFileSync(join(dir, 'evil.cpp'), `#include <cstdio>
__attribute__((constructor)) static void planted() { if (FILE* f = std::fopen(${JSON.stringify(marker)}, "w")) std::fclose(f); }
extern "C" unsigned mlxn_emu_kernel_abi(void) { return 0; }
`);
    const built = spawnSync(cxx, ['-shared', '-fPIC', '-o', evil, join(dir, 'evil.cpp')], { encoding: 'utf8' });
    if (built.status !== 0) throw new Error(`building the planted library failed: ${built.stderr}`);
    evilBytes = readFileSync(evil);
  });

  /** An entry of the cache's format holding `payload` under `key`, with a correct digest. */
  function entry(key: Buffer, payload: Buffer, digest: Uint8Array = new Bun.CryptoHasher('sha256').update(payload).digest()): Buffer {
    const u64 = (n: number) => {
      const b = Buffer.alloc(8);
      b.writeBigUInt64LE(BigInt(n));
      return b;
    };
    return Buffer.concat([Buffer.from('mlx-native cache 2\n'), u64(key.length), key, u64(payload.length), Buffer.from(digest), payload]);
  }
  function keyOf(file: Buffer): Buffer {
    const m = 'mlx-native cache 2\n'.length;
    return file.subarray(m + 8, m + 8 + Number(file.readBigUInt64LE(m)));
  }

  const GOOD = '[3,6,9,12]';
  const MAGIC = 'mlx-native cache 2\n';
  const entriesOf = (d: string) => readdirSync(d).filter((f) => f.endsWith('.kernels') || f.endsWith('.so')).sort();

  /**
   * A private cache folder with this source compiled into it once (the key
   * depends on the folder: it names the shim headers' copy there).
   */
  function primed(name: string): { dir: string; file: string } {
    const d = join(dir, name);
    mkdirSync(d, { mode: 0o700 });
    expect(run({ MLX_NATIVE_EMU_CACHE: d }).out).toBe(GOOD);
    const files = entriesOf(d);
    expect(files.length).toBe(1);
    return { dir: d, file: files[0]! };
  }

  /**
   * Replaces the compiled kernels of `file` by the planted library: the whole
   * file for a plain shared object, the payload (with a correct digest, or
   * `digest`) for an entry of the checked format.
   */
  function plant(d: string, file: string, digest?: Uint8Array): void {
    const path = join(d, file);
    if (file.endsWith('.so')) {
      writeFileSync(path, evilBytes);
      return;
    }
    const f = readFileSync(path);
    expect(f.subarray(0, MAGIC.length).toString()).toBe(MAGIC);
    writeFileSync(path, entry(keyOf(f), evilBytes, digest));
  }

  test('a private cache is made 0700, its entries 0600, and reused', () => {
    const { dir: d, file } = primed('good');
    expect(statSync(d).mode & 0o777).toBe(0o700);
    expect(statSync(join(d, file)).mode & 0o777).toBe(0o600);
    expect(run({ MLX_NATIVE_EMU_CACHE: d }).out).toBe(GOOD);
    expect(entriesOf(d)).toEqual([file]);
  });

  test('a cache folder others can write is not used: a library planted there never runs', () => {
    const { dir: d, file } = primed('open');
    chmodSync(d, 0o777);
    plant(d, file);
    rmSync(marker, { force: true });
    const r = run({ MLX_NATIVE_EMU_CACHE: d });
    expect(r.out).toBe(GOOD);
    expect(existsSync(marker)).toBe(false);
    expect(r.err).toContain('not using the kernel cache');
    // Control: the same planted entry in a private folder is taken (only this
    // user could have written it), so the folder check alone kept it out.
    if (file.endsWith('.kernels')) {
      chmodSync(d, 0o700);
      run({ MLX_NATIVE_EMU_CACHE: d });
      expect(existsSync(marker)).toBe(true);
      rmSync(marker, { force: true });
    }
  });

  test.if(process.getuid?.() === 0)('a cache folder owned by another user is not used', () => {
    const { dir: d, file } = primed('other-owner');
    plant(d, file);
    chownSync(d, 65534, 65534);
    rmSync(marker, { force: true });
    const r = run({ MLX_NATIVE_EMU_CACHE: d });
    expect(r.out).toBe(GOOD);
    expect(existsSync(marker)).toBe(false);
    expect(r.err).toContain('belongs to another user');
  });

  test('a cache folder that is a symbolic link is not used, nor written through', () => {
    const { dir: d, file } = primed('link-target');
    plant(d, file);
    const planted = readFileSync(join(d, file));
    const link = join(dir, 'link-cache');
    symlinkSync(d, link);
    rmSync(marker, { force: true });
    const r = run({ MLX_NATIVE_EMU_CACHE: link });
    expect(r.out).toBe(GOOD);
    expect(existsSync(marker)).toBe(false);
    expect(entriesOf(d)).toEqual([file]);
    expect(readFileSync(join(d, file)).equals(planted)).toBe(true);
  });

  test('a HOME that does not exist and cannot be made: compiles still work', () => {
    const file = join(dir, 'a-file');
    writeFileSync(file, '');
    const r = run({ HOME: join(file, 'home'), XDG_CACHE_HOME: undefined, MLX_NATIVE_EMU_CACHE: undefined });
    expect(r.status).toBe(0);
    expect(r.out).toBe(GOOD);
  });

  test('links planted at the temporary names the cache used to write through are not followed', () => {
    // The cache used to write "<key>.cpp.tmp.<pid>.<n>" and "<key>.so.tmp.<pid>.<n>"
    // with O_TRUNC: the shell plants links there for its own pid, then execs
    // bun (the same pid). The victim keeps its contents.
    const { dir: d, file } = primed('tmp-links');
    const key = file.replace(/\.(kernels|so)$/, '');
    rmSync(join(d, file));
    const victim = join(dir, 'tmp-victim');
    writeFileSync(victim, 'victim\n');
    const plantLinks = `for n in 0 1 2 3 4 5 6 7 8 9; do for s in cpp so kernels; do ln -s ${JSON.stringify(victim)} ${JSON.stringify(d)}/${key}.$s.tmp.$$.$n; done; done; exec bun ${JSON.stringify(script)}`;
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries({ ...process.env, MLX_NATIVE_BACKEND: 'emu', MLX_NATIVE_EMU_CACHE: d })) if (v !== undefined) env[k] = v;
    const r = spawnSync('bash', ['-c', plantLinks], { encoding: 'utf8', env });
    expect(r.stdout.trim()).toBe(GOOD);
    expect(readFileSync(victim, 'utf8')).toBe('victim\n');
  });

  test('an entry whose contents do not match its digest is rebuilt, not loaded', () => {
    const { dir: d, file } = primed('altered');
    // The planted bytes under the digest of the real kernels.
    let digest: Uint8Array | undefined;
    if (file.endsWith('.kernels')) {
      const f = readFileSync(join(d, file));
      const at = MAGIC.length + 8 + keyOf(f).length + 8;
      digest = f.subarray(at, at + 32);
    }
    plant(d, file, digest);
    rmSync(marker, { force: true });
    expect(run({ MLX_NATIVE_EMU_CACHE: d }).out).toBe(GOOD);
    expect(existsSync(marker)).toBe(false);
    // Rebuilt: the entry holds the real kernels again.
    expect(readFileSync(join(d, file)).includes(evilBytes.subarray(0, 64))).toBe(false);
  });

  test('a truncated entry is rebuilt (no SIGBUS, no load error)', () => {
    const { dir: d, file } = primed('truncated');
    truncateSync(join(d, file), 3000);
    const r = run({ MLX_NATIVE_EMU_CACHE: d });
    expect(r.status).toBe(0);
    expect(r.out).toBe(GOOD);
  });

  test('a link planted at the entry name is not followed, and its target is untouched', () => {
    const { dir: d, file } = primed('linked');
    const victim = join(dir, 'victim');
    writeFileSync(victim, 'untouched');
    rmSync(join(d, file));
    symlinkSync(file.endsWith('.so') ? evil : victim, join(d, file));
    rmSync(marker, { force: true });
    expect(run({ MLX_NATIVE_EMU_CACHE: d }).out).toBe(GOOD);
    expect(existsSync(marker)).toBe(false);
    expect(readFileSync(victim, 'utf8')).toBe('untouched');
  });

  test('with HOME and XDG_CACHE_HOME unset, nothing is made or read under a shared /tmp name', () => {
    const uid = process.getuid?.() ?? 0;
    // The name the emulator used to fall back to (a leftover of it is removed first).
    const shared = `/tmp/mlx-native-emu-${uid}`;
    rmSync(shared, { recursive: true, force: true });
    const r = run({ HOME: undefined, XDG_CACHE_HOME: undefined, MLX_NATIVE_EMU_CACHE: undefined });
    expect(r.out).toBe(GOOD);
    expect(existsSync(shared)).toBe(false);
  });

  test('a compile name with a newline or other control character is refused, never pasted into the C++', () => {
    for (const name of ['x.metal"\n#error injected\n//', 'x.metal\r#error injected', 'tab\there.metal']) {
      const r = run({ MLX_NATIVE_EMU_CACHE: join(dir, 'good'), COMPILE_NAME: name });
      expect(r.out).toStartWith('ERROR ');
      expect(r.out).toContain('without control characters');
      expect(r.out).not.toContain('error: injected'); // what #error would print
    }
  });
});
