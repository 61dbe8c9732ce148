// The path of this package's backend library, as a file import so that
// `bun build --compile` embeds it (a compiled executable then compiles the
// shaders at run time: metallib/ stays next to the installed dylib only).
import metal from './libMlxNative.dylib' with { type: 'file' };

export default { metal };
