# PyTorch beside bench/matmul.ts on the GPU machine, same shapes: y = x W^T
# by F.linear (cuBLAS; torch.matmul(x, W.T) is the same call) in eager mode
# and under torch.compile, timed with CUDA events around `iters` calls
# (median of 5). Measured in the same run, the peaks every row is a fraction
# of: bf16 tensor-core TFLOP/s (the best of torch.matmul at 8192^3 and
# 16384 x 16384 x 8192) and the copy bandwidth (a 1 GiB device-to-device
# copy, bytes read + written). Pass them to matmul.ts:
#   python3 bench/matmul_peers.py [--only TEXT]...
#   bun run bench/matmul.ts --peak-tflops <peak> --copy-gbs <copy>
# --only (repeatable), as matmul.ts's: the cases whose name holds a TEXT.
# Floors: matrix shapes 2 m n k / peak; decode shapes (m <= 8) the bytes of
# the weight, x and y / copy bandwidth.
#
# GGUF rows (bench/matmul.ts's ggmlCases): F.linear on the dequantized bf16
# weight (x in bf16), and the format's dequantization in torch
# (bench/ggml_torch.py) followed by F.linear, eager and compiled; floor
# column: the blocks, x and y (f32, as ours) over the copy bandwidth at
# decode, 2 m n k / peak for prefill.
#
# Quantized rows (bench/matmul.ts's quantized cases, MLX's affine format):
# F.linear on the dequantized bf16 weight (the bf16 floor: what a dense
# model of the same shape costs), and MLX's dequantization written in torch
# followed by F.linear, eager and compiled (dequantize-then-matmul, the peer
# of the quantized prefill rows). Their floor column is the quantized one:
# the packed words, scales and biases, x and y over the copy bandwidth.
import sys

import torch
import torch.nn.functional as F
import ggml_torch
from quantized_torch import dequantize, random_affine

from cuda_timing import peaks, timed as cuda_timed

dev = "cuda"
torch.backends.cuda.matmul.allow_tf32 = False


ONLY = [sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "--only"]


def wanted(name):
    return not ONLY or any(t in name for t in ONLY)


def timed(fn, iters=20):
    return cuda_timed(fn, iters)


print("device:", torch.cuda.get_device_name(), "torch", torch.__version__)
peak, copy_gbs = peaks(dev)
print(f"peak bf16 {peak:.1f} TFLOP/s (torch.matmul), copy {copy_gbs:.0f} GB/s")

size = {torch.bfloat16: 2, torch.float16: 2, torch.float32: 4}


def row(name, us, flops, nbytes, memory_bound):
    floor = nbytes / copy_gbs / 1e3 if memory_bound else flops / peak / 1e6
    print(f"{name:64s} {us:10.2f} us  {flops / us / 1e6:7.1f} TFLOP/s  {nbytes / us / 1e3:5.0f} GB/s"
          f"  floor {floor:9.2f} us ({100 * floor / us:.0f}% of it)")


def dense(label, dt, m, n, k):
    name = f"{label} {str(dt)[6:]} m={m} n={n} k={k}"
    if not wanted(name):
        return
    x = torch.randn(m, k, dtype=dt, device=dev) * 0.5
    w = torch.randn(n, k, dtype=dt, device=dev) * 0.5
    flops, nbytes = 2 * m * n * k, (n * k + m * k + m * n) * size[dt]
    iters = 5 if flops > 1e12 else 20
    row(f"F.linear {name}", timed(lambda: F.linear(x, w), iters), flops, nbytes, m <= 8)
    compiled = torch.compile(lambda a, b: F.linear(a, b))
    row(f"compile {name}", timed(lambda: compiled(x, w), iters), flops, nbytes, m <= 8)
    del x, w


for dt in (torch.bfloat16, torch.float16, torch.float32):
    dense("square", dt, 4096, 4096, 4096)
for m in (1, 8, 512, 8192):
    dense("Qwen3.6 up", torch.bfloat16, m, 17408, 5120)
for m in (1, 512, 8192):
    dense("Qwen3.6 down", torch.bfloat16, m, 5120, 17408)
for m in (1, 8, 512, 8192):
    dense("Gemma 4 up", torch.bfloat16, m, 21504, 5376)
for m in (512, 8192):
    dense("Gemma 4 down", torch.bfloat16, m, 5376, 21504)
dense("Gemma 4 lm_head", torch.bfloat16, 1, 262144, 5376)
# mlx-native's f32-activation kernels: f32 x, bf16 W, f32 y (PyTorch upcasts W or casts x).
if wanted("lm_head f32 x bf16 W m=1 n=262144 k=5376"):
    x = torch.randn(1, 5376, device=dev)
    w = torch.randn(262144, 5376, dtype=torch.bfloat16, device=dev)
    row("F.linear(x, W.float()) lm_head f32 x bf16 W m=1 n=262144 k=5376",
        timed(lambda: F.linear(x, w.float()), 5), 2 * 262144 * 5376, 2 * 262144 * 5376 + 4 * (5376 + 262144), True)
    row("F.linear(x.bfloat16(), W) lm_head f32 x bf16 W m=1 n=262144 k=5376",
        timed(lambda: F.linear(x.bfloat16(), w).float(), 20), 2 * 262144 * 5376, 2 * 262144 * 5376 + 4 * (5376 + 262144), True)
    del x, w
if wanted("square f32 x bf16 W m=4096 n=4096 k=4096"):
    x = torch.randn(4096, 4096, device=dev)
    w = torch.randn(4096, 4096, dtype=torch.bfloat16, device=dev)
    row("F.linear(x.bfloat16(), W).float() square f32 x bf16 W m=4096 n=4096 k=4096",
        timed(lambda: F.linear(x.bfloat16(), w).float(), 10), 2 * 4096**3, 2 * 4096**2 + 8 * 4096**2, False)
    del x, w


# ---- quantized_matmul: MLX affine quantization ----


def quantized(label, dt, bits, gs, m, n, k):
    if not wanted(f"{label} q{bits} g{gs} {str(dt)[6:]} m={m} n={n} k={k}"):
        return
    x = torch.randn(m, k, dtype=dt, device=dev) * 0.5
    wq, scales, biases = random_affine(n, k, bits, gs, dt, dev)
    w = dequantize(wq, scales, biases, bits, gs)
    flops = 2 * m * n * k
    nbytes = n * k * bits // 8 + (2 * n * k // gs + m * k + m * n) * size[dt]
    name = f"{label} q{bits} g{gs} {str(dt)[6:]} m={m} n={n} k={k}"
    iters = 5 if flops > 1e12 else 20
    row(f"F.linear dequantized W {name}", timed(lambda: F.linear(x, w), iters), flops, nbytes, m <= 8)
    deq = lambda: F.linear(x, dequantize(wq, scales, biases, bits, gs))
    row(f"dequant+F.linear {name}", timed(deq, iters), flops, nbytes, m <= 8)
    try:
        compiled = torch.compile(lambda a, q, s, b: F.linear(a, dequantize(q, s, b, bits, gs)))
        row(f"compile dequant+F.linear {name}", timed(lambda: compiled(x, wq, scales, biases), iters), flops, nbytes, m <= 8)
    except Exception as e:  # a compile failure costs its row, not the run
        print(f"compile dequant+F.linear {name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    del x, wq, scales, biases, w


quantized("square", torch.bfloat16, 4, 64, 1, 4096, 4096)
quantized("square", torch.bfloat16, 4, 64, 4096, 4096, 4096)
for m in (1, 8, 512, 8192):
    quantized("Qwen3.6 up", torch.bfloat16, 4, 64, m, 17408, 5120)
quantized("Qwen3.6 down", torch.bfloat16, 4, 64, 1, 5120, 17408)
for bits in (4, 6, 8):
    quantized("Gemma 4 up", torch.bfloat16, bits, 64, 1, 21504, 5376)
quantized("Gemma 4 up", torch.float16, 4, 32, 1, 21504, 5376)
quantized("Gemma 4 up", torch.bfloat16, 4, 64, 8192, 21504, 5376)


# ---- quantized_matmul_ggml: GGUF blocks (bench/matmul.ts's ggmlCases) ----


def ggml(label, t, m, n, k):
    if not wanted(f"{label} {t} m={m} n={n} k={k}"):
        return
    x = torch.randn(m, k, dtype=torch.bfloat16, device=dev) * 0.5
    raw = ggml_torch.random_blocks(t, n, k, dev)
    w = ggml_torch.dequantize(raw, t, k)
    flops = 2 * m * n * k
    nbytes = n * ggml_torch.row_bytes(t, k) + 4 * (m * k + m * n)
    name = f"{label} {t} m={m} n={n} k={k}"
    iters = 5 if flops > 1e12 else 20
    row(f"F.linear dequantized W {name}", timed(lambda: F.linear(x, w), iters), flops, nbytes, m <= 8)
    row(f"dequant+F.linear {name}", timed(lambda: F.linear(x, ggml_torch.dequantize(raw, t, k)), iters), flops, nbytes, m <= 8)
    try:
        compiled = torch.compile(lambda a, b: F.linear(a, ggml_torch.dequantize(b, t, k)))
        row(f"compile dequant+F.linear {name}", timed(lambda: compiled(x, raw), iters), flops, nbytes, m <= 8)
    except Exception as e:  # a compile failure costs its row, not the run
        print(f"compile dequant+F.linear {name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    del x, raw, w


for t in ggml_torch.QK:
    ggml("Qwen3.6 up", t, 1, 17408, 5120)
ggml("Qwen3.6 up", "Q4_K", 8, 17408, 5120)
for t in ("Q4_K", "Q6_K"):
    ggml("Qwen3.6 down", t, 1, 5120, 17408)
for t in ("Q4_K", "Q6_K", "Q8_0"):
    ggml("Gemma 4 up", t, 1, 21504, 5376)
for m in (512, 8192):
    ggml("Qwen3.6 up", "Q4_K", m, 17408, 5120)
ggml("Qwen3.6 up", "Q4_0", 512, 17408, 5120)
ggml("Gemma 4 up", "Q6_K", 8192, 21504, 5376)
# ---- end of quantized_matmul_ggml ----
# ---- moe: per-expert products (bench/matmul.ts's moe cases; floors and predictions: notes/moe-2026-11-26.md) ----
# The same routing as matmul.ts (its LCG, seeded alike). Peers on the
# dequantized bf16 expert weights [E, n, k] (the q4 rows' floor stays the
# quantized bytes of the distinct experts touched): decode shapes gather
# the routed experts' weights and multiply (torch.bmm), eager and compiled,
# and loop over the distinct experts as transformers' experts module does
# (F.linear per expert, a host sync for the routing); prefill shapes loop
# alike and, where this torch has it, run torch._grouped_mm over the pairs
# sorted by expert.


def routing(m, num_experts, top_k, seed):
    s = seed & 0xFFFFFFFF
    ids = []
    for _ in range(m):
        picked = []
        while len(picked) < top_k:
            s = (s * 1664525 + 1013904223) & 0xFFFFFFFF
            e = int(s / 2**32 * num_experts)
            if e not in picked:
                picked.append(e)
        ids += picked
    return ids


def moe(label, weight, form, gate_up, tokens, top_k, num_experts, n, k, down=False):
    gs, dt = 64, torch.bfloat16
    pair_ids = routing(tokens, num_experts, top_k, 0x5EED + tokens * 31 + num_experts)
    pairs = len(pair_ids)
    m = pairs if down else tokens
    ids = torch.tensor(pair_ids, device=dev)
    mats = 2 if gate_up else 1
    expert_bytes = n * k // 2 + 2 * n * k // gs * 2 if weight == "q4" else n * k * 2
    flops = 2 * pairs * n * k * mats
    nbytes = mats * len(set(pair_ids)) * expert_bytes + (m * k + pairs * n) * 2
    memory_bound = form == "vector" or nbytes / 3.35e3 > flops / 990e3
    name = f"{label} {weight} {form}{' gate_up' if gate_up else ''} pairs={pairs} E={num_experts} n={n} k={k}"
    if not wanted(name):
        return
    w = [(torch.rand(num_experts, n, k, dtype=dt, device=dev) - 0.5) for _ in range(mats)]
    x = torch.randn(m, k, dtype=dt, device=dev) * 0.5
    rows = torch.arange(pairs, device=dev) if down else torch.arange(pairs, device=dev) // top_k
    act = F.silu

    def finish(parts):
        return act(parts[0]) * parts[1] if gate_up else parts[0]

    def gather_bmm(x, ids):
        xp = x[rows].unsqueeze(-1)
        return finish([torch.bmm(wi[ids], xp).squeeze(-1) for wi in w])

    def loop(x, ids):
        out = torch.empty(pairs, n, dtype=dt, device=dev)
        for e in ids.unique().tolist():
            sel = (ids == e).nonzero().squeeze(-1)
            out[sel] = finish([F.linear(x[rows[sel]], wi[e]) for wi in w])
        return out

    iters = 5 if flops > 1e11 else 20
    if form == "vector":
        row(f"gather+bmm {name}", timed(lambda: gather_bmm(x, ids), iters), flops, nbytes, memory_bound)
        try:
            compiled = torch.compile(gather_bmm)
            row(f"compile gather+bmm {name}", timed(lambda: compiled(x, ids), iters), flops, nbytes, memory_bound)
        except Exception as e:  # a compile failure costs its row, not the run
            print(f"compile gather+bmm {name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    row(f"expert loop {name}", timed(lambda: loop(x, ids), iters), flops, nbytes, memory_bound)
    if form == "matrix" and hasattr(torch, "_grouped_mm"):
        order = ids.argsort(stable=True)
        offs = torch.bincount(ids, minlength=num_experts).cumsum(0).to(torch.int32)
        xs = x[rows[order]]
        wt = [wi.transpose(1, 2) for wi in w]
        try:
            grouped = lambda: finish([torch._grouped_mm(xs, wi, offs=offs) for wi in wt])
            row(f"torch._grouped_mm {name}", timed(grouped, iters), flops, nbytes, memory_bound)
        except Exception as e:
            print(f"torch._grouped_mm {name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    del w, x


for wt in ("q4", "bf16"):
    moe("8x top-8/512 gate_up", wt, "vector", True, 8, 8, 512, 512, 2048)
    moe("8x top-8/512 down", wt, "vector", False, 8, 8, 512, 2048, 512, True)
moe("8x top-8/512 gate", "q4", "vector", False, 8, 8, 512, 512, 2048)
moe("Qwen3.6 35B-A3B decode gate_up", "q4", "vector", True, 1, 8, 256, 512, 2048)
moe("Qwen3.6 35B-A3B decode down", "q4", "vector", False, 1, 8, 256, 2048, 512, True)
for wt in ("q4", "bf16"):
    moe("Qwen3.6 35B-A3B prefill 512 gate_up", wt, "matrix", True, 512, 8, 256, 512, 2048)
    moe("Qwen3.6 35B-A3B prefill 512 down", wt, "matrix", False, 512, 8, 256, 2048, 512, True)
moe("Qwen3.6 35B-A3B prefill 4096 gate_up", "q4", "matrix", True, 4096, 8, 256, 512, 2048)
moe("Gemma 4 26B-A4B decode gate_up", "q4", "vector", True, 1, 8, 128, 704, 2816)
moe("Gemma 4 26B-A4B prefill 512 gate_up", "q4", "matrix", True, 512, 8, 128, 704, 2816)
# ---- end of moe ----
# ---- moe, GGUF blocks (bench/matmul.ts's moeGgml cases) ----
# The same routing. Peers on the GGUF blocks [E, n, row bytes] in f32 (x and
# y f32, as ours): decode shapes gather the routed experts' blocks,
# dequantize them and multiply (torch.bmm), eager and compiled; prefill
# shapes loop over the distinct experts, dequantizing each expert once
# (F.linear per expert, a host sync for the routing). Floor: the distinct
# experts' blocks read once, x read, y written.


def moe_ggml(label, t, form, tokens, top_k, num_experts, n, k, down=False):
    pair_ids = routing(tokens, num_experts, top_k, 0x5EED + tokens * 31 + num_experts)
    pairs = len(pair_ids)
    m = pairs if down else tokens
    ids = torch.tensor(pair_ids, device=dev)
    distinct = len(set(pair_ids))
    flops = 2 * pairs * n * k
    nbytes = distinct * n * ggml_torch.row_bytes(t, k) + 4 * (m * k + pairs * n)
    memory_bound = form == "vector" or nbytes / 3.35e3 > flops / 990e3
    name = f"{label} {t} {form} pairs={pairs} E={num_experts} distinct={distinct} n={n} k={k}"
    if not wanted(name):
        return
    raw = ggml_torch.random_blocks(t, num_experts * n, k, dev).view(num_experts, n, -1)
    x = torch.randn(m, k, dtype=torch.float32, device=dev) * 0.5
    rows = torch.arange(pairs, device=dev) if down else torch.arange(pairs, device=dev) // top_k

    def gather_bmm(x, ids):
        w = ggml_torch.dequantize(raw[ids].reshape(pairs * n, -1), t, k, torch.float32).view(pairs, n, k)
        return torch.bmm(w, x[rows].unsqueeze(-1)).squeeze(-1)

    def loop(x, ids):
        out = torch.empty(pairs, n, dtype=torch.float32, device=dev)
        for e in ids.unique().tolist():
            sel = (ids == e).nonzero().squeeze(-1)
            out[sel] = F.linear(x[rows[sel]], ggml_torch.dequantize(raw[e], t, k, torch.float32))
        return out

    iters = 5 if flops > 1e11 else 20
    if form == "vector":
        row(f"dequant gather+bmm {name}", timed(lambda: gather_bmm(x, ids), iters), flops, nbytes, memory_bound)
        try:
            compiled = torch.compile(gather_bmm)
            row(f"compile dequant gather+bmm {name}", timed(lambda: compiled(x, ids), iters), flops, nbytes, memory_bound)
        except Exception as e:  # a compile failure costs its row, not the run
            print(f"compile dequant gather+bmm {name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    row(f"dequant expert loop {name}", timed(lambda: loop(x, ids), iters), flops, nbytes, memory_bound)
    del raw, x


moe_ggml("8x top-8/512 gate", "Q4_K", "vector", 8, 8, 512, 512, 2048)
moe_ggml("8x top-8/512 down", "Q4_K", "vector", 8, 8, 512, 2048, 512, True)
moe_ggml("Qwen3.6 35B-A3B decode gate", "Q4_K", "vector", 1, 8, 256, 512, 2048)
moe_ggml("Qwen3.6 35B-A3B prefill 512 gate", "Q4_K", "matrix", 512, 8, 256, 512, 2048)
moe_ggml("Qwen3.6 35B-A3B prefill 512 down", "Q4_K", "matrix", 512, 8, 256, 2048, 512, True)
# ---- end of moe, GGUF blocks ----
