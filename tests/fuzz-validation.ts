// Fuzz of an op's argument validation, on the emulator: the checks that
// tests/op-contract.ts runs for each family's op cases.
//
// From each case's valid set, seeded mutations (a key dropped or set to
// null, undefined, NaN, -1, 0, 1.5, 2^31, 2^53, a huge number, a string, a
// buffer of another dtype, shape or device, a released buffer, another
// argument's buffer, random table contents; one to three keys at once) are
// applied until the case's time is spent, and each set is given to the op on
// a fresh encoder. Every call either throws an MlxError of kind
// InvalidArgument or UnsupportedDtype whose message starts with the op's name
// and names one of its arguments, or returns; a set that breaks what the
// argument's kind allows (a required buffer that is not a live buffer of the
// device, a dtype no binding takes, a count that differs while no size
// changed, a non-integer size, a non-finite scale, ...) must be refused. A
// bounded sample of the accepted mutated sets is committed, and must run
// without a command error (the emulator checks every access's bounds).
//
// Aliasing: every output bound as another argument of the same dtype and
// count is either refused or gives bit for bit what separate buffers with the
// same contents give.

import { MlxError, type Buffer, type Device, type Encoder } from '../ts/index.ts';
import { DTYPES } from '../ts/dtype.ts';
import * as ops from '../ts/ops/index.ts';
import { rng, type Rng } from './helpers.ts';
import { fillInputs, getPath, type Args, type Case } from './op-contract.ts';

/** Accepted mutated sets committed per case, and more of those with random table contents. */
const RUNS_PER_CASE = 4;
const TABLE_RUNS_PER_CASE = 8;
const SEED = 0x5eed_0009;

/** The ops of a module: its exported functions whose first parameter is the encoder. */
export function opsOf(module: Record<string, unknown>): string[] {
  return Object.entries(module)
    .filter(([, v]) => typeof v === 'function' && /^function\s*[\w$]*\s*\(\s*enc\s*[,)]/.test(String(v)))
    .map(([k]) => k)
    .sort();
}

// ---- argument sets ----

function hasPath(args: Args, path: string): boolean {
  return Object.hasOwn(args, path);
}
/** A copy, so mutations never touch the base. */
function copyArgs(args: Args): Args {
  return { ...args };
}
function setPath(args: Args, path: string, value: unknown, drop: boolean): void {
  if (drop) delete args[path];
  else args[path] = value;
}

function isLiveBuffer(v: unknown, d: Device): v is Buffer {
  return typeof v === 'object' && v !== null && 'released' in v && 'dtype' in v && !(v as Buffer).released && (v as Buffer).device === d;
}

/**
 * Whether the set breaks what an argument's kind allows, so the op must
 * refuse it (an independent statement of the ops' documented argument types,
 * not their validation code). Relations between arguments (element counts
 * against sizes, GQA divisibility, ...) are left to the commit of accepted sets.
 */
function mustRefuse(c: Case, base: Args, args: Args, d: Device): string | null {
  let sizeChanged = false;
  for (const [path, spec] of Object.entries(c.keys)) {
    if (spec.kind === 'buf' || spec.kind === 'buf?') continue;
    if (!Object.is(getPath(args, path), getPath(base, path)) || hasPath(args, path) !== hasPath(base, path)) sizeChanged = true;
  }
  for (const [path, spec] of Object.entries(c.keys)) {
    const v = getPath(args, path);
    const present = hasPath(args, path) && v !== undefined;
    const why = (what: string): string => `${path} ${what}`;
    if (spec.readWhen !== undefined && !spec.readWhen(args)) {
      if ((spec.kind === 'buf' || spec.kind === 'buf?') && present && !isLiveBuffer(v, d)) return why('is not a live buffer of the device');
      continue;
    }
    switch (spec.kind) {
      case 'buf':
      case 'buf?': {
        if (spec.kind === 'buf?' && !present) break;
        if (!isLiveBuffer(v, d)) return why('is not a live buffer of the device');
        if (spec.dtypes !== undefined && !spec.dtypes.includes(v.dtype)) return why(`has dtype ${v.dtype}`);
        const b0 = getPath(base, path) as Buffer | undefined;
        if (!sizeChanged && !spec.freeCount && b0 !== undefined && v.elementCount !== b0.elementCount) {
          return why(`has ${v.elementCount} elements, not ${b0.elementCount}`);
        }
        break;
      }
      case 'int':
      case 'int?':
        if (spec.kind === 'int?' && !present) break;
        if (!Number.isSafeInteger(v) || (v as number) <= 0) return why('is not a positive integer');
        break;
      case 'num':
      case 'num?':
        if (spec.kind === 'num?' && !present) break;
        if (typeof v !== 'number' || !Number.isFinite(v)) return why('is not a finite number');
        break;
      case 'nonneg':
      case 'nonneg?':
        if (spec.kind === 'nonneg?' && !present) break;
        if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) return why('is not a finite number >= 0');
        break;
      case 'bool':
      case 'bool?':
        if (spec.kind === 'bool?' && !present) break;
        if (typeof v !== 'boolean') return why('is not a boolean');
        break;
      case 'enum':
        if (!spec.values!.includes(v)) return why('is not one of its values');
        break;
      case 'offsets?':
        if (present && (typeof v !== 'object' || v === null)) return why('is not an array');
        break;
      case 'free':
        break;
    }
  }
  return null;
}

/** The argument a refusal names: the text between "<op>: " and " must be ". */
function namedArgument(c: Case, message: string): string | null {
  const head = `${c.op}: `;
  if (!message.startsWith(head)) return null;
  const end = message.indexOf(' must be ', head.length);
  return end < 0 ? null : message.slice(head.length, end);
}
/** Names of the case's arguments. */
function argumentNames(c: Case): Set<string> {
  return new Set(Object.keys(c.keys));
}

// ---- mutations ----

interface Pools {
  /** Per buffer path: buffers of every other dtype (same shape). */
  wrongDtype: Map<string, Buffer[]>;
  /** Per buffer path: same dtype, other element counts. */
  otherShape: Map<string, Buffer[]>;
  /** Per buffer path: the same dtype and shape on another device. */
  foreign: Map<string, Buffer>;
  released: Buffer;
}

const SCALARS: readonly unknown[] = [
  null, undefined, NaN, -1, 0, 1, 1.5, 2, 3, 64, 2 ** 31, 2 ** 32, 2 ** 53, 1e300, Infinity, -Infinity, 'abc', '4', true, false, {}, [],
];

interface Mutation {
  path: string;
  value: unknown;
  drop: boolean;
  what: string;
}

function pick<T>(r: Rng, xs: readonly T[]): T {
  return xs[Math.floor(r.next() * xs.length)]!;
}

function mutation(r: Rng, c: Case, base: Args, pools: Pools, d: Device): Mutation {
  const paths = Object.keys(c.keys);
  const path = pick(r, paths);
  const spec = c.keys[path]!;
  const cur = getPath(base, path);
  const x = r.next();
  if (x < 0.08) return { path, value: undefined, drop: true, what: 'dropped' };
  if ((spec.kind === 'buf' || spec.kind === 'buf?') && pools.foreign.has(path)) {
    const y = r.next();
    if (y < 0.2) return { path, value: pick(r, pools.wrongDtype.get(path)!), drop: false, what: 'wrong dtype' };
    if (y < 0.4) return { path, value: pick(r, pools.otherShape.get(path)!), drop: false, what: 'other shape' };
    if (y < 0.5) return { path, value: pools.foreign.get(path)!, drop: false, what: 'another device' };
    if (y < 0.58) return { path, value: pools.released, drop: false, what: 'released' };
    if (y < 0.78) {
      const others = paths.filter((p) => p !== path && c.keys[p]!.dtypes !== undefined && getPath(base, p) !== undefined);
      const o = pick(r, others);
      return { path, value: getPath(base, o), drop: false, what: `aliased to ${o}` };
    }
    if (spec.table === true && y < 0.9) {
      const b0 = cur as Buffer;
      const t = d.alloc('u32', b0.shape);
      const vals = Array.from({ length: b0.elementCount }, () =>
        pick(r, [0, 1, 2, 3, 63, 64, 65, 1e6, 0xffff_ffff, 0xffff_fffe, Math.floor(r.next() * 200)]));
      t.writeNumbers(vals);
      return { path, value: t, drop: false, what: `table [${vals.join(', ')}]` };
    }
    return { path, value: pick(r, SCALARS), drop: false, what: 'scalar' };
  }
  if (spec.kind === 'offsets?') {
    const base0 = (Array.isArray(cur) ? cur : [0, 3]) as number[];
    const y = r.next();
    let v: unknown;
    if (y < 0.4) {
      const arr = [...base0];
      arr[Math.floor(r.next() * arr.length)] = pick(r, [-1, 0, 1, 2, 3, 4, 1.5, NaN, 2 ** 32, 2 ** 53]);
      v = arr;
    } else if (y < 0.5) v = [...base0, 4];
    else if (y < 0.6) v = base0.slice(0, 1);
    else if (y < 0.7) v = { length: 2 ** 31 };
    else if (y < 0.8) v = new Uint32Array(base0);
    else v = pick(r, SCALARS);
    return { path, value: v, drop: false, what: 'offsets' };
  }
  if (typeof cur === 'number' && r.next() < 0.4) {
    const v = pick(r, [cur + 1, cur - 1, cur * 2, Math.floor(cur / 2), -cur]);
    return { path, value: v, drop: false, what: `number ${v}` };
  }
  if (spec.kind === 'enum' && r.next() < 0.5) return { path, value: pick(r, spec.values!), drop: false, what: 'enum value' };
  return { path, value: pick(r, SCALARS), drop: false, what: 'scalar' };
}

function describeValue(v: unknown): string {
  if (typeof v === 'object' && v !== null && 'dtype' in v) {
    const b = v as Buffer;
    return `${b.released ? 'released ' : ''}${b.dtype} [${b.shape.join(', ')}]`;
  }
  if (typeof v === 'object' && v !== null && 'length' in v && (v as ArrayLike<unknown>).length > 8) return `{ length: ${(v as ArrayLike<unknown>).length} }`;
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return String(v);
  }
}

// ---- running a set ----

function call(fnName: string, enc: Encoder, args: Args): void {
  (ops as unknown as Record<string, (e: Encoder, a: Args) => void>)[fnName]!(enc, args);
}

/** Runs the op on the set: commits and waits; throws what the commit throws. */
function run(d: Device, c: Case, args: Args): void {
  const enc = d.encoder();
  try {
    call(c.fn, enc, args);
    enc.commitAndWait();
  } finally {
    enc.release();
  }
}

// ---- the checks (tests/op-contract.ts registers them per family, on the emu device) ----

/** Every case's own set runs (throws naming the op otherwise). */
export function fuzzValidSets(d: Device, cases: readonly Case[]): void {
  const r = rng(SEED);
  for (const c of cases) {
    const args = c.make(d);
    fillInputs(c, args, r);
    try {
      run(d, c, args);
    } catch (e) {
      throw new Error(`${c.fn}: the case's set fails: ${(e as Error).message}`);
    }
  }
}

/** Failures of the buffer arguments given null, undefined, a non-buffer, a released buffer and one of device d2. */
export function fuzzBufferRefusals(d: Device, d2: Device, cases: readonly Case[]): string[] {
  const released = d.alloc('f32', [1]);
  released.release();
  const failures: string[] = [];
  for (const c of cases) {
    const base = c.make(d);
    for (const [path, spec] of Object.entries(c.keys)) {
      if (spec.kind !== 'buf' && spec.kind !== 'buf?') continue;
      const b0 = getPath(base, path) as Buffer | undefined;
      if (b0 === undefined) continue;
      const foreign = d2.alloc(b0.dtype, b0.shape);
      const values: [string, unknown][] = [['null', null], ['a number', 7], ['an object', {}], ['released', released], ['foreign', foreign]];
      if (spec.kind === 'buf') values.push(['undefined', undefined]);
      for (const [what, value] of values) {
        const args = copyArgs(base);
        setPath(args, path, value, false);
        const enc = d.encoder();
        try {
          call(c.fn, enc, args);
          failures.push(`${c.fn} ${path} = ${what}: accepted`);
        } catch (e) {
          const arg = e instanceof MlxError ? namedArgument(c, e.message) : null;
          if (!(e instanceof MlxError) || e.kind !== 'InvalidArgument' || arg === null || !arg.split(/[^\w]/).includes(path)) {
            failures.push(`${c.fn} ${path} = ${what}: ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}`);
          }
        } finally {
          enc.release();
        }
      }
      foreign.release();
    }
  }
  return failures;
}

/** Mutated sets for msPerCase ms per case: how many were tried, and the failures. */
export function fuzzMutations(d: Device, d2: Device, cases: readonly Case[], msPerCase: number, label: string): { tried: number; failures: string[] } {
  const r = rng(SEED + 1);
  const t0 = performance.now();
  let tried = 0;
  let accepted = 0;
  let refused = 0;
  let ran = 0;
  const failures: string[] = [];
  for (const c of cases) {
    const base = c.make(d);
    fillInputs(c, base, r);
    const names = argumentNames(c);
    const pools: Pools = { wrongDtype: new Map(), otherShape: new Map(), foreign: new Map(), released: d.alloc('f32', [1]) };
    pools.released.release();
    const made: Buffer[] = [];
    for (const [path, spec] of Object.entries(c.keys)) {
      if (spec.kind !== 'buf' && spec.kind !== 'buf?') continue;
      const b0 = getPath(base, path) as Buffer | undefined;
      if (b0 === undefined) continue;
      pools.wrongDtype.set(path, DTYPES.filter((t) => t !== b0.dtype).map((t) => d.alloc(t, b0.shape)));
      const n = b0.elementCount;
      pools.otherShape.set(path, [n + 1, 2 * n, Math.max(1, n - 1), 1].filter((m) => m !== n).map((m) => d.alloc(b0.dtype, [m])));
      pools.foreign.set(path, d2.alloc(b0.dtype, b0.shape));
      made.push(...pools.wrongDtype.get(path)!, ...pools.otherShape.get(path)!, pools.foreign.get(path)!);
    }
    let runs = 0;
    let tableRuns = 0;
    const end = performance.now() + msPerCase;
    do {
      const args = copyArgs(base);
      const count = 1 + Math.floor(r.next() * r.next() * 3);
      const ms: Mutation[] = [];
      for (let i = 0; i < count; i++) {
        const m = mutation(r, c, base, pools, d);
        setPath(args, m.path, m.value, m.drop);
        ms.push(m);
      }
      tried++;
      const what = (): string => `${c.fn} with ${ms.map((m) => `${m.path} ${m.drop ? 'dropped' : `= ${describeValue(m.value)} (${m.what})`}`).join(', ')}`;
      const must = mustRefuse(c, base, args, d);
      const enc = d.encoder();
      let threw: unknown = null;
      try {
        call(c.fn, enc, args);
      } catch (e) {
        threw = e;
      }
      if (threw === null) {
        accepted++;
        const table = ms.some((m) => m.what.startsWith('table'));
        if (must !== null) failures.push(`${what()}: accepted, but ${must}`);
        else if (table ? tableRuns < TABLE_RUNS_PER_CASE : runs < RUNS_PER_CASE) {
          if (table) tableRuns++;
          else runs++;
          ran++;
          try {
            enc.commitAndWait();
          } catch (e) {
            failures.push(`${what()}: accepted, then the commit failed: ${(e as Error).message}`);
          }
        }
      } else {
        refused++;
        const e = threw;
        const arg = e instanceof MlxError ? namedArgument(c, e.message) : null;
        if (!(e instanceof MlxError)) failures.push(`${what()}: threw ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}`);
        else if (e.kind !== 'InvalidArgument' && e.kind !== 'UnsupportedDtype') failures.push(`${what()}: MlxError ${e.kind}: ${e.message}`);
        else if (arg === null) failures.push(`${what()}: the message does not start "${c.op}: <arg> must be": ${e.message}`);
        else if (!(arg.match(/[A-Za-z_]\w*/g) ?? []).some((w) => names.has(w))) failures.push(`${what()}: the message names no argument: ${e.message}`);
      }
      enc.release();
      for (const m of ms) {
        const v = m.value as Buffer;
        if (m.what.startsWith('table')) v.release();
      }
      if (failures.length > 50) break;
    } while (performance.now() < end);
    for (const b of made) b.release();
    for (const p of Object.keys(c.keys)) {
      const b = getPath(base, p);
      if (isLiveBuffer(b, d)) b.release();
    }
  }
  const ms = performance.now() - t0;
  console.log(`fuzz-validation ${label}: ${tried} sets over ${cases.length} cases in ${ms.toFixed(0)} ms: ` +
    `${accepted} accepted (${ran} committed), ${refused} refused, ${failures.length} failures`);
  return { tried, failures };
}

/** Failures of outputs bound as another argument of the same dtype and count. */
export function fuzzAliasing(d: Device, cases: readonly Case[], label: string): string[] {
  const failures: string[] = [];
  let pairs = 0;
  let refusedPairs = 0;
  for (const c of cases) {
    const probe = c.make(d);
    const bufferPaths = Object.keys(c.keys).filter((p) => getPath(probe, p) instanceof Object && 'dtype' in (getPath(probe, p) as object));
    for (const outPath of bufferPaths.filter((p) => c.keys[p]!.output === true)) {
      const ob = getPath(probe, outPath) as Buffer;
      for (const inPath of bufferPaths) {
        if (inPath === outPath) continue;
        const ib = getPath(probe, inPath) as Buffer;
        if (ib.dtype !== ob.dtype || ib.elementCount !== ob.elementCount) continue;
        pairs++;
        // Separate buffers, the output starting with the other's contents.
        const sep = c.make(d);
        fillInputs(c, sep, rng(SEED + pairs));
        (getPath(sep, outPath) as Buffer).write((getPath(sep, inPath) as Buffer).read());
        const al = c.make(d);
        fillInputs(c, al, rng(SEED + pairs));
        const replaced = getPath(al, outPath) as Buffer;
        setPath(al, outPath, getPath(al, inPath), false);
        const documented = (c.inPlace ?? []).some(([x, y]) => (x === outPath && y === inPath) || (x === inPath && y === outPath));
        let refusedWith: unknown = null;
        try {
          run(d, c, al);
        } catch (e) {
          refusedWith = e;
        }
        if (refusedWith !== null) {
          refusedPairs++;
          const e = refusedWith;
          const arg = e instanceof MlxError ? namedArgument(c, e.message) : null;
          if (documented) failures.push(`${c.fn}: ${outPath} = ${inPath} is documented in place but refused: ${String(e)}`);
          else if (!(e instanceof MlxError) || e.kind !== 'InvalidArgument' || arg === null) failures.push(`${c.fn}: ${outPath} = ${inPath}: ${String(e)}`);
        } else {
          if (process.env.MLX_NATIVE_FUZZ_VERBOSE) console.log(`aliasing accepted: ${c.fn} ${outPath} = ${inPath}`);
          run(d, c, sep);
          for (const p of bufferPaths.filter((q) => c.keys[q]!.output === true)) {
            const got = (getPath(al, p) as Buffer).read();
            const want = (getPath(sep, p) as Buffer).read();
            const same = got.length === want.length && Buffer_equal(got, want);
            if (!same) failures.push(`${c.fn}: ${outPath} = ${inPath} is accepted, and ${p} differs from separate buffers`);
          }
        }
        replaced.release();
        for (const args of [sep, al]) {
          for (const p of bufferPaths) {
            const b = getPath(args, p) as Buffer | undefined;
            if (b !== undefined && !b.released) b.release();
          }
        }
      }
    }
    for (const p of bufferPaths) (getPath(probe, p) as Buffer).release();
  }
  console.log(`fuzz-validation ${label} aliasing: ${pairs} output/argument pairs of one dtype and count, ${refusedPairs} refused, ${failures.length} failures`);
  return failures;
}

function Buffer_equal(x: ArrayLike<number>, y: ArrayLike<number>): boolean {
  for (let i = 0; i < x.length; i++) if (!Object.is(x[i], y[i])) return false;
  return true;
}
