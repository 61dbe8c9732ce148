# PyTorch beside bench/decode_products.ts's dense rows on the GPU machine:
# y = F.linear(x, W) at one token (cuBLAS's matrix-vector product), eager
# and under torch.compile, over weight sets read in turn so that none is in
# L2 when read (decode_products.ts's rule: sets enough to pass twice the
# L2, at least 4, at most 64), timed as the peer scripts time a call
# (cuda_timing.timed: CUDA events around back-to-back calls, the median of
# 5), per product. Beside each, its rate over the weight's bytes (plus x
# and y) over the copy bandwidth measured in the same run. x, W and y are
# bf16 as a PyTorch model keeps them (ours: hf2q_dense_gemv_bf16_f32_4
# takes f32 x and y, 4 bytes a value more of x and y, under 0.1 % of these
# weights); the f32 router as f32.
#   python3 bench/decode_peers.py [--only TEXT] [--l2-mb 50]
import sys

import torch
import torch.nn.functional as F

from cuda_timing import peaks, timed

dev = "cuda"
torch.backends.cuda.matmul.allow_tf32 = False


def arg(name, default=None):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


ONLY = arg("--only")
L2_BYTES = float(arg("--l2-mb", 50)) * 1e6

# decode_products.ts's dense rows: (name, dtype, n, k)
ROWS = [
    ("router", torch.bfloat16, 257, 2048),
    ("gemma4 router", torch.float32, 128, 2816),
    ("bf16 Qwen3.6 up", torch.bfloat16, 17408, 5120),
    ("bf16 Qwen3.6 down", torch.bfloat16, 5120, 17408),
    ("bf16 Gemma 4 up", torch.bfloat16, 21504, 5376),
]

print("device:", torch.cuda.get_device_name(), "torch", torch.__version__)
_, copy_gbs = peaks(dev)
print(f"copy (1 GiB f32 device copy, read + write) {copy_gbs:.0f} GB/s")
print("case | sets | F.linear eager us | of copy | torch.compile us | of copy")
for name, dt, n, k in ROWS:
    if ONLY is not None and ONLY not in name:
        continue
    size = torch.finfo(dt).bits // 8
    nbytes = n * k * size + (n + k) * size
    sets = min(64, max(4, -(-int(2 * L2_BYTES) // nbytes)))
    ws = [(torch.rand(n, k, device=dev) * 0.1 - 0.05).to(dt) for _ in range(sets)]
    x = (torch.rand(1, k, device=dev) * 2 - 1).to(dt)
    compiled = torch.compile(lambda a, w: F.linear(a, w))
    out = {}
    for label, fn in [("eager", lambda a, w: F.linear(a, w)), ("compile", compiled)]:
        i = [0]

        def step(fn=fn):
            fn(x, ws[i[0]])
            i[0] = (i[0] + 1) % sets

        out[label] = timed(step, 8 * sets)
    rate = lambda us: nbytes / us / 1e3 / copy_gbs
    dtn = str(dt).replace("torch.", "").replace("bfloat16", "bf16").replace("float32", "f32")
    print(f"{name} {dtn} [{n}, {k}] | {sets} | {out['eager']:.2f} | {rate(out['eager']):.2f} | {out['compile']:.2f} | {rate(out['compile']):.2f}")
    del ws
