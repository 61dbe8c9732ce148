#!/usr/bin/env bash
# Builds the cuda backend, libmlx_native_cuda.so, into build/cuda/ in a
# checkout; in an installed package (under node_modules) into the per-user
# directory the loader looks in, ${XDG_CACHE_HOME:-~/.cache}/mlx-native/<version>/cuda;
# MLX_NATIVE_BUILD_DIR=<dir> writes <dir>/cuda.
#
# The library links against neither libcuda nor NVRTC (it dlopen's them at run
# time), so it builds on any Linux machine with a C++17 compiler, GPU or not;
# where cuda.h is found, its enum values are checked against the backend's own
# declarations at compile time. With no C++ compiler the script says so and
# exits 0, so that CI machines without one skip this backend instead of failing.
#
# Environment: CXX (compiler, default: c++, g++ or clang++, the first found),
# CUDA_HOME (for cuda.h, default /usr/local/cuda), MLXN_CUDA_CXXFLAGS (extra flags).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$root/native/cuda/src"
if [[ -n "${MLX_NATIVE_BUILD_DIR:-}" ]]; then
  out="$MLX_NATIVE_BUILD_DIR/cuda"
elif [[ "$root" == */node_modules/* ]]; then
  version="$(sed -n 's/^  "version": "\(.*\)",$/\1/p' "$root/package.json")"
  cache="${XDG_CACHE_HOME:-}"
  [[ "$cache" == /* ]] || cache="$HOME/.cache"
  out="$cache/mlx-native/$version/cuda"
else
  out="$root/build/cuda"
fi

if [[ "$(uname -s)" != Linux ]]; then
  echo "build-cuda: skipped: the cuda backend builds on Linux only (this is $(uname -s))"
  exit 0
fi

cxx="${CXX:-}"
if [[ -z "$cxx" ]]; then
  for c in c++ g++ clang++; do
    if command -v "$c" >/dev/null 2>&1; then cxx="$c"; break; fi
  done
fi
if [[ -z "$cxx" ]] || ! command -v "$cxx" >/dev/null 2>&1; then
  echo "build-cuda: skipped: no C++ compiler found (set CXX, or install g++ or clang++)"
  exit 0
fi

flags=(-std=c++17 -O2 -fPIC -shared -fvisibility=hidden -Wall -Wextra -Wno-unused-parameter)
cuda_home="${CUDA_HOME:-/usr/local/cuda}"
if [[ -f "$cuda_home/include/cuda.h" ]]; then
  flags+=(-DMLXN_CHECK_CUDA_H -isystem "$cuda_home/include")
  check="checked against $cuda_home/include/cuda.h"
else
  check="cuda.h not found: enum values not cross-checked"
fi
# shellcheck disable=SC2206
extra=(${MLXN_CUDA_CXXFLAGS:-})

mkdir -p "$out"
"$cxx" "${flags[@]}" "${extra[@]}" \
  "$src/backend.cpp" "$src/cuda_api.cpp" "$src/util.cpp" "$src/check_cuda_h.cpp" \
  -o "$out/libmlx_native_cuda.so.tmp" -ldl -pthread
mv "$out/libmlx_native_cuda.so.tmp" "$out/libmlx_native_cuda.so"
echo "build-cuda: built $out/libmlx_native_cuda.so with $cxx ($check)"
