#!/usr/bin/env bash
# Builds the platform package of this machine from this checkout:
#   Linux x86-64:  npm/linux-x64/   (@mlx-native/linux-x64: libmlx_native_emu.so, libmlx_native_cuda.so)
#   macOS arm64:   npm/darwin-arm64/ (@mlx-native/darwin-arm64, by scripts/build-metal.sh)
# then checks that each library loads and reports its backend, and with
# --pack DIR writes the package's tarball into DIR (npm pack).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

pack_dir=""
if [ "${1:-}" = "--pack" ]; then pack_dir="${2:?--pack needs a directory}"; fi

platform="$(uname -s)-$(uname -m)"
case "$platform" in
  Linux-x86_64)
    pkg="$root/npm/linux-x64"
    MLX_NATIVE_BUILD_DIR="$root/build" bash scripts/build-emu.sh
    MLX_NATIVE_BUILD_DIR="$root/build" bash scripts/build-cuda.sh
    [ -f build/cuda/libmlx_native_cuda.so ] || { echo "build-platform-package: the cuda backend did not build (no C++ compiler?)" >&2; exit 1; }
    cp build/emu/libmlx_native_emu.so build/cuda/libmlx_native_cuda.so "$pkg/"
    libs=(emu cuda)
    ;;
  Darwin-arm64)
    pkg="$root/npm/darwin-arm64"
    bash scripts/build-metal.sh
    libs=(metal)
    ;;
  *)
    echo "build-platform-package: no platform package is defined for $platform" >&2
    exit 1
    ;;
esac
cp LICENSE "$pkg/LICENSE"

# Each library loads, has this package's ABI, and is the backend the package names it.
command -v bun >/dev/null 2>&1 || export PATH="$(npm prefix -g)/bin:$PATH"
(cd "$pkg" && bun -e "
import libs from './index.js';
import { dlopen, FFIType as T } from 'bun:ffi';
for (const b of '${libs[*]}'.split(' ')) {
  const { symbols } = dlopen(libs[b], { mlxn_abi_version: { args: [], returns: T.u32 }, mlxn_backend_name: { args: [], returns: T.cstring } });
  const name = String(symbols.mlxn_backend_name());
  if (name !== b) throw new Error(libs[b] + ' reports backend ' + name + ', not ' + b);
  console.log('build-platform-package: ' + b + ': ' + libs[b] + ' (ABI ' + symbols.mlxn_abi_version() + ')');
}")

if [ -n "$pack_dir" ]; then
  mkdir -p "$pack_dir"
  (cd "$pkg" && npm pack --silent --pack-destination "$pack_dir" >/dev/null)
  ls "$pack_dir"/mlx-native-*"$(basename "$pkg")"-*.tgz
fi
