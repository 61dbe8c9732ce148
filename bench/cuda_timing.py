# What the PyTorch peer scripts (glue_peers.py, matmul_peers.py, attention_peers.py) share: the
# time of a call, with CUDA events around `iters` back-to-back calls after one
# warm-up call, the median of 5 such samples, in microseconds; the device's
# peaks that their rows are fractions of.
import torch


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


def peaks(dev="cuda"):
    """The bf16 peak in TFLOP/s (torch.matmul, the best of two large shapes) and the copy bandwidth in GB/s
    (a 1 GiB f32 device copy, bytes read + written)."""
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
    return peak, copy_gbs
