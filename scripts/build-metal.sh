#!/usr/bin/env bash
# Builds the metal backend on macOS (Apple Silicon):
#   build/metal/libMlxNative.dylib    the C ABI over Metal (swift/)
#   build/metal/mlx-native            the tool (swift/Tool): info, kernels, compile, metallib
#   build/metal/metallib/             <family>.metallib + the <family>.metal it
#                                     was built from, when the Metal toolchain
#                                     (xcrun metal) is installed
# and copies the dylib and metallib/ into npm/darwin-arm64/, the platform
# package @mlx-native/darwin-arm64. The library loads a metallib from the
# metallib/ folder next to it only for a source byte-identical to the copy
# there; any other source is compiled at run time.
#
# Env: CONFIG (default release).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
config="${CONFIG:-release}"
out="$root/build/metal"
pkg="$root/npm/darwin-arm64"

if [ "$(uname -s)" != "Darwin" ]; then
  echo "build-metal: the metal backend builds on macOS only (Swift + Metal); this is $(uname -s)" >&2
  exit 1
fi

# The library package (swift/) has no outside dependency; the tool's package
# (swift/Tool/) fetches swift-argument-parser and links the library's dylib.
cd "$root/swift"
swift build -c "$config"
bin="$(swift build -c "$config" --show-bin-path)"
cd "$root/swift/Tool"
swift build -c "$config"
tool_bin="$(swift build -c "$config" --show-bin-path)"

mkdir -p "$out" "$pkg"
cp "$bin/libMlxNative.dylib" "$out/libMlxNative.dylib"
# The tool loads libMlxNative.dylib from its own folder (SwiftPM's rpath,
# @loader_path), so it runs from build/metal/ next to the copy above.
cp "$tool_bin/mlx-native" "$out/mlx-native"
cp "$out/libMlxNative.dylib" "$pkg/libMlxNative.dylib"

rm -rf "$out/metallib" "$pkg/metallib"
if xcrun -sdk macosx --find metal >/dev/null 2>&1 && xcrun -sdk macosx --find metallib >/dev/null 2>&1; then
  "$out/mlx-native" metallib "$root/shaders" --out "$out/metallib"
  cp -R "$out/metallib" "$pkg/metallib"
else
  echo "build-metal: no Metal toolchain (xcrun metal); the library compiles the shaders from source at run time"
fi

echo "build-metal: $out/libMlxNative.dylib, $pkg/libMlxNative.dylib"
