// The gated delta net tests write shapes in the kernels' and the references'
// short names (b, t, hg, h, k, v); the ops take flat arguments whose names
// cannot collide with their buffers (k and v are buffers there). flat() maps
// the one to the other, leaving every other key as it is.

const NAMES = { b: 'batch', t: 'seqLen', hg: 'nQkHeads', h: 'nHeads', k: 'kDim', v: 'vDim' } as const;
type Names = typeof NAMES;

/** S with its short names replaced by the ops' names. */
export type Flat<S> = { [K in keyof S as K extends keyof Names ? Names[K] : K]: S[K] };

export function flat<S extends object>(s: S): Flat<S> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(s)) out[(NAMES as Record<string, string>)[key] ?? key] = value;
  return out as Flat<S>;
}

/** The ops' name of a short name (other names unchanged). */
export const flatName = (key: string): string => (NAMES as Record<string, string>)[key] ?? key;

/** The shapes the tests write, in short names. */
export interface StepShape { nTok: number; nt: number; nSeq: number; hg: number; h: number; k: number; v: number; scale?: number }
export interface GdrShape { b: number; t: number; hg: number; h: number; k: number; v: number; scale?: number; cuSeqlens?: ArrayLike<number> }
export interface SeedShape { b: number; t: number; hg: number; h: number; k: number; v: number; bt: number }
export interface CumsumShape { b: number; t: number; h: number; bt: number }
