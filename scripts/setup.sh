#!/usr/bin/env bash
# Makes a fresh Linux (Debian) or macOS clone ready to run: installs what is
# missing (Bun 1.4.x, clang-19 on Linux), the dev dependencies, and builds the
# backends that can build here. Idempotent, and quick when everything is there.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

BUN_VERSION=1.4.4

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo "$@"; else
    echo "setup: need root to run: $*" >&2; exit 1
  fi
}

apt_updated=0
apt_install() {
  if [ "$apt_updated" = 0 ]; then as_root apt-get update -qq; apt_updated=1; fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# Bun: the 1.4 line this package is pinned to (package.json "engines").
case "$(bun --version 2>/dev/null || true)" in
  1.4.*) ;;
  *)
    if ! command -v npm >/dev/null 2>&1; then
      if command -v apt-get >/dev/null 2>&1; then apt_install npm; else
        echo "setup: install Bun $BUN_VERSION (https://bun.sh) or npm, then run again" >&2; exit 1
      fi
    fi
    echo "setup: installing bun@$BUN_VERSION with npm"
    as_root npm i -g --silent "bun@$BUN_VERSION"
    export PATH="$(npm prefix -g)/bin:$PATH"
    hash -r
    ;;
esac

# clang-19: the emulator's build compiler and the compiler it runs kernels through.
if [ "$(uname -s)" = Linux ] && ! command -v clang++-19 >/dev/null 2>&1; then
  echo "setup: installing clang-19"
  apt_install clang-19 libclang-rt-19-dev
fi

if [ -f bun.lock ]; then bun install --frozen-lockfile --silent; else bun install --silent; fi

bash scripts/build-emu.sh
if [ -f scripts/build-cuda.sh ]; then bash scripts/build-cuda.sh; fi
if [ "$(uname -s)" = Darwin ] && [ -f scripts/build-metal.sh ]; then bash scripts/build-metal.sh; fi
echo "setup: ready (bun $(bun --version))"
