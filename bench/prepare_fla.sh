#!/usr/bin/env bash
# Copies the `fla` Python package (flash-linear-attention: Triton kernels and
# the naive PyTorch references) from a git snapshot into .fla/ at the
# repository root, for the GPU machine to carry (.fla/ is ignored by git; no
# FLA code is committed). Its top-level __init__.py is replaced by a one-line
# file, so that importing fla.ops.* does not import fla.layers / fla.models
# (which need transformers, and nothing here uses them).
#
# Usage: bash bench/prepare_fla.sh <git dir of a flash-linear-attention snapshot>
# (the search tool's fetch of github:fla-org/flash-linear-attention gives one).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="${1:?usage: prepare_fla.sh <git dir of flash-linear-attention>}"
commit="$(git --git-dir "$src" rev-parse HEAD)"
rm -rf "$root/.fla"
mkdir -p "$root/.fla"
git --git-dir "$src" archive --format=tar HEAD fla LICENSE | tar -x -C "$root/.fla"
printf '__version__ = "snapshot %s"\n' "$commit" > "$root/.fla/fla/__init__.py"
echo "$commit" > "$root/.fla/COMMIT"
echo "prepare_fla: fla at $commit copied to .fla/ ($(du -sh "$root/.fla" | cut -f1))"
