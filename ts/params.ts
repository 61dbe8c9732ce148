// Kernel parameter structs: the field table every op declares its struct with,
// and the packer that writes values into one.

export type ParamType = 'u32' | 'f32';
/** One field of a kernel's parameter struct, as the .metal file declares it. */
export interface ParamField {
  readonly name: string;
  readonly type: ParamType;
  readonly offset: number;
}

/** Packs values into a struct of the given layout (little-endian, 4-byte fields). */
export function packFields(layout: readonly ParamField[], values: Readonly<Record<string, number>>): Uint8Array {
  const size = layout.reduce((end, f) => Math.max(end, f.offset + 4), 0);
  const bytes = new Uint8Array(size);
  const view = new DataView(bytes.buffer);
  for (const f of layout) {
    const v = values[f.name];
    if (v === undefined) throw new Error(`packFields: no value for field ${f.name}`);
    if (f.type === 'u32') view.setUint32(f.offset, v, true);
    else view.setFloat32(f.offset, v, true);
  }
  return bytes;
}
