# PyTorch beside bench/matmul.ts on the GPU machine, same shapes: y = x W^T
# by F.linear (cuBLAS; torch.matmul(x, W.T) is the same call) in eager mode
# and under torch.compile, timed with CUDA events around `iters` calls
# (median of 5). Measured in the same run, the peaks every row is a fraction
# of: bf16 tensor-core TFLOP/s (the best of torch.matmul at 8192^3 and
# 16384 x 16384 x 8192) and the copy bandwidth (a 1 GiB device-to-device
# copy, bytes read + written). Pass them to matmul.ts:
#   python3 bench/matmul_peers.py
#   bun run bench/matmul.ts --peak-tflops <peak> --copy-gbs <copy>
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
import torch
import torch.nn.functional as F
import ggml_torch
from quantized_torch import dequantize, random_affine

from cuda_timing import timed as cuda_timed

dev = "cuda"
torch.backends.cuda.matmul.allow_tf32 = False


def timed(fn, iters=20):
    return cuda_timed(fn, iters)


print("device:", torch.cuda.get_device_name(), "torch", torch.__version__)
src = torch.empty(2**28, dtype=torch.float32, device=dev)
dst = torch.empty_like(src)
copy_gbs = 2 * src.numel() * 4 / timed(lambda: dst.copy_(src), 10) / 1e3
del src, dst
peak = 0.0
for m, n, k in [(8192, 8192, 8192), (16384, 16384, 8192)]:
    a = torch.randn(m, k, dtype=torch.bfloat16, device=dev)
    b = torch.randn(k, n, dtype=torch.bfloat16, device=dev)
    peak = max(peak, 2 * m * n * k / timed(lambda: torch.matmul(a, b), 10) / 1e6)
    del a, b
print(f"peak bf16 {peak:.1f} TFLOP/s (torch.matmul), copy {copy_gbs:.0f} GB/s")

size = {torch.bfloat16: 2, torch.float16: 2, torch.float32: 4}


def row(name, us, flops, nbytes, memory_bound):
    floor = nbytes / copy_gbs / 1e3 if memory_bound else flops / peak / 1e6
    print(f"{name:64s} {us:10.2f} us  {flops / us / 1e6:7.1f} TFLOP/s  {nbytes / us / 1e3:5.0f} GB/s"
          f"  floor {floor:9.2f} us ({100 * floor / us:.0f}% of it)")


def dense(label, dt, m, n, k):
    x = torch.randn(m, k, dtype=dt, device=dev) * 0.5
    w = torch.randn(n, k, dtype=dt, device=dev) * 0.5
    flops, nbytes = 2 * m * n * k, (n * k + m * k + m * n) * size[dt]
    name = f"{label} {str(dt)[6:]} m={m} n={n} k={k}"
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
x = torch.randn(1, 5376, device=dev)
w = torch.randn(262144, 5376, dtype=torch.bfloat16, device=dev)
row("F.linear(x, W.float()) lm_head f32 x bf16 W m=1 n=262144 k=5376",
    timed(lambda: F.linear(x, w.float()), 5), 2 * 262144 * 5376, 2 * 262144 * 5376 + 4 * (5376 + 262144), True)
row("F.linear(x.bfloat16(), W) lm_head f32 x bf16 W m=1 n=262144 k=5376",
    timed(lambda: F.linear(x.bfloat16(), w).float(), 20), 2 * 262144 * 5376, 2 * 262144 * 5376 + 4 * (5376 + 262144), True)
del x, w
x = torch.randn(4096, 4096, device=dev)
w = torch.randn(4096, 4096, dtype=torch.bfloat16, device=dev)
row("F.linear(x.bfloat16(), W).float() square f32 x bf16 W m=4096 n=4096 k=4096",
    timed(lambda: F.linear(x.bfloat16(), w).float(), 10), 2 * 4096**3, 2 * 4096**2 + 8 * 4096**2, False)


# ---- quantized_matmul: MLX affine quantization ----


def quantized(label, dt, bits, gs, m, n, k):
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
