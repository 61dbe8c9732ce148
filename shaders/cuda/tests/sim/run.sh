#!/usr/bin/env bash
# Runs a family's CUDA kernels on the CPU simulation (sim_runtime.h), no GPU
# needed: shaders/cuda/tests/sim/run.sh [driver] [big]
#   dense: the dense family (dense_driver.cpp; the Hopper tiles on the
#          simulation's wgmma model, or with SIM_DEFINES=-DMLXN_SIM_NO_WGMMA
#          on the mma.sync tiles a build without sm_90a runs)
#   glue:  rms_norm, l2_norm, ssm_norm_gate, softmax and gelu at the op's CUDA launches (glue_driver.cpp)
#   copy:  embedding and kv_cache_copy (copy_rows) at the op's launches, and the casts (copy_driver.cpp)
#   quantized_matmul: that family (quantized_matmul_driver.cpp)
#   quantized_matmul_ggml: that family (quantized_matmul_ggml_driver.cpp;
#          `variants` as the second argument runs only the int8 vector
#          engine's harness variants against the op's entry)
#   quantized_matmul_id_ggml: that family (quantized_matmul_id_ggml_driver.cpp)
#   flash_attn_prefill: that family (flash_attn_prefill.sh runs its variants)
#   flash_attn_vec: that family (flash_attn_vec_driver.cpp: every entry, rings, varlen)
#   sample: that family (sample_driver.cpp; `argmax` as the second argument
#           runs only argmax's cases, `top_k` top-k's, another name
#           fragment only the sampler cases holding it)
#   fused_norm: fused_norm_add_norms and fused_norm_moe_sum (fused_norm_driver.cpp)
#   moe:   moe_dispatch, quantized_matmul_id, dense_matmul_id and
#          moe_weighted_reduce (moe_driver.cpp)
#   rope:  rope_neox, rope_multi and fused_head_norm_rope, the one-pair
#          (one-row) entries and the `_heads` entries at the ops' launches
#          (rope_driver.cpp)
#   chunk_gated_delta_rule: the fused kkt / solve / w-u kernel and the three
#          steps it replaces, chunk_o and the state walk with its variants
#          (chunk_gated_delta_rule_driver.cpp; `inter` or `wy` as the second
#          argument runs only the walks or only the WY step)
# `big` adds large sizes. SIM_DEFINES (e.g. "-DMLXN_FC_301=1") go to the
# compiler, as the registry gives function constants to NVRTC.
# Needs g++ with C++20 and the CUDA headers (for the f16 / bf16 types).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
family="${1:-dense}"
out="$root/build/cuda/sim"
mkdir -p "$out"
cuda="${CUDA_HOME:-/usr/local/cuda}"
case "$family" in
  glue) families=rms_norm,l2_norm,ssm_norm_gate,softmax,gelu ;;
  copy) families=embedding,kv_cache_copy,elementwise ;;
  moe) families=moe_dispatch,quantized_matmul_id,dense_matmul_id,moe_weighted_reduce ;;
  rope) families=rope,rope_multi,fused_head_norm_rope ;;
  *) families="$family" ;;
esac
python3 "$here/build.py" "$root" "$families" "$out/sim_kernels.h"
bin="$out/${family}_driver$(echo "${SIM_DEFINES:-}" | tr -c 'A-Za-z0-9_\n' '_')"
g++ -std=c++20 -O1 ${SIM_DEFINES:-} -I"$cuda/include" -I"$here" -I"$out" "$here/${family}_driver.cpp" -o "$bin" -lpthread
"$bin" "${2:-}"
