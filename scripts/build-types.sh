#!/usr/bin/env bash
# Emits the package's declarations, types/**/*.d.ts, from ts/ (tsconfig.types.json):
# what a consumer's TypeScript reads instead of the sources, so that its own
# compiler flags never reach them and shader text imports never need its
# module declarations. Run by `npm pack` (prepack); types/ is not committed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
tsc="$root/node_modules/.bin/tsc"
[ -x "$tsc" ] || { echo "build-types: $tsc not found: run \`bun install\` first" >&2; exit 1; }
rm -rf types
"$tsc" -p tsconfig.types.json
# The declarations that name bun:ffi or bun:test types load Bun's own (@types/bun), so that
# they check whatever the consumer's "types" option says (TypeScript 6 and
# later include no @types package unless named).
while IFS= read -r -d '' f; do
  if grep -q "from 'bun:" "$f"; then
    { echo '/// <reference types="bun" />'; cat "$f"; } > "$f.tmp" && mv "$f.tmp" "$f"
  fi
done < <(find types -name '*.d.ts' -print0)
echo "build-types: wrote $(find types -name '*.d.ts' | wc -l) declaration files to types/" >&2
