#!/usr/bin/env bash
# The Swift backend (swift/) on Linux, as CI runs it, in the Debian trixie root
# of scripts/swift-root.sh (made or reused first), with no network:
#   1. swift build (debug) and swift build -c release of the library package;
#   2. swift test: the XCTest tests, on Metal over the CPU emulator
#      (swift/Sources/Metal);
#   3. each build's libMlxNative.so exports exactly the functions of
#      native/include/mlx_native.h, once each;
#   4. a C program (swift/Tests/c-abi/main.c) against the release library
#      through the header;
#   5. the project's bun suite through the release library:
#      MLX_NATIVE_LIB=<it> MLX_NATIVE_TEST_BACKENDS=metal bun test, under the
#      emulator's random schedule.
# Needs build/emu/libmlx_native_emu.so (scripts/build-emu.sh) and Bun on PATH.
# Prints the time of each step. Run as root (or with sudo).
#
#   bash scripts/swift-ci.sh          everything above
#   bash scripts/swift-ci.sh --inside (what runs inside the root)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

step_start=0
step() { step_start=$SECONDS; echo "== swift: $*"; }
took() { echo "   ($((SECONDS - step_start)) s)"; }

if [ "${1:-}" != "--inside" ]; then
  [ -f build/emu/libmlx_native_emu.so ] || { echo "swift-ci: build the emulator first (scripts/build-emu.sh)" >&2; exit 1; }
  command -v bun >/dev/null 2>&1 || { echo "swift-ci: bun is not on PATH" >&2; exit 1; }
  step "the trixie root with Swift (scripts/swift-root.sh)"
  bash scripts/swift-root.sh ensure
  took
  # --offline: no network inside (the package has no dependency to fetch).
  exec bash scripts/swift-root.sh run --offline bash scripts/swift-ci.sh --inside
fi

# ---- inside the root ----
swift --version 2>&1 | head -n 1
cd swift

step "swift build (debug)"
swift build
took
step "swift build -c release"
swift build -c release
took
debug_lib="$(swift build --show-bin-path)/libMlxNative.so"
release_lib="$(swift build -c release --show-bin-path)/libMlxNative.so"

step "swift test (XCTest, Metal over the CPU emulator)"
log="$(mktemp)"
status=0
swift test 2>&1 | tee "$log" || status=$?
# XCTest's summary: "Executed N tests, with F failures"; a skip counts as run.
grep -q "Executed [1-9][0-9]* tests\?, with 0 failures" "$log" || status=1
if grep -q "skipped" "$log"; then
  echo "swift-ci: XCTest tests were skipped here; on Linux every one of them must run" >&2
  status=1
fi
rm -f "$log"
[ "$status" = 0 ] || { echo "swift-ci: swift test failed" >&2; exit "$status"; }
took

step "exports: exactly the header's functions"
cd "$here"
want="$(grep -oE '\bmlxn_[a-z0-9_]+ *\(' native/include/mlx_native.h | tr -d ' (' | sort -u)"
for lib in "$debug_lib" "$release_lib"; do
  # Defined, exported symbols with C names (Swift's own are mangled: $s...,
  # and the linker's section bounds start with an underscore).
  got="$(nm -D --defined-only "$lib" | awk '$3 !~ /^(\$s|_)/ { print $3 }' | sort)"
  if [ "$got" != "$want" ]; then
    echo "swift-ci: $lib exports other C symbols than native/include/mlx_native.h declares:" >&2
    diff <(echo "$want") <(echo "$got") >&2 || true
    exit 1
  fi
  echo "   $(echo "$got" | wc -l) functions, each once: $lib"
done
took

step "a C program through the header (swift/Tests/c-abi/main.c)"
out="$(mktemp -d)"
libdir="$(dirname "$release_lib")"
cc -std=c11 -Wall -Wextra -Werror -I native/include swift/Tests/c-abi/main.c -o "$out/c-abi" \
  -L "$libdir" -lMlxNative -Wl,-rpath,"$libdir"
"$out/c-abi"
rm -rf "$out"
took

# The emulator's random schedule runs the dispatches between two barriers in
# a shuffled order, as a GPU may overlap them: a barrier the Swift encoder
# failed to place shows as a wrong result.
step "bun test through the Swift library (MLX_NATIVE_TEST_BACKENDS=metal, MLX_NATIVE_EMU_SCHEDULE=random)"
log="$(mktemp)"
status=0
# Without CI: under CI the suite requires the emu backend among those tested
# (tests/helpers.ts), which .ci/run's own bun test run has checked; this run
# tests the metal backend alone.
env -u CI MLX_NATIVE_LIB="$release_lib" MLX_NATIVE_TEST_BACKENDS=metal MLX_NATIVE_EMU_SCHEDULE=random \
  bun test --timeout 120000 2>&1 | tee "$log" || status=$?
count() { grep -Eo "^ *[0-9]+ $1\$" "$log" | tail -n 1 | tr -dc 0-9 || true; }
metal=$(grep -c '^(pass).*\[metal' "$log" || true)
echo "swift: bun tests: $(count pass) passed ($metal of them on [metal], the Swift library), $(count fail) failed, $(count skip) skipped"
rm -f "$log"
took
exit "$status"
