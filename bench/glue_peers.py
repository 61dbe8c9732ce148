# PyTorch eager beside bench/glue.ts on the GPU machine, same shapes, timed
# with CUDA events around `iters` calls (median of 5), and the copy ceiling
# (a 1 GiB device-to-device copy, bytes read + written). The sample family's
# rows (sample_cases) time PyTorch eager and torch.compile of each computation.
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


# ---- sample: argmax, top-k, softmax_sample, the sampler, Philox (bench/glue.ts sampleCases) ----
# The same shapes and byte floors as ours; each computation eager and under
# torch.compile. The sampler is Hugging Face's order (repetition penalty,
# temperature, top-k, top-p, min-p), drawn with the exponential trick
# (argmax of p / Exp(1), the draw vLLM uses), which compiles without a graph break.
def sample_cases():
    vocab = 262144

    def both(name, fn, nbytes, iters=50):
        report(f"torch {name}", timed(fn, iters), nbytes)
        compiled = torch.compile(fn)
        report(f"torch.compile {name}", timed(compiled, iters), nbytes)

    def hf_sample(x, prev, t, k, p, min_p, rp):
        if prev is not None:
            s = torch.gather(x, 1, prev)
            x = x.scatter(1, prev, torch.where(s < 0, s * rp, s / rp))
        x = x / t
        if k == 0 and p >= 1 and min_p == 0:
            probs = torch.softmax(x, -1)
            q = torch.empty_like(probs).exponential_()
            return (probs / q).argmax(-1)
        v, i = torch.topk(x, k, -1) if k > 0 else torch.sort(x, -1, descending=True)
        probs = torch.softmax(v, -1)
        if p < 1:
            probs = torch.where(probs.cumsum(-1) - probs < p, probs, 0)
        if min_p > 0:
            probs = torch.where(probs >= min_p * probs[:, :1], probs, 0)
        q = torch.empty_like(probs).exponential_()
        return i.gather(1, (probs / q).argmax(-1, keepdim=True))

    for rows in (64, 1):
        x = torch.rand(rows, vocab, device=dev) * 4 - 2
        both(f"argmax f32 [{rows}, {vocab}] (torch.max)", lambda: torch.max(x, -1), 4 * x.numel())
        k = 256 if rows == 1 else 64
        both(f"top_k f32 [{rows}, {vocab}] k {k}", lambda: torch.topk(x, k, -1), 4 * x.numel() + 8 * rows * k)
    configs = [
        ("T 1, top-k 64, top-p 0.95 (Gemma 4)", dict(t=1.0, k=64, p=0.95, min_p=0.0, rp=None), 6.0),
        ("T 0.7, top-k 20, top-p 0.8, rp 1.05 x 64 ids (Qwen3.6)", dict(t=0.7, k=20, p=0.8, min_p=0.0, rp=1.05), 6.0),
        ("T 1, no filter", dict(t=1.0, k=0, p=1.0, min_p=0.0, rp=None), 6.0),
        ("T 1, top-p 0.95 alone, N(0, 36) logits", dict(t=1.0, k=0, p=0.95, min_p=0.0, rp=None), 6.0),
        ("T 1, top-p 0.95 alone, N(0, 4) logits (whole-row path)", dict(t=1.0, k=0, p=0.95, min_p=0.0, rp=None), 2.0),
    ]
    for rows in (64, 1):
        prev = (torch.arange(rows * 64, device=dev).view(rows, 64) * 40503) % vocab
        for what, c, sigma in (configs if rows == 1 else configs[:1]):
            x = torch.randn(rows, vocab, device=dev) * sigma
            pr = prev if c["rp"] is not None else None
            both(f"sample [{rows}, {vocab}] {what}",
                 lambda: hf_sample(x, pr, c["t"], c["k"], c["p"], c["min_p"], c["rp"] or 1.0), 4 * x.numel())
    x = torch.randn(vocab, device=dev) * 6
    r = torch.tensor([0.5], device=dev)
    both(f"softmax_sample f32 [{vocab}] (softmax, cumsum, searchsorted)",
         lambda: torch.searchsorted(torch.softmax(x, -1).cumsum(-1), r), 8 * vocab)
    n = 2 ** 22
    bits = torch.empty(n, 4, dtype=torch.int32, device=dev)
    both(f"philox4x32 [{n}, 4] (random_ on int32, PyTorch's Philox)", lambda: bits.random_(), 16 * n)


sample_cases()
