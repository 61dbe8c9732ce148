# PyTorch eager and torch.compile of the same computations beside
# bench/glue.ts on the GPU machine, same shapes, timed with CUDA events around
# `iters` calls (median of 5, bench/cuda_timing.py), and the copy ceiling (a
# 1 GiB device-to-device copy, bytes read + written).
#   python3 bench/glue_peers.py [--only TEXT]...
# (--only, repeatable: the rows whose name holds one of the TEXTs, as
# bench/glue.ts's --only; the copy ceiling always runs.)
import sys

import torch
import torch.nn.functional as F
import ggml_torch
from quantized_torch import dequantize, random_affine

from cuda_timing import timed

dev = "cuda"


only = [sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "--only"]


def wanted(name):
    return not only or any(o in name for o in only)


def report(name, us, nbytes):
    """One row; us is a time or a function that measures it (not run for a
    row that --only leaves out)."""
    if callable(us):
        if not wanted(name):
            return
        us = us()
    print(f"{name:52s} {us:9.2f} us  {nbytes / 1e6:8.1f} MB  {nbytes / us / 1e3:5.0f} GB/s")


print("device:", torch.cuda.get_device_name())
src = torch.empty(2**28, dtype=torch.float32, device=dev)
dst = torch.empty_like(src)
report("copy 1 GiB (ceiling)", timed(lambda: dst.copy_(src), 10), 2 * src.numel() * 4)
del src, dst
def eager_and_compiled(name, fn, nbytes, iters=50):
    """One row for PyTorch eager and one for torch.compile of the same function
    (compiled for this shape, so compilation is outside the timing)."""
    if not wanted(name):
        return
    report(f"torch {name}", lambda: timed(fn, iters), nbytes)
    try:
        us = timed(torch.compile(fn, dynamic=False), iters)
    except Exception as e:  # an Inductor failure costs its row, not the run
        print(f"torch.compile {name}: failed ({type(e).__name__})")
        return
    report(f"torch.compile {name}", us, nbytes)


# ---- rms_norm, softmax, softcap ----
def norm_softmax_cases():
    for dt, name in [(torch.bfloat16, "bf16"), (torch.float32, "f32")]:
        x = torch.randn(16384, 5376, dtype=dt, device=dev)
        w = torch.randn(5376, dtype=dt, device=dev)
        eager_and_compiled(f"rms_norm {name} [16384, 5376]", lambda x=x, w=w: F.rms_norm(x, (5376,), w, 1e-6),
                           2 * x.numel() * x.element_size())
        x1 = x[:1].contiguous()
        eager_and_compiled(f"rms_norm {name} [1, 5376] (decode)", lambda x1=x1, w=w: F.rms_norm(x1, (5376,), w, 1e-6),
                           2 * x1.numel() * x1.element_size())
        # Qwen3.6-35B-A3B's hidden rows (2048), one decode token.
        x2 = torch.randn(1, 2048, dtype=dt, device=dev)
        w2 = torch.randn(2048, dtype=dt, device=dev)
        eager_and_compiled(f"rms_norm {name} [1, 2048] (decode)", lambda x2=x2, w2=w2: F.rms_norm(x2, (2048,), w2, 1e-6),
                           2 * x2.numel() * x2.element_size())
    for tokens in (8192, 1):
        q = torch.randn(tokens, 32, 128, dtype=torch.bfloat16, device=dev)
        wq = torch.randn(128, dtype=torch.bfloat16, device=dev)
        tag = " (decode)" if tokens == 1 else ""
        eager_and_compiled(f"rms_norm_per_head bf16 [{tokens}, 32, 128]{tag}", lambda q=q, wq=wq: F.rms_norm(q, (128,), wq, 1e-6),
                           4 * q.numel())
    s = torch.randn(32 * 2048, 2048, device=dev)
    mask = torch.triu(torch.full((2048, 2048), float("-inf"), device=dev), 1).to(torch.bfloat16)

    def smx(s=s, mask=mask, heads=32, q=2048):
        v = torch.tanh(s * 0.0884 / 50) * 50
        return torch.softmax(v.view(heads, q, -1) + mask.float(), -1)

    eager_and_compiled("softmax f32 scale+softcap+mask [32x2048, 2048]", smx, 8 * s.numel() + 2 * mask.numel(), 10)
    s1 = torch.randn(32, 8192, device=dev)
    m1 = torch.zeros(1, 8192, dtype=torch.bfloat16, device=dev)
    eager_and_compiled("softmax f32 scale+softcap+mask [32x1, 8192] (decode)", lambda: smx(s1, m1, 32, 1), 8 * s1.numel() + 2 * m1.numel())
    for r, c, dt in [(4096, 8192, torch.bfloat16), (64, 262144, torch.float32), (1, 262144, torch.float32)]:
        x = torch.randn(r, c, dtype=dt, device=dev)
        tag = " (decode)" if r == 1 else ""
        eager_and_compiled(f"softmax {str(dt)[6:]} [{r}, {c}]{tag}", lambda x=x: torch.softmax(x, -1), 2 * x.numel() * x.element_size())
    x = torch.randn(64 * 262144, dtype=torch.bfloat16, device=dev)
    eager_and_compiled("softcap bf16 [16777216] cap 30", lambda: torch.tanh(x / 30) * 30, 4 * x.numel())


norm_softmax_cases()
# ---- end of rms_norm, softmax, softcap ----


# ---- the rope family ----
# bench/glue.ts ropeCases: the same shapes, positions and bytes, the math of
# the float64 references (ts/ops/rope.ts ropeRef and ropeNeoxRef,
# rope_multi.ts ropeMultiRef, fused_head_norm_rope.ts fusedHeadNormRopeRef):
# the frequencies computed once, as a model's rotary module holds them; the
# angles, the norm and the rotation in float32 at each call, cast to bf16.
def rope_cases():
    def neox(xf, t):
        """Pairs (x[i], x[i + d/2]) of float32 rows xf [tokens, heads, d], i < t.shape[-1], turned by the angles
        t [tokens, pairs]; the other elements copied."""
        h, r = xf.shape[-1] // 2, t.shape[-1]
        c, s = t.cos()[:, None], t.sin()[:, None]
        a, b = xf[..., :r], xf[..., h:h + r]
        return torch.cat([a * c - b * s, xf[..., r:h], a * s + b * c, xf[..., h + r:]], -1)

    def freqs(theta, pairs, denom):
        return theta ** (torch.arange(pairs, dtype=torch.float32, device=dev) * (-2 / denom))

    def imrope_axis(p, s):
        # ropeMultiAxis: sector k % 3 takes axis k % 3 while below 3 s[k % 3], else axis 3.
        sector = p % max(sum(s), 1)
        return sector % 3 if sector < 3 * s[sector % 3] else 3

    bf16 = torch.bfloat16
    for tokens in (8192, 1):
        tag = " (decode)" if tokens == 1 else ""
        pos = torch.arange(tokens, dtype=torch.int32, device=dev) + (8192 if tokens == 1 else 0)
        for heads, d, r, theta, label in [(16, 256, 64, 1e7, "Qwen3.6 full attn q"), (32, 256, 256, 1e4, "Gemma 4 sliding q")]:
            x = torch.randn(tokens, heads, d, dtype=bf16, device=dev)
            inv = freqs(theta, r // 2, d)
            eager_and_compiled(f"rope_neox bf16 [{tokens}, {heads}, {d}] rot {r} {label}{tag}",
                               lambda x=x, pos=pos, inv=inv: neox(x.float(), pos.float()[:, None] * inv).to(bf16), 4 * x.numel() + 4 * tokens)
        heads, d = 16, 256
        x = torch.randn(tokens, heads, d, dtype=bf16, device=dev)
        sections = [11, 11, 10, 0]
        axis = torch.tensor([imrope_axis(p, sections) for p in range(32)], device=dev)
        pos4 = pos.repeat(4, 1)
        inv = freqs(1e7, 32, 64)
        eager_and_compiled(f"rope_multi imrope bf16 [{tokens}, {heads}, {d}] rot 64 Qwen3.6 full attn q{tag}",
                           lambda x=x, pos4=pos4, axis=axis, inv=inv: neox(x.float(), pos4[axis].T.float() * inv).to(bf16),
                           4 * x.numel() + 16 * tokens)
        w = torch.randn(d, dtype=bf16, device=dev)
        inv = freqs(1e4, d // 2, d)
        eager_and_compiled(f"fused_head_norm_rope bf16 [{tokens}, {heads}, {d}] rot {d} Gemma 4 sliding q{tag}",
                           lambda x=x, w=w, pos=pos, inv=inv: neox(F.rms_norm(x.float(), (d,), w.float(), 1e-6), pos.float()[:, None] * inv).to(bf16),
                           4 * x.numel() + 2 * d + 4 * tokens)
    tokens, heads, d = 8192, 32, 128
    x = torch.randn(tokens * heads, d, dtype=bf16, device=dev)
    pos = torch.arange(tokens * heads, dtype=torch.int32, device=dev) // heads
    inv = freqs(1e4, d // 2, d)

    def normal():
        # Pairs (x[2i], x[2i + 1]) of each row turned by its position's angles.
        t = pos.float()[:, None] * inv
        c, s = t.cos(), t.sin()
        xf = x.float().unflatten(-1, (-1, 2))
        a, b = xf[..., 0], xf[..., 1]
        return torch.stack([a * c - b * s, a * s + b * c], -1).flatten(-2).to(bf16)

    eager_and_compiled(f"rope bf16 [{tokens}x{heads}, {d}]", normal, 4 * x.numel() + 4 * x.shape[0])


rope_cases()
# ---- end of the rope family ----


# ---- elementwise ----
# The residual stream of Gemma 4 31B (hidden 5376): a prefill of 8192 tokens
# and one decode token; eager and torch.compile (one compiled function per
# shape, so compilation is outside the timing). Bytes as bench/glue.ts.
def elementwise_cases():
    hidden = 5376
    dts = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
    for tokens in [8192, 1]:
        n = tokens * hidden
        shape = f"[{tokens}, {hidden}]" + (" (decode)" if tokens == 1 else "")
        rows = []
        for name, dt in [("bf16", torch.bfloat16), ("f32", torch.float32)]:
            a = torch.randn(tokens, hidden, dtype=dt, device=dev)
            b = torch.randn(tokens, hidden, dtype=dt, device=dev)
            size = a.element_size()
            rows.append((f"elementwise_add {name} {shape}", 3 * n * size, lambda a=a, b=b: a + b, None))
            if name == "f32":
                continue
            s = 5376 ** 0.5
            rows.append((f"elementwise_mul {name} {shape}", 3 * n * size, lambda a=a, b=b: a * b, None))
            rows.append((f"elementwise_add_scaled {name} {shape} s 0.5", 3 * n * size,
                         lambda a=a, b=b: a + 0.5 * b, lambda a=a, b=b: torch.add(a, b, alpha=0.5)))
            rows.append((f"scalar_mul {name} {shape} s sqrt(5376)", 2 * n * size, lambda a=a, s=s: a * s, None))
        xs = {k: torch.randn(tokens, hidden, device=dev).to(v) for k, v in dts.items()}
        for src, dst in [("f32", "bf16"), ("bf16", "f32"), ("f32", "f16"), ("f16", "f32"), ("f16", "bf16"), ("bf16", "f16")]:
            x, to = xs[src], dts[dst]
            rows.append((f"cast {src} -> {dst} {shape}", n * (x.element_size() + torch.finfo(to).bits // 8),
                         lambda x=x, to=to: x.to(to), None))
        for name, nbytes, fn, eager in rows:
            report(f"torch {name}", lambda: timed(eager or fn), nbytes)
            compiled = torch.compile(fn, dynamic=False)
            report(f"torch.compile {name}", lambda: timed(compiled), nbytes)


elementwise_cases()
# ---- end of elementwise ----


# ---- embedding ----
# Gemma 4 31B's table (262144 x 5376 bf16) scaled by sqrt(5376) in bf16, as
# Hugging Face does: 8192 tokens and one decode token. Bytes as bench/glue.ts.
def embedding_cases():
    vocab, hidden = 262144, 5376
    table = torch.randn(vocab, hidden, dtype=torch.bfloat16, device=dev)
    scale = torch.tensor(hidden**0.5, dtype=torch.bfloat16, device=dev)
    for tokens in [8192, 1]:
        ids = torch.randint(0, vocab, (tokens,), device=dev)
        tag = " (decode)" if tokens == 1 else ""
        eager_and_compiled(f"embedding bf16 [{tokens} tok, {hidden}]{tag}", lambda ids=ids: F.embedding(ids, table) * scale,
                           2 * tokens * hidden * 2 + 4 * tokens)


embedding_cases()
# ---- end of embedding ----


# ---- kv_cache_copy ----
# K and V [tokens, 8, 256] into head-major caches [8, 8192, 256]: a prefill of
# 8192 tokens (bf16 to bf16, f32 to f16) and one decode token at the last
# slot. Bytes as bench/glue.ts.
def kv_cache_copy_cases():
    heads, head_dim, capacity = 8, 256, 8192
    for tokens, src, dst in [(8192, torch.bfloat16, torch.bfloat16), (8192, torch.float32, torch.float16), (1, torch.bfloat16, torch.bfloat16)]:
        k = torch.randn(tokens, heads, head_dim, dtype=src, device=dev)
        v = torch.randn(tokens, heads, head_dim, dtype=src, device=dev)
        ck = torch.zeros(heads, capacity, head_dim, dtype=dst, device=dev)
        cv = torch.zeros_like(ck)
        pos = capacity - 1 if tokens == 1 else 0

        def copy(k=k, v=v, ck=ck, cv=cv, pos=pos):
            ck[:, pos:pos + k.shape[0]].copy_(k.transpose(0, 1))
            cv[:, pos:pos + v.shape[0]].copy_(v.transpose(0, 1))

        name = f"kv_cache_copy_seq {str(src)[6:]}->{str(dst)[6:]} K+V [{tokens} tok, {heads}, {head_dim}]" + (" (decode)" if tokens == 1 else "")
        eager_and_compiled(name, copy, 2 * k.numel() * (k.element_size() + ck.element_size()))


kv_cache_copy_cases()
# ---- end of kv_cache_copy ----


# ---- the gated activations ----
# bench/glue.ts's siluMulCases, geluCases and sigmoidMulCases: the same
# computation, bf16, a prefill of 8192 tokens and one decode token, eager and
# torch.compile. Eager runs the activation and the product as separate kernels
# (over .chunk views for the halves); torch.compile fuses them. Floor: 6 n
# bytes (gelu: 4 n).
def activation_cases():
    torch._dynamo.config.cache_size_limit = 64  # one compiled graph per function and shape

    def silu_mul(g, u):
        return F.silu(g) * u

    def gelu_tanh_mul(g, u):
        return F.gelu(g, approximate="tanh") * u

    def sigmoid_mul(g, x):
        return x * torch.sigmoid(g)

    def halves(f):
        def run(t):
            g, o = t.chunk(2, dim=-1)
            return f(g, o)
        return run

    ops = [("silu_mul", "Qwen3.6 MLP", 17408, silu_mul), ("gelu_tanh_mul", "Gemma 4 MLP", 21504, gelu_tanh_mul),
           ("sigmoid_mul", "Qwen3.6 attn gate", 4096, sigmoid_mul)]
    for name, label, dim, f in ops:
        for rows in (8192, 1):
            tag = " (decode)" if rows == 1 else ""
            n = rows * dim
            g = torch.randn(rows, dim, dtype=torch.bfloat16, device=dev)
            o = torch.randn(rows, dim, dtype=torch.bfloat16, device=dev)
            x = torch.randn(rows, 2 * dim, dtype=torch.bfloat16, device=dev)
            eager_and_compiled(f"{name} bf16 [{rows}, {dim}] {label}{tag}", lambda f=f, g=g, o=o: f(g, o), 6 * n)
            eager_and_compiled(f"{name}_halves bf16 [{rows}, 2x{dim}]{tag}", lambda h=halves(f), x=x: h(x), 6 * n)
            if name == "gelu_tanh_mul":
                eager_and_compiled(f"gelu bf16 [{rows}, {dim}]{tag}", lambda g=g: F.gelu(g, approximate="tanh"), 4 * n)


activation_cases()
# ---- end of the gated activations ----


# ---- sample: argmax, top-k, softmax_sample, the sampler, Philox (bench/glue.ts sampleCases) ----
# The same shapes and byte floors as ours; each computation eager and under
# torch.compile. The sampler is Hugging Face's order (repetition penalty,
# temperature, top-k, top-p, min-p), drawn with the exponential trick
# (argmax of p / Exp(1), the draw vLLM uses), which compiles without a graph break.
def sample_cases():
    vocab = 262144

    def both(name, fn, nbytes, iters=50):
        eager_and_compiled(name, fn, nbytes, iters)

    def hf_sample(x, prev, t, k, p, min_p, rp):
        if prev is not None:
            s = torch.gather(x, 1, prev)
            x = x.scatter(1, prev, torch.where(s < 0, s * rp, s / rp))
        if t == 0:
            return x.argmax(-1)
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
        ("T 0 (greedy)", dict(t=0.0, k=0, p=1.0, min_p=0.0, rp=None), 6.0),
        ("T 1, top-p 0.95 alone, N(0, 36) logits", dict(t=1.0, k=0, p=0.95, min_p=0.0, rp=None), 6.0),
        ("T 1, top-p 0.95 alone, N(0, 4) logits (whole-row path)", dict(t=1.0, k=0, p=0.95, min_p=0.0, rp=None), 2.0),
        ("T 1, min-p 0.02 alone, N(0, 36) logits", dict(t=1.0, k=0, p=1.0, min_p=0.02, rp=None), 6.0),
        ("T 1, min-p 0.02 alone, N(0, 4) logits (whole-row path)", dict(t=1.0, k=0, p=1.0, min_p=0.02, rp=None), 2.0),
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


# ---- dense: decode products (F.linear = cuBLAS, eager and torch.compile) ----
def dense_cases():
    linear = torch.compile(lambda a, b: F.linear(a, b))
    for m in (1, 8):
        x = torch.randn(m, 5120, dtype=torch.bfloat16, device=dev)
        w = torch.randn(17408, 5120, dtype=torch.bfloat16, device=dev)
        nbytes = 2 * (w.numel() + x.numel() + m * 17408)
        report(f"torch F.linear bf16 [{m}, 5120] x [17408, 5120]^T", lambda: timed(lambda: F.linear(x, w)), nbytes)
        report(f"compile F.linear bf16 [{m}, 5120] x [17408, 5120]^T", lambda: timed(lambda: linear(x, w)), nbytes)
    x = torch.randn(1, 5376, device=dev)
    w = torch.randn(262144, 5376, dtype=torch.bfloat16, device=dev)
    nbytes = 2 * w.numel() + 4 * (5376 + 262144)
    report("torch F.linear(x.bfloat16(), W) [1, 5376] x [262144, 5376]^T", lambda: timed(lambda: F.linear(x.bfloat16(), w).float(), 20), nbytes)
    report("compile F.linear(x.bfloat16(), W) [1, 5376] x [262144, 5376]^T", lambda: timed(lambda: linear(x.bfloat16(), w).float(), 20), nbytes)


dense_cases()
# ---- end of dense ----


# ---- flash_attn_prefill: the mask builder and the tile classifier (bench/glue.ts flashAttnPrefillCases) ----
# The same [qL, kL] bf16 causal window mask (0 / -inf) built by torch ops, and
# its (32 x 16) tiles classified by amax / amin over the tiles; eager and
# torch.compile. Bytes as bench/glue.ts.
def flash_attn_prefill_cases():
    for ql, kl in [(8192, 8192), (1, 32768)]:
        tag = " (decode)" if ql == 1 else ""
        off = kl - ql
        q = torch.arange(ql, device=dev).view(-1, 1) + off
        k = torch.arange(kl, device=dev).view(1, -1)
        zero = torch.zeros((), dtype=torch.bfloat16, device=dev)
        ninf = torch.full((), float("-inf"), dtype=torch.bfloat16, device=dev)

        def build(q=q, k=k, zero=zero, ninf=ninf):
            return torch.where((k <= q) & (q - k < 1024), zero, ninf)

        eager_and_compiled(f"flash_attn_prefill_mask bf16 [{ql}, {kl}] causal w1024{tag}", build, 2 * ql * kl)
        m = build()
        nq, nk = -(-ql // 32), kl // 16

        def classify(m=m, nq=nq, nk=nk, ql=ql):
            # Rows past qL do not count: -inf for the maximum, +inf for the minimum.
            pad = (0, 0, 0, nq * 32 - ql)
            hi = F.pad(m, pad, value=float("-inf")).view(nq, 32, nk, 16).float().amax(dim=(1, 3))
            lo = F.pad(m, pad, value=float("inf")).view(nq, 32, nk, 16).float().amin(dim=(1, 3))
            return torch.where(hi <= -1e30, 0, torch.where((hi == 0) & (lo == 0), 2, 1)).to(torch.uint8)

        eager_and_compiled(f"flash_attn_prefill_blk bf16 [{ql}, {kl}] tiles 32x16{tag}", classify, 2 * ql * kl + nq * nk)


flash_attn_prefill_cases()
# ---- end of flash_attn_prefill ----
# ---- quantized_matmul: MLX affine quantization (the shapes of glue.ts's quantizedMatmulCases) ----
# F.linear on the dequantized weight (what a dense model of the same shape
# costs), and MLX's dequantization in torch followed by F.linear, eager and
# compiled. bytes: the quantized floor (packed weight, scales, biases, x, y).
def quantized_matmul_cases():
    n, k = 17408, 5120
    linear = torch.compile(lambda a, b: F.linear(a, b))
    for dt, bits, gs, m in [(torch.bfloat16, 4, 64, 1), (torch.bfloat16, 4, 64, 8), (torch.float16, 4, 32, 1), (torch.float32, 8, 128, 1),
                            (torch.bfloat16, 4, 64, 64), (torch.float16, 6, 64, 64), (torch.float32, 4, 64, 16), (torch.bfloat16, 6, 64, 1)]:
        wq, scales, biases = random_affine(n, k, bits, gs, dt, dev)
        x = torch.randn(m, k, dtype=dt, device=dev)
        w = dequantize(wq, scales, biases, bits, gs)
        es = x.element_size()
        nbytes = n * k * bits // 8 + 2 * scales.numel() * es + (m * k + m * n) * es
        name = f"{str(dt)[6:]} q{bits} g{gs} [{m}, {k}] x [{n}, {k}]^T"
        report(f"torch F.linear dequantized W {name}", lambda: timed(lambda: F.linear(x, w), 20), nbytes)
        report(f"compile F.linear dequantized W {name}", lambda: timed(lambda: linear(x, w), 20), nbytes)
        eager_and_compiled(f"dequant+F.linear {name}", lambda: F.linear(x, dequantize(wq, scales, biases, bits, gs)), nbytes, 10)
        del wq, scales, biases, x, w


quantized_matmul_cases()
# ---- end of quantized_matmul ----

# ---- quantized_matmul_ggml: GGUF blocks (the shapes of glue.ts's quantizedMatmulGgmlCases) ----
# The products as the quantized rows above (F.linear on the dequantized bf16
# weight, and the format's dequantization in torch, bench/ggml_torch.py,
# followed by F.linear); the dequantization alone; embedding rows as the
# table's blocks gathered, dequantized and scaled. bytes: ours (the blocks
# read once, x and ids read, outputs written).
def quantized_matmul_ggml_cases():
    n, k = 17408, 5120
    linear = torch.compile(lambda a, b: F.linear(a, b))
    for t in ggml_torch.QK:
        raw = ggml_torch.random_blocks(t, n, k, dev)
        w = ggml_torch.dequantize(raw, t, k)
        wbytes = n * ggml_torch.row_bytes(t, k)
        for m in (1, 64):
            x = torch.randn(m, k, dtype=torch.bfloat16, device=dev)
            nbytes = wbytes + 4 * (m * k + m * n)
            name = f"{t} [{m}, {k}] x [{n}, {k}]^T"
            report(f"torch F.linear dequantized W {name}", lambda: timed(lambda: F.linear(x, w), 20), nbytes)
            report(f"compile F.linear dequantized W {name}", lambda: timed(lambda: linear(x, w), 20), nbytes)
            eager_and_compiled(f"dequant+F.linear {name}", lambda: F.linear(x, ggml_torch.dequantize(raw, t, k)), nbytes, 10)
        dts = [(torch.bfloat16, "bf16"), (torch.float32, "f32"), (torch.float16, "f16")] if t == "Q4_K" else [(torch.bfloat16, "bf16")]
        for dt, dname in dts:
            eager_and_compiled(f"dequantize {t} -> {dname} [{n}, {k}]", lambda dt=dt: ggml_torch.dequantize(raw, t, k, dt),
                               wbytes + n * k * torch.finfo(dt).bits // 8, 10)
        del raw, w
    vocab, hidden = 262144, 5376
    for t in ggml_torch.QK:
        table = ggml_torch.random_blocks(t, vocab, hidden, dev)
        for tokens in (8192, 1):
            ids = (torch.arange(tokens, device=dev, dtype=torch.int64) * 2654435761) % vocab
            tag = " (decode)" if tokens == 1 else ""
            eager_and_compiled(f"embedding {t} -> bf16 [{tokens} tok, {hidden}] of {vocab}{tag}",
                               lambda ids=ids: ggml_torch.dequantize(table[ids], t, hidden) * hidden ** 0.5,
                               tokens * (ggml_torch.row_bytes(t, hidden) + 2 * hidden + 4))
        del table


quantized_matmul_ggml_cases()
# ---- end of quantized_matmul_ggml ----

# ---- moe_dispatch: the grouping by expert and mlx-native's glue kernels (bench/glue.ts moeDispatchCases) ----
# The grouping as torch writes it (a stable argsort of the ids and the
# per-expert counts' prefix sum), the GELU gate of [gate | up] rows, the
# weighted sums over the top-k slots, the top-k gather and renormalization.
def moe_dispatch_cases():
    e_n, top_k = 256, 8
    for tokens in (1, 4096):
        pairs = tokens * top_k
        ids = (torch.arange(pairs, device=dev) * 2654435761 + (torch.arange(pairs, device=dev) >> 3) * 97) % e_n
        tag = " (decode)" if tokens == 1 else ""

        def group(ids=ids):
            return torch.bincount(ids, minlength=e_n).cumsum(0), ids.argsort(stable=True)

        eager_and_compiled(f"moe_dispatch_sort {tokens} tok x top-{top_k} of {e_n}{tag}", group, 4 * (2 * pairs + e_n + 2))
    i_n, h_n, k = 704, 2816, 8
    for tokens in (1, 512):
        tag = " (decode)" if tokens == 1 else ""
        gu = torch.randn(tokens, k, 2 * i_n, dtype=torch.bfloat16, device=dev)
        eager_and_compiled(f"moe_swiglu_seq_bf16 [{tokens}, {k}, 2x{i_n}]{tag}",
                           lambda gu=gu: F.gelu(gu[..., :i_n], approximate="tanh") * gu[..., i_n:], 6 * tokens * k * i_n)
        y = torch.randn(tokens, k, h_n, dtype=torch.bfloat16, device=dev)
        w = torch.rand(tokens, k, device=dev)
        eager_and_compiled(f"moe_weighted_sum_seq_bf16 [{tokens}, {k}, {h_n}]{tag}",
                           lambda y=y, w=w: (y.float() * w.unsqueeze(-1)).sum(1).bfloat16(), 2 * tokens * h_n * (k + 1) + 4 * tokens * k)
        eager_and_compiled(f"moe_weighted_sum_seq_bf16_input -> f32 [{tokens}, {k}, {h_n}]{tag}",
                           lambda y=y, w=w: (y.float() * w.unsqueeze(-1)).sum(1), 2 * tokens * h_n * k + 4 * tokens * (h_n + k))
        n = tokens * k * i_n
        g = torch.randn(n, dtype=torch.bfloat16, device=dev)
        u = torch.randn(n, dtype=torch.bfloat16, device=dev)
        eager_and_compiled(f"fused_gelu_mul_bf16 [{n}]{tag}", lambda g=g, u=u: F.gelu(g, approximate="tanh") * u, 6 * n)
    gu = torch.randn(k, 2 * i_n, device=dev)
    eager_and_compiled(f"moe_swiglu_batch f32 [{k}, 2x{i_n}] (decode)", lambda: F.gelu(gu[:, :i_n], approximate="tanh") * gu[:, i_n:],
                       12 * k * i_n)
    y = torch.randn(k, h_n, device=dev)
    w = torch.rand(k, device=dev)
    eager_and_compiled(f"moe_weighted_sum f32 [{k}, {h_n}] (decode)", lambda: (w.unsqueeze(-1) * y).sum(0), 4 * (k * h_n + k + h_n))
    acc = torch.randn(h_n, device=dev)
    eager_and_compiled(f"moe_accumulate f32 [{h_n}] (decode)", lambda: acc.add_(y[0], alpha=0.25), 12 * h_n)
    e_n = 128
    probs = torch.rand(e_n, device=dev)
    order = torch.argsort(probs, descending=True)
    scale = torch.rand(e_n, device=dev)

    def gather():
        ids = order[:k]
        p = probs[ids]
        return ids, p / p.sum() * scale[ids]

    eager_and_compiled(f"moe_gather_topk_weights top-{k} of {e_n} (decode)", gather, 4 * 5 * k)


moe_dispatch_cases()
# ---- end of moe_dispatch ----


# ---- moe_weighted_reduce: Qwen3.6-35B-A3B's MoE output (bench/glue.ts moeWeightedReduceCases) ----
def moe_weighted_reduce_cases():
    h, k = 2048, 8
    for dt, tokens in ((torch.bfloat16, 4096), (torch.bfloat16, 1), (torch.float32, 1)):
        s = torch.tensor([], dtype=dt).element_size()
        y = torch.randn(tokens, k, h, dtype=dt, device=dev)
        w = torch.rand(tokens, k, device=dev)
        sl = torch.randn(tokens, 1, dtype=dt, device=dev)
        ys = torch.randn(tokens, h, dtype=dt, device=dev)
        res = torch.randn(tokens, h, dtype=dt, device=dev)

        def reduce(y=y, w=w, sl=sl, ys=ys, res=res):
            return ((y.float() * w.unsqueeze(-1)).sum(1) + torch.sigmoid(sl.float()) * ys.float() + res.float()).to(dt)

        tag = " (decode)" if tokens == 1 else ""
        eager_and_compiled(f"moe_weighted_reduce_{str(dt)[6:].replace('float32', 'f32').replace('bfloat16', 'bf16')} "
                           f"[{tokens}, top-{k}, {h}] +shared +residual{tag}", reduce, tokens * h * s * (k + 3) + tokens * (4 * k + s))


moe_weighted_reduce_cases()
# ---- end of moe_weighted_reduce ----
