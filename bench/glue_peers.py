# PyTorch eager (and, for the dense rows, torch.compile) beside bench/glue.ts
# on the GPU machine, same shapes, timed
# with CUDA events around `iters` calls (median of 5), and the copy ceiling
# (a 1 GiB device-to-device copy, bytes read + written).
#   python3 bench/glue_peers.py
import torch
import torch.nn.functional as F

dev = "cuda"


def timed(fn, iters=50):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / iters)
    return sorted(ts)[2]


def report(name, us, nbytes):
    print(f"{name:52s} {us:9.2f} us  {nbytes / 1e6:8.1f} MB  {nbytes / us / 1e3:5.0f} GB/s")


print("device:", torch.cuda.get_device_name())
src = torch.empty(2**28, dtype=torch.float32, device=dev)
dst = torch.empty_like(src)
report("copy 1 GiB (ceiling)", timed(lambda: dst.copy_(src), 10), 2 * src.numel() * 4)
del src, dst
for dt, name in [(torch.bfloat16, "bf16"), (torch.float32, "f32")]:
    x = torch.randn(16384, 5376, dtype=dt, device=dev)
    w = torch.randn(5376, dtype=dt, device=dev)
    report(f"torch rms_norm {name} [16384, 5376]", timed(lambda: F.rms_norm(x, (5376,), w, 1e-6)), 2 * x.numel() * x.element_size())
    x1 = x[:1].contiguous()
    report(f"torch rms_norm {name} [1, 5376] (decode)", timed(lambda: F.rms_norm(x1, (5376,), w, 1e-6)), 2 * x1.numel() * x1.element_size())
s = torch.randn(32 * 2048, 2048, device=dev)
mask = torch.triu(torch.full((2048, 2048), float("-inf"), device=dev), 1).to(torch.bfloat16)
def smx():
    v = torch.tanh(s * 0.0884 / 50) * 50
    return torch.softmax(v.view(32, 2048, 2048) + mask.float(), -1)
report("torch softmax f32 scale+softcap+mask [32x2048, 2048]", timed(smx, 10), 8 * s.numel() + 2 * mask.numel())
for r, c, dt in [(4096, 8192, torch.bfloat16), (64, 262144, torch.float32), (1, 262144, torch.float32)]:
    x = torch.randn(r, c, dtype=dt, device=dev)
    report(f"torch softmax {str(dt)[6:]} [{r}, {c}]", timed(lambda: torch.softmax(x, -1)), 2 * x.numel() * x.element_size())
x = torch.randn(64 * 262144, dtype=torch.bfloat16, device=dev)
report("torch softcap bf16 [16777216] cap 30", timed(lambda: torch.tanh(x / 30) * 30), 4 * x.numel())


# ---- dense: decode products (F.linear = cuBLAS, eager and torch.compile) ----
def dense_cases():
    linear = torch.compile(lambda a, b: F.linear(a, b))
    for m in (1, 8):
        x = torch.randn(m, 5120, dtype=torch.bfloat16, device=dev)
        w = torch.randn(17408, 5120, dtype=torch.bfloat16, device=dev)
        nbytes = 2 * (w.numel() + x.numel() + m * 17408)
        report(f"torch F.linear bf16 [{m}, 5120] x [17408, 5120]^T", timed(lambda: F.linear(x, w)), nbytes)
        report(f"compile F.linear bf16 [{m}, 5120] x [17408, 5120]^T", timed(lambda: linear(x, w)), nbytes)
    x = torch.randn(1, 5376, device=dev)
    w = torch.randn(262144, 5376, dtype=torch.bfloat16, device=dev)
    nbytes = 2 * w.numel() + 4 * (5376 + 262144)
    report("torch F.linear(x.bfloat16(), W) [1, 5376] x [262144, 5376]^T", timed(lambda: F.linear(x.bfloat16(), w).float(), 20), nbytes)
    report("compile F.linear(x.bfloat16(), W) [1, 5376] x [262144, 5376]^T", timed(lambda: linear(x.bfloat16(), w).float(), 20), nbytes)


dense_cases()
