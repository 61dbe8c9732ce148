# What the PyTorch peer scripts (glue_peers.py, matmul_peers.py) share: the
# time of a call, with CUDA events around `iters` back-to-back calls after one
# warm-up call, the median of 5 such samples, in microseconds.
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
