#!/usr/bin/env bash
# The flash_attn_prefill family on the CPU simulation, one build per variant
# of its function constants (flash_attn_prefill_driver.cpp says what each
# covers): shaders/cuda/tests/sim/flash_attn_prefill.sh [big]
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
status=0
for defines in "" "-DMLXN_FC_301=1 -DMLXN_FC_304=1" "-DMLXN_FC_300=1 -DMLXN_FC_303=1 -DMLXN_FC_400=8 -DMLXN_FC_401=64" \
  "-DMLXN_FC_305=1 -DMLXN_FC_301=1"; do
  echo "== variant: ${defines:-none}"
  SIM_DEFINES="$defines" bash "$here/run.sh" flash_attn_prefill "${1:-}" || status=1
done
exit $status
