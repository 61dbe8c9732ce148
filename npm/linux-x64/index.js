// The paths of this package's backend libraries. They are file imports so
// that `bun build --compile` embeds them in the executable (and `bun build`
// copies them next to the bundle); mlx-native's loader reads them from here.
import emu from './libmlx_native_emu.so' with { type: 'file' };
import cuda from './libmlx_native_cuda.so' with { type: 'file' };

export default { emu, cuda };
