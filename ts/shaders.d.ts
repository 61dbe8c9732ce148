// Kernel sources and the family headers are imported as text:
//   import src from '../../shaders/rms_norm.metal' with { type: 'text' };
declare module '*.metal' {
  const source: string;
  export default source;
}

declare module '*.cu' {
  const source: string;
  export default source;
}

declare module '*.cuh' {
  const source: string;
  export default source;
}

declare module '*.h' {
  const source: string;
  export default source;
}
