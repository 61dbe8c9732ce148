#!/usr/bin/env bash
# A Debian trixie root with Swift, for building and testing swift/ on Linux.
#
#   bash scripts/swift-root.sh ensure          make the root, or finish it, or do nothing
#   bash scripts/swift-root.sh run [--offline] CMD [ARG..]
#                                               run CMD inside the root, in this clone;
#                                               --offline: in a network namespace of
#                                               its own, with no network
#
# Why a root: Debian's Swift (package swiftlang, Swift 6.0) is in trixie, not in
# the bookworm that CI machines run; and what it builds links against trixie's
# glibc (2.41), so the Swift library, the C test program and Bun loading that
# library all run inside the root.
#
# The root lives outside the clone, so later clones and CI runs reuse it:
# MLX_NATIVE_SWIFT_ROOT (default /var/cache/mlx-native/trixie). DEBIAN_MIRROR
# picks the mirror (default http://deb.debian.org/debian). `ensure` is
# idempotent: debootstrap runs only when the root has no finished base system
# (it builds into <root>.partial and renames it when done), and apt installs
# only the packages that are missing. A fresh root takes about 2 minutes and
# 2.8 GB.
#
# `run` bind-mounts /proc, /sys, /dev, /dev/pts and the clone (at the same path
# inside the root, so paths printed inside are valid outside), plus the Bun
# binary at /usr/local/bin/bun; everything it mounted is unmounted when it
# exits, however it exits. Needs root (or sudo).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="${MLX_NATIVE_SWIFT_ROOT:-/var/cache/mlx-native/trixie}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# swiftlang: the compiler, SwiftPM, Foundation and XCTest. clang-19 and its
# runtime builtins: the emulator compiles kernels with clang++-19 at run time.
# libstdc++-14-dev: the C++ headers those kernels and the emulator include.
packages=(swiftlang clang-19 libclang-rt-19-dev libstdc++-14-dev)

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo "$@"; else
    echo "swift-root: need root to run: $*" >&2; exit 1
  fi
}

say() { echo "swift-root: $*" >&2; }

# The mounts that `run` and `ensure` make, innermost last; unmounted in reverse.
mounted=()
unmount_all() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    as_root umount "${mounted[$i]}" 2>/dev/null || as_root umount -l "${mounted[$i]}" || true
  done
  mounted=()
}
trap unmount_all EXIT
trap 'exit 130' INT TERM

bind() {  # bind SRC DEST: DEST inside the root; a file or a directory
  local src="$1" dest="$root$2"
  if mountpoint -q "$dest" 2>/dev/null; then
    say "$dest is already mounted (another run in progress?); using it as it is"
    return
  fi
  if [ -d "$src" ]; then as_root mkdir -p "$dest"; else as_root mkdir -p "$(dirname "$dest")"; as_root touch "$dest"; fi
  as_root mount --bind "$src" "$dest"
  mounted+=("$dest")
}

mount_system() {
  bind /proc /proc
  bind /sys /sys
  bind /dev /dev
  bind /dev/pts /dev/pts
}

# apt inside the root goes through the host's proxy, if it has one.
in_root() {
  local proxy=() line
  while IFS= read -r line; do proxy+=("$line"); done < <(env | grep -iE '^(https?|no)_proxy=' || true)
  as_root env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin LANG=C.UTF-8 "${proxy[@]}" \
    chroot "$root" "$@"
}

# rm -rf of a tree, refused while anything is mounted below it (a run killed
# before its cleanup, or debootstrap's own /proc): rm would reach through.
remove_tree() {
  if findmnt -rn -o TARGET | grep -qF "$1/"; then
    say "not removing $1: something is mounted below it (findmnt | grep $1); unmount it first"
    exit 1
  fi
  as_root rm -rf "$1"
}

ensure() {
  if [ ! -x "$root/usr/bin/apt-get" ] || [ ! -f "$root/.mlx-native-base" ]; then
    if ! command -v debootstrap >/dev/null 2>&1; then
      say "installing debootstrap"
      as_root apt-get update -qq
      as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    fi
    local partial="$root.partial"
    say "debootstrap trixie into $partial (about a minute)"
    remove_tree "$partial"
    as_root mkdir -p "$(dirname "$root")"
    as_root debootstrap --variant=minbase trixie "$partial" "$mirror" >/dev/null
    as_root touch "$partial/.mlx-native-base"
    remove_tree "$root"
    as_root mv "$partial" "$root"
  fi
  local missing=() p
  for p in "${packages[@]}"; do
    [ -f "$root/var/lib/dpkg/info/$p.list" ] || [ -f "$root/var/lib/dpkg/info/$p:amd64.list" ] || missing+=("$p")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    say "installing ${missing[*]} into the root (about a minute)"
    mount_system
    in_root dpkg --configure -a  # finishes an install that was interrupted
    in_root apt-get update -qq
    in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    in_root apt-get clean
    unmount_all
  fi
}

run() {
  mount_system
  bind "$here" "$here"
  local bun_bin
  bun_bin="$(command -v bun || true)"
  [ -n "$bun_bin" ] && bind "$(readlink -f "$bun_bin")" /usr/local/bin/bun
  # A login-like environment with the toolchain's own clang and lld on PATH
  # after the system's (SwiftPM finds them there too).
  # The project's own settings (MLX_NATIVE_*, CI) pass through.
  local passenv=() line status=0 net=()
  if [ "${1:-}" = --offline ]; then net=(unshare --net); shift; fi
  while IFS= read -r line; do passenv+=("$line"); done < <(env | grep -E '^(MLX_NATIVE_[A-Z0-9_]*|CI)=' || true)
  as_root env -i HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" \
    PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin:/usr/libexec/swift/bin \
    "${passenv[@]}" \
    "${net[@]}" chroot "$root" /bin/bash -c 'cd "$1" 2>/dev/null || cd "$2"; shift 2; exec "$@"' bash "$PWD" "$here" "$@" || status=$?
  return "$status"
}

case "${1:-}" in
  ensure) ensure ;;
  run) shift; [ $# -gt 0 ] || { say "run: no command"; exit 2; }; ensure; run "$@" ;;
  *) echo "usage: $0 ensure | run CMD [ARG...]" >&2; exit 2 ;;
esac
