// The bun:ffi binding of native/include/mlx_native.h, and the loader that
// finds a backend library.
//
// SYMBOLS is the one table of every function in the header
// (tests/contract-ts.test.ts holds it against the header). Type mapping:
// handles and other pointers -> 'ptr'; const char* arguments -> 'cstring'
// (bun passes a JS string as NUL-terminated UTF-8); uint64_t -> 'u64', or
// 'u64_fast' for returned sizes so they come back as numbers; mlxn_status and
// int32_t -> 'i32'.

import { dlopen, FFIType as T, type Library, type Pointer } from 'bun:ffi';
import { existsSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { MlxError, statusKind } from './errors.ts';
import { VERSION } from './version.ts';

export const ABI_VERSION = 4;

export const SYMBOLS = {
  mlxn_abi_version: { args: [], returns: T.u32 },
  mlxn_backend_name: { args: [], returns: T.cstring },
  mlxn_device_count: { args: [], returns: T.u32 },

  mlxn_device_open: { args: [T.u32, T.ptr, T.ptr, T.u64], returns: T.i32 },
  mlxn_device_close: { args: [T.ptr], returns: T.void },
  mlxn_device_name: { args: [T.ptr, T.ptr, T.u64], returns: T.u64_fast },
  mlxn_device_limit: { args: [T.ptr, T.u32], returns: T.u64_fast },
  mlxn_device_set_option: { args: [T.ptr, T.cstring, T.cstring, T.ptr, T.u64], returns: T.i32 },

  mlxn_buffer_alloc: { args: [T.ptr, T.u64, T.ptr, T.ptr, T.u64], returns: T.i32 },
  mlxn_buffer_release: { args: [T.ptr], returns: T.void },
  mlxn_buffer_length: { args: [T.ptr], returns: T.u64_fast },
  mlxn_buffer_host_ptr: { args: [T.ptr], returns: T.ptr },
  mlxn_buffer_write: { args: [T.ptr, T.u64, T.ptr, T.u64, T.ptr, T.u64], returns: T.i32 },
  mlxn_buffer_read: { args: [T.ptr, T.u64, T.ptr, T.u64, T.ptr, T.u64], returns: T.i32 },

  mlxn_library_compile: {
    args: [T.ptr, T.ptr, T.u64, T.cstring, T.ptr, T.u32, T.ptr, T.ptr, T.u64],
    returns: T.i32,
  },
  mlxn_library_release: { args: [T.ptr], returns: T.void },
  mlxn_library_kernel_names: { args: [T.ptr, T.ptr, T.u64], returns: T.u64_fast },
  mlxn_library_compile_start: {
    args: [T.ptr, T.ptr, T.u64, T.cstring, T.ptr, T.u32, T.ptr, T.ptr, T.u64],
    returns: T.i32,
  },
  mlxn_compile_job_done: { args: [T.ptr], returns: T.i32 },
  mlxn_compile_job_finish: { args: [T.ptr, T.ptr, T.ptr, T.u64], returns: T.i32 },

  mlxn_pipeline_create: { args: [T.ptr, T.cstring, T.ptr, T.ptr, T.u64], returns: T.i32 },
  mlxn_pipeline_release: { args: [T.ptr], returns: T.void },
  mlxn_pipeline_max_threads: { args: [T.ptr], returns: T.u32 },
  mlxn_pipeline_static_threadgroup_memory: { args: [T.ptr], returns: T.u64_fast },

  mlxn_encoder_create: { args: [T.ptr, T.ptr, T.ptr, T.u64], returns: T.i32 },
  mlxn_encoder_release: { args: [T.ptr], returns: T.void },
  mlxn_encoder_dispatch: { args: [T.ptr, T.ptr, T.u64, T.ptr, T.u64], returns: T.i32 },
  mlxn_encoder_barrier: { args: [T.ptr, T.ptr, T.u64], returns: T.i32 },
  mlxn_encoder_commit: { args: [T.ptr, T.ptr, T.u64], returns: T.i32 },
  mlxn_encoder_flush: { args: [T.ptr, T.ptr, T.u64], returns: T.i32 },
  mlxn_encoder_wait: { args: [T.ptr, T.ptr, T.u64], returns: T.i32 },
  mlxn_encoder_status: { args: [T.ptr], returns: T.i32 },
  mlxn_encoder_gpu_time_ns: { args: [T.ptr], returns: T.u64_fast },
  mlxn_encoder_create_replayable: { args: [T.ptr, T.ptr, T.ptr, T.u64], returns: T.i32 },
  mlxn_encoder_replay: { args: [T.ptr, T.ptr, T.u64], returns: T.i32 },
  mlxn_encoder_patch_bytes: { args: [T.ptr, T.u64, T.u32, T.ptr, T.u64, T.ptr, T.u64], returns: T.i32 },
} as const;

export type Symbols = Library<typeof SYMBOLS>['symbols'];

// Constants of the header that the TypeScript side uses.
export const MLXN_OK = 0;
export const LIMIT = {
  maxThreadsPerThreadgroup: 0,
  maxThreadgroupMemory: 1,
  simdWidth: 2,
  maxBufferLength: 3,
  sharedMemory: 4,
  computeCapability: 5,
  multiprocessors: 6,
} as const;
export const CONST_TYPE = { bool: 1, i32: 2, u32: 3, f32: 4, f16: 5, i16: 6, u16: 7 } as const;
export const ENCODER_STATE = { recording: 0, pending: 1, completed: 2, error: 3 } as const;
// The dispatch block's layout: each constant is the header's MLXN_<name>
// (tests/dispatch-block.test.ts compiles the header and compares).
export const BIND = { buffer: 1, bytes: 2, threadgroupMemory: 3, tensorMap: 4 } as const;
// A tensor map's descriptor (MLXN_BIND_TENSOR_MAP's payload): its length, the
// byte offsets of its fields, the dtype codes, the most dimensions.
export const TMAP_DESC_BYTES = 128;
export const TMAP_MAX_RANK = 5;
export const TMAP_OFFSET = 0; // u64
export const TMAP_DTYPE = 8; // u32
export const TMAP_RANK = 12; // u32
export const TMAP_DIMS = 16; // u64 x 5
export const TMAP_STRIDES = 56; // u64 x 4
export const TMAP_BOX = 88; // u32 x 5
export const TMAP_SWIZZLE = 108; // u32
export const TMAP_L2 = 112; // u32
export const TMAP_RESERVED = 116; // 12 bytes
export const TMAP_DTYPE_CODE = { u8: 1, u16: 2, u32: 3, f16: 4, bf16: 5, f32: 6 } as const;
export const DISPATCH_HEADER_BYTES = 48;
export const DISPATCH_BINDING_BYTES = 24;
export const MAX_BINDINGS = 31;
// Byte offsets of the header's fields ...
export const BLOCK_PIPELINE = 0; // u64
export const BLOCK_GRID = 8; // u32 x, y, z
export const BLOCK_THREADS = 20; // u32 x, y, z
export const BLOCK_BINDING_COUNT = 32; // u32
export const BLOCK_PAYLOAD_BYTES = 36; // u32
export const BLOCK_RESERVED = 40; // u64
// ... and of a binding record's.
export const RECORD_KIND = 0; // u32
export const RECORD_INDEX = 4; // u32
export const RECORD_A = 8; // u64
export const RECORD_B = 16; // u64

export type BackendName = 'metal' | 'cuda' | 'emu';
export const BACKENDS: readonly BackendName[] = ['metal', 'cuda', 'emu'];

export function isBackendName(x: unknown): x is BackendName {
  return x === 'metal' || x === 'cuda' || x === 'emu';
}

/** A loaded backend library. */
export interface NativeLib {
  readonly backend: BackendName;
  readonly path: string;
  readonly sym: Symbols;
}

// ---- messages and out-slots shared by every call (one host thread) ----

const MSG_CAP = 16384;
/** The message buffer handed to every fallible call. */
export const msgBuf = new Uint8Array(MSG_CAP);
export const msgCap = MSG_CAP;
/** The out-parameter of calls that create a handle. */
export const outSlot = new BigUint64Array(1);

const decoder = new TextDecoder();

export function cString(bytes: Uint8Array): string {
  const end = bytes.indexOf(0);
  return decoder.decode(end < 0 ? bytes : bytes.subarray(0, end));
}

/** The handle written to outSlot by the last create call. */
export function takeHandle(): Pointer {
  const h = Number(outSlot[0]);
  outSlot[0] = 0n;
  return h as Pointer;
}

/** Throws the MlxError of a non-zero status, with the native message after `context`. */
export function check(status: number, context: string): void {
  if (status !== MLXN_OK) throw statusError(status, context);
}

export function statusError(status: number, context: string): MlxError {
  const text = cString(msgBuf);
  msgBuf[0] = 0;
  return new MlxError(statusKind(status), text.length > 0 ? `${context}: ${text}` : `${context}: status ${status}`);
}

/** Reads a string through a `(out, cap) -> full length` function, growing the buffer as needed. */
export function readString(fill: (out: Uint8Array, cap: number) => number): string {
  let buf = new Uint8Array(256);
  for (;;) {
    const full = fill(buf, buf.length);
    if (full < buf.length) return cString(buf.subarray(0, full + 1));
    buf = new Uint8Array(full + 1);
  }
}

// ---- loader ----

const PACKAGE_ROOT = resolve(import.meta.dir, '..');

export function libraryFileName(backend: BackendName, platform: string = process.platform): string {
  if (backend === 'metal') return 'libMlxNative.dylib';
  return `libmlx_native_${backend}.${platform === 'darwin' ? 'dylib' : 'so'}`;
}

/** The platform package of this machine, e.g. @mlx-native/linux-x64. */
export const PLATFORM_PACKAGE = `@mlx-native/${process.platform}-${process.arch}`;

type PlatformLibraries = { libs: Partial<Record<BackendName, string>> } | { error: string };
let platformCache: PlatformLibraries | null = null;

/**
 * The libraries of the platform package, by backend. Each package's index.js
 * exports them as file imports, and the names here are literal, so that
 * `bun build --compile` embeds the libraries of the package installed when it
 * runs (paths under /$bunfs, which dlopen reads).
 */
function platformLibraries(): PlatformLibraries {
  if (platformCache !== null) return platformCache;
  let mod: { default?: Partial<Record<BackendName, string>> } | null = null;
  try {
    if (process.platform === 'linux' && process.arch === 'x64') mod = require('@mlx-native/linux-x64');
    else if (process.platform === 'darwin' && process.arch === 'arm64') mod = require('@mlx-native/darwin-arm64');
  } catch (e) {
    // Optional: absent wherever it was not installed.
    platformCache = { error: `not installed (${e instanceof Error ? e.message.split('\n')[0] : String(e)})` };
    return platformCache;
  }
  platformCache = mod?.default ? { libs: mod.default } : { error: 'no platform package is built for this platform' };
  return platformCache;
}

/**
 * Where the build scripts of an installed package write, and the loader looks:
 * $XDG_CACHE_HOME/mlx-native/<version>/<backend> (else ~/.cache/...), so that
 * reinstalling the package (which replaces node_modules) keeps the build.
 */
export function userBuildDir(backend: BackendName): string {
  const xdg = process.env['XDG_CACHE_HOME'];
  const base = xdg !== undefined && xdg.startsWith('/') ? xdg : join(homedir(), '.cache');
  return join(base, 'mlx-native', VERSION, backend);
}

/** Why the file must not be loaded from a per-user directory (not ours, or writable by others), or null. */
function notPrivate(path: string): string | null {
  const uid = process.getuid?.();
  for (const p of [path, dirname(path)]) {
    const st = statSync(p);
    if (uid !== undefined && st.uid !== uid) return `${p} is owned by uid ${st.uid}, not this user (${uid})`;
    if ((st.mode & 0o022) !== 0) return `${p} is writable by group or others (mode ${(st.mode & 0o777).toString(8)})`;
  }
  return null;
}

const script = (name: string): string => {
  const path = join(PACKAGE_ROOT, 'scripts', name);
  return existsSync(path) ? `\`bash ${path}\`` : `\`bash node_modules/mlx-native/scripts/${name}\` in an app that installed mlx-native (this copy, ${PACKAGE_ROOT}, has no scripts/: bundled?)`;
};
// A checkout builds into build/; an installed package (or a bundle of one) into the per-user directory.
const inCheckout = existsSync(join(PACKAGE_ROOT, 'scripts')) && !PACKAGE_ROOT.split(/[\\/]/).includes('node_modules');
const buildsTo = (b: BackendName): string => (inCheckout ? join(PACKAGE_ROOT, 'build', b) : userBuildDir(b));
const BUILD_HINT: Record<BackendName, string> = {
  emu: `install ${PLATFORM_PACKAGE === '@mlx-native/linux-x64' ? PLATFORM_PACKAGE : 'the platform package of this machine'}, or run ${script('build-emu.sh')} (writes ${buildsTo('emu')}; needs clang++-19: apt-get install clang-19 libclang-rt-19-dev)`,
  cuda: `install @mlx-native/linux-x64, or run ${script('build-cuda.sh')} (writes ${buildsTo('cuda')}), on a Linux machine with an NVIDIA GPU and its driver`,
  metal: `install @mlx-native/darwin-arm64 on an Apple Silicon Mac, or run \`bash scripts/build-metal.sh\` in a checkout of mlx-native`,
};

/**
 * Where a backend's library is looked for, in order (MLX_NATIVE_LIB is handled
 * by loadBackend): the platform package, the per-user build directory, the
 * checkout's build/<backend>/.
 */
export function candidatePaths(backend: BackendName): string[] {
  const file = libraryFileName(backend);
  const paths: string[] = [];
  const platform = platformLibraries();
  const fromPackage = 'libs' in platform ? platform.libs[backend] : undefined;
  // `bun build --target=bun` copies the library next to the bundle and names it relative to it.
  if (fromPackage !== undefined) paths.push(isAbsolute(fromPackage) ? fromPackage : resolve(import.meta.dir, fromPackage));
  paths.push(join(userBuildDir(backend), file));
  paths.push(join(PACKAGE_ROOT, 'build', backend, file));
  return paths;
}

const loaded = new Map<BackendName, NativeLib>();
const failures = new Map<BackendName, MlxError>();

function open(path: string): { lib: NativeLib } | { error: string } {
  let sym: Symbols;
  try {
    sym = dlopen(path, SYMBOLS).symbols;
  } catch (e) {
    return { error: e instanceof Error ? e.message : String(e) };
  }
  const abi = sym.mlxn_abi_version();
  if (abi !== ABI_VERSION) {
    return { error: `ABI version ${abi}, this package needs ${ABI_VERSION}: rebuild the library from this checkout` };
  }
  const name = String(sym.mlxn_backend_name());
  if (!isBackendName(name)) return { error: `backend name "${name}" is not one of ${BACKENDS.join(', ')}` };
  return { lib: { backend: name, path, sym } };
}

/**
 * Loads (once) the library of a backend: the file named by MLX_NATIVE_LIB when
 * that names a library of this backend, else the platform package, else
 * build/<backend>/. Throws MlxError('DeviceNotFound') listing every path tried.
 */
export function loadBackend(backend: BackendName): NativeLib {
  const done = loaded.get(backend);
  if (done) return done;
  const failed = failures.get(backend);
  if (failed) throw failed;

  const tried: string[] = [];
  const override = process.env['MLX_NATIVE_LIB'];
  if (override) {
    const r = existsSync(override) ? open(override) : { error: 'no such file' };
    if ('lib' in r && r.lib.backend === backend) {
      loaded.set(backend, r.lib);
      return r.lib;
    }
    tried.push(`${override} (MLX_NATIVE_LIB): ${'lib' in r ? `a ${r.lib.backend} library, not ${backend}` : r.error}`);
  }
  const platform = platformLibraries();
  if ('error' in platform) tried.push(`${PLATFORM_PACKAGE}: ${platform.error}`);
  const userDir = userBuildDir(backend);
  for (const path of candidatePaths(backend)) {
    if (!existsSync(path)) {
      tried.push(`${path}: not found`);
      continue;
    }
    const unsafe = dirname(path) === userDir ? notPrivate(path) : null;
    if (unsafe !== null) {
      tried.push(`${path}: not loaded: ${unsafe}`);
      continue;
    }
    const r = open(path);
    if ('lib' in r && r.lib.backend === backend) {
      loaded.set(backend, r.lib);
      return r.lib;
    }
    tried.push(`${path}: ${'lib' in r ? `a ${r.lib.backend} library, not ${backend}` : r.error}`);
  }
  const err = new MlxError(
    'DeviceNotFound',
    `no ${backend} backend library could be loaded. Tried:\n  ${tried.join('\n  ')}\nTo fix: ${BUILD_HINT[backend]}, or set MLX_NATIVE_LIB to the library's path.`,
  );
  failures.set(backend, err);
  throw err;
}

/** The backend to use when none is asked for, and why the emulator was the fallback (null when it was not). */
export interface BackendChoice {
  readonly backend: BackendName;
  /** Set when no backend was asked for and no GPU backend opened: what was tried. */
  readonly fallback: string | null;
}

/**
 * The backend to use when none is asked for: MLX_NATIVE_BACKEND, else metal on
 * macOS, then cuda where its library loads and sees a device, else emu.
 */
export function chooseBackend(): BackendName {
  return chooseBackendWhy().backend;
}

export function chooseBackendWhy(): BackendChoice {
  const env = process.env['MLX_NATIVE_BACKEND'];
  if (env) {
    if (!isBackendName(env)) {
      throw new MlxError('InvalidArgument', `MLX_NATIVE_BACKEND must be one of ${BACKENDS.join(', ')} (got ${env})`);
    }
    return { backend: env, fallback: null };
  }
  const override = process.env['MLX_NATIVE_LIB'];
  if (override && existsSync(override)) {
    const r = open(override);
    if ('lib' in r) {
      if (!loaded.has(r.lib.backend)) loaded.set(r.lib.backend, r.lib);
      return { backend: r.lib.backend, fallback: null };
    }
  }
  const order: BackendName[] = process.platform === 'darwin' ? ['metal', 'cuda'] : ['cuda'];
  const why: string[] = [];
  for (const b of order) {
    try {
      const lib = loadBackend(b);
      if (lib.sym.mlxn_device_count() > 0) return { backend: b, fallback: null };
      why.push(`${b}: library loaded from ${lib.path} but it sees no device`);
    } catch {
      // Not present here: fall through to the next candidate.
      why.push(`${b}: no library found`);
    }
  }
  return { backend: 'emu', fallback: why.join('; ') };
}

let fallbackWarned = false;

/**
 * The one stderr line written, once per process, when Device.open() without a
 * backend falls back to the emulator: a runtime must not run 100 times slower
 * without a word. Selecting emu explicitly (option or MLX_NATIVE_BACKEND)
 * writes nothing.
 */
export function fallbackWarning(why: string): string {
  const gpu =
    process.platform === 'darwin'
      ? `for Metal, install @mlx-native/darwin-arm64 on an Apple Silicon Mac`
      : `for CUDA, an NVIDIA GPU with its driver and the cuda library (@mlx-native/linux-x64, or run ${script('build-cuda.sh')})`;
  return (
    `mlx-native: no GPU backend (${why}), so Device.open() runs on the CPU emulator (emu), about 100x slower than a GPU; ` +
    `to use the emulator on purpose and silence this, pass { backend: 'emu' } or set MLX_NATIVE_BACKEND=emu; ${gpu}.`
  );
}

export function warnFallbackOnce(why: string): void {
  if (fallbackWarned) return;
  fallbackWarned = true;
  process.stderr.write(`${fallbackWarning(why)}\n`);
}
