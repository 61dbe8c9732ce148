#!/usr/bin/env bash
# The install test: the package as a user gets it. Packs mlx-native and this
# machine's platform package, installs both from the tarballs into a fresh app
# in a temporary directory with the registry unreachable (so nothing of them
# comes from the network), typechecks the app with strict flags, runs a parity
# test and the README's "Use" examples through the installed package, then
# builds the app with `bun build --compile` and runs the executable with the
# app's node_modules moved away. Linux x86-64 (the platform package it packs).
# Env: KEEP=1 keeps the temporary directory.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
command -v bun >/dev/null 2>&1 || export PATH="$(npm prefix -g)/bin:$PATH"
if [ "$(uname -s)-$(uname -m)" != Linux-x86_64 ]; then
  echo "install-test: skipped: it packs @mlx-native/linux-x64 (this is $(uname -s)-$(uname -m))"
  exit 0
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/mlxn-install-XXXXXX")"
if [ "${KEEP:-}" = 1 ]; then echo "install-test: keeping $work"; else trap 'rm -rf "$work"' EXIT; fi
pkgs="$work/pkgs"
app="$work/app"
mkdir -p "$pkgs" "$app"
version="$(sed -n 's/^  "version": "\(.*\)",$/\1/p' "$root/package.json")"

echo "== pack"
(cd "$root" && npm pack --silent --pack-destination "$pkgs" >/dev/null)
bash "$root/scripts/build-platform-package.sh" --pack "$pkgs" >/dev/null
for t in "$pkgs"/*.tgz; do echo "  $(basename "$t") $(stat -c %s "$t") bytes, $(tar tzf "$t" | wc -l) files"; done

echo "== install into $app (registry unreachable for the packages)"
cd "$app"
cat > package.json <<'JSON'
{ "name": "app", "type": "module", "private": true }
JSON
bun add --silent -d @types/bun@1.4.4 typescript@7.0.2
BUN_CONFIG_REGISTRY=http://127.0.0.1:9/ bun add "$pkgs/mlx-native-$version.tgz" "$pkgs/mlx-native-linux-x64-$version.tgz" 2>&1 |
  grep -v '^warn: ConnectionRefused downloading package manifest @mlx-native/' | sed 's/^/  /'
test -f node_modules/mlx-native/types/index.d.ts
test -f node_modules/@mlx-native/linux-x64/libmlx_native_emu.so

cat > tsconfig.json <<'JSON'
{
  "compilerOptions": {
    "lib": ["ESNext"], "target": "ESNext", "module": "Preserve", "moduleDetection": "force",
    "moduleResolution": "bundler", "allowImportingTsExtensions": true, "verbatimModuleSyntax": true,
    "noEmit": true, "types": ["bun"], "strict": true, "skipLibCheck": false,
    "noUncheckedIndexedAccess": true, "noImplicitOverride": true, "noPropertyAccessFromIndexSignature": true,
    "exactOptionalPropertyTypes": true, "noImplicitReturns": true, "noUnusedLocals": true,
    "noUnusedParameters": true, "noFallthroughCasesInSwitch": true
  }
}
JSON

# A parity check through the installed package: fusedNormAdd against its
# reference, f32, on the best backend present (Device.open()).
cat > parity.ts <<'TS'
import { Device } from 'mlx-native';
import { fusedNormAdd } from 'mlx-native/ops';
import { fusedNormAddRef } from 'mlx-native/reference';

/** Runs the op on the device and returns its max relative error against the reference (NaN-poisoned output). */
export async function parity(device: Device, rows = 8, dim = 1024): Promise<number> {
  let s = 12345;
  const next = (): number => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) / 2 ** 32) * 2 - 1;
  const r = Float32Array.from({ length: rows * dim }, next);
  const x = Float32Array.from({ length: rows * dim }, next);
  const w = Float32Array.from({ length: dim }, next);
  using residual = device.upload('f32', [rows, dim], r);
  using input = device.upload('f32', [rows, dim], x);
  using weight = device.upload('f32', [dim], w);
  using output = device.alloc('f32', [rows, dim]);
  output.fill(NaN);
  using enc = device.encoder();
  fusedNormAdd(enc, { residual, input, weight, output, rows, dim, eps: 1e-6 });
  await enc.commit();
  const want = fusedNormAddRef(r, x, w, rows, dim, 1e-6);
  const got = output.readNumbers();
  // Outputs are residual + normed, terms that may cancel: errors are measured
  // against max(|want|, 0.1 max |want|), as tests/fused_norm.test.ts does.
  let scale = 0;
  for (const v of want) scale = Math.max(scale, Math.abs(v));
  let err = 0;
  for (let i = 0; i < got.length; i++) err = Math.max(err, Math.abs(got[i]! - want[i]!) / Math.max(Math.abs(want[i]!), 0.1 * scale));
  return Number.isNaN(err) ? Infinity : err;
}
TS
cat > main.ts <<'TS'
import { Device } from 'mlx-native';
import { parity } from './parity.ts';

using device = Device.open();
const err = await parity(device);
console.log(`fusedNormAdd f32 on ${device.backend} (${device.libraryPath}): max relative error ${err.toExponential(2)}`);
if (!(err <= 1e-5)) process.exit(1);
TS
cat > parity.test.ts <<'TS'
import { expect, test } from 'bun:test';
import { TOL, describeBackends } from 'mlx-native/testing';
import { parity } from './parity.ts';

describeBackends('installed fusedNormAdd', ({ device }) => {
  test('f32 matches the reference', async () => {
    expect(await parity(device())).toBeLessThanOrEqual(TOL.f32);
  }, 120_000);
});
TS
# The README's "Use" examples, as written.
awk '/^## Use$/{u=1;next} u&&/^## /{u=0} u&&/^```ts$/{n++;f=sprintf("use%d.ts",n);c=1;next} c&&/^```$/{c=0;next} c{print > f}' "$root/README.md"
ls use*.ts >/dev/null

echo "== typecheck (strict)"
./node_modules/.bin/tsc --noEmit -p . && echo "  tsc --noEmit: clean ($(ls *.ts | wc -l) files)"

echo "== parity test through the installed package"
st=0
bun test --timeout 120000 parity.test.ts >test.log 2>&1 || st=$?
grep -E '^\((pass|fail|skip)\)|^ *[0-9]+ (pass|fail|skip)$' test.log | sed 's/^/  /' || true
[ "$st" = 0 ] || { cat test.log >&2; echo "install-test: the parity test failed" >&2; exit 1; }

echo "== the README's Use examples"
for f in use*.ts; do echo "  bun $f:"; bun "$f" 2>&1 | sed 's/^/    /'; done

echo "== bun build --target=bun and --compile, run without node_modules"
bun main.ts 2>/dev/null | sed 's/^/  bun main.ts: /'
bun build --target=bun main.ts --outdir dist >/dev/null
bun build --compile main.ts --outfile mlxn-app 2>&1 | tail -n 1 | sed 's/^ */  /'
mv node_modules node_modules.away
trap 'mv "$app/node_modules.away" "$app/node_modules" 2>/dev/null || true; [ "${KEEP:-}" = 1 ] || rm -rf "$work"' EXIT
out="$(bun dist/main.js 2>/dev/null)"
echo "  bun dist/main.js: $out"
case "$out" in *"$app/dist/"*) ;; *) echo "install-test: the bundle did not load the library copied next to it" >&2; exit 1 ;; esac
out="$(./mlxn-app 2>/dev/null)"
echo "  ./mlxn-app: $out"
case "$out" in *'/$bunfs/'*) ;; *) echo "install-test: the executable did not load its embedded library" >&2; exit 1 ;; esac
mv node_modules.away node_modules
echo "install-test: passed"
