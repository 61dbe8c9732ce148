# The peers of bench/weights.ts on the GPU machine, at the same sizes
# (Qwen3.6-35B-A3B: 40 layers, 256 experts, hidden 2048), median of 5 (3 for
# loads), printed in the same columns:
#
# - safetensors header: safe_open + keys() over the 31k HF names (one
#   element per tensor, as bench/weights.ts writes them);
# - load of one layer's experts.gate_up_proj [256, 1024, 2048] bf16 (1 GiB):
#   safetensors.torch.load_file(path, device="cuda"), and safe_open's
#   get_tensor(...).to("cuda");
# - the floors of a load into the GPU: 1 GiB host-to-device copies from
#   pinned and from pageable memory, and the device-to-device copy ceiling;
# - gguf-py's GGUFReader over the Qwen3.6 GGUF names with a 248320-token
#   tokenizer, when the gguf package is installed.
#
# torch.compile has nothing to compile here (loading runs no computation), so
# these rows have no compiled twin.
#   python3 bench/weights_peers.py
import os
import statistics
import tempfile
import time

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

dev = "cuda"
LAYERS, EXPERTS, VOCAB = 40, 256, 248320
TYPES = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(LAYERS)]


def timed_ms(fn, reps=5):
    ts = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def report(name, ms, nbytes):
    print(f"{name:64s} {ms:10.2f} ms  {nbytes / 1e6:8.1f} MB  {nbytes / ms / 1e6:7.2f} GB/s")


def qwen_names():
    p = "model.language_model."
    names = [f"{p}embed_tokens.weight", f"{p}norm.weight", "lm_head.weight"]
    for i, t in enumerate(TYPES):
        b = f"{p}layers.{i}."
        names += [f"{b}input_layernorm.weight", f"{b}post_attention_layernorm.weight"]
        if t == "linear_attention":
            names += [f"{b}linear_attn.{n}" for n in ["in_proj_qkv.weight", "in_proj_z.weight", "in_proj_b.weight", "in_proj_a.weight",
                                                      "conv1d.weight", "dt_bias", "A_log", "norm.weight", "out_proj.weight"]]
        else:
            names += [f"{b}self_attn.{n}.weight" for n in ["q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm"]]
        names += [f"{b}mlp.gate.weight", f"{b}mlp.shared_expert_gate.weight"]
        names += [f"{b}mlp.shared_expert.{n}_proj.weight" for n in ["gate", "up", "down"]]
        names += [f"{b}mlp.experts.{e}.{n}_proj.weight" for e in range(EXPERTS) for n in ["gate", "up", "down"]]
    return names


print("device:", torch.cuda.get_device_name())
with tempfile.TemporaryDirectory() as d:
    # ---- safetensors header ----
    names = qwen_names()
    header_path = os.path.join(d, "names.safetensors")
    save_file({n: torch.ones(1, dtype=torch.uint8) for n in names}, header_path)
    header_bytes = os.path.getsize(header_path) - len(names)

    def keys():
        with safe_open(header_path, framework="pt") as f:
            return list(f.keys())

    report(f"safetensors safe_open + keys(), Qwen3.6 HF names ({len(names)} tensors)", timed_ms(keys), header_bytes)

    # ---- load of 1 GiB of experts ----
    shape = (EXPERTS, 1024, 2048)
    experts_path = os.path.join(d, "experts.safetensors")
    name = "model.language_model.layers.0.mlp.experts.gate_up_proj"
    save_file({name: torch.randn(shape, dtype=torch.bfloat16)}, experts_path)
    n = 2 * shape[0] * shape[1] * shape[2]
    report(f"safetensors load_file(device=cuda) [{shape[0]}, {shape[1]}, {shape[2]}] bf16",
           timed_ms(lambda: load_file(experts_path, device=dev), 3), 2 * n)

    def get_tensor():
        with safe_open(experts_path, framework="pt") as f:
            return f.get_tensor(name).to(dev)

    report("safetensors safe_open get_tensor().to(cuda), the same", timed_ms(get_tensor, 3), 2 * n)

    # ---- floors ----
    pinned = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    pageable = torch.empty(n, dtype=torch.uint8)
    gpu = torch.empty(n, dtype=torch.uint8, device=dev)
    gpu2 = torch.empty_like(gpu)
    report("host-to-device copy, pinned (floor of a load)", timed_ms(lambda: gpu.copy_(pinned, non_blocking=True), 3), 2 * n)
    report("host-to-device copy, pageable", timed_ms(lambda: gpu.copy_(pageable), 3), 2 * n)
    report("device-to-device copy (ceiling)", timed_ms(lambda: gpu2.copy_(gpu), 3), 2 * n)

    # ---- gguf-py ----
    try:
        import gguf
        import numpy as np
    except ImportError:
        print("gguf-py not installed: no GGUFReader row")
    else:
        gguf_path = os.path.join(d, "names.gguf")
        w = gguf.GGUFWriter(gguf_path, "qwen35moe")
        w.add_token_list([f"tok{i}" for i in range(VOCAB)])
        w.add_token_merges([f"a{i} b{i}" for i in range(VOCAB - 256)])
        w.add_token_types([0] * VOCAB)
        for i, t in enumerate(TYPES):
            b = f"blk.{i}."
            attn = (["attn_qkv.weight", "attn_gate.weight", "ssm_beta.weight", "ssm_alpha.weight", "ssm_conv1d.weight", "ssm_dt.bias",
                     "ssm_a", "ssm_norm.weight", "ssm_out.weight"] if t == "linear_attention" else
                    ["attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight", "attn_q_norm.weight", "attn_k_norm.weight"])
            for n2 in ["attn_norm.weight", "post_attention_norm.weight", *attn, "ffn_gate_inp.weight", "ffn_gate_inp_shexp.weight",
                       "ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight", "ffn_gate_exps.weight",
                       "ffn_up_exps.weight", "ffn_down_exps.weight"]:
                w.add_tensor(b + n2, np.ones(1, dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        report(f"gguf-py GGUFReader, Qwen3.6 names + {VOCAB}-token tokenizer",
               timed_ms(lambda: gguf.GGUFReader(gguf_path)), os.path.getsize(gguf_path))
