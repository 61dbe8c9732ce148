# PyTorch eager beside bench/glue.ts on the GPU machine, same shapes, timed
# with CUDA events around `iters` calls (median of 5), and the copy ceiling
# (a 1 GiB device-to-device copy, bytes read + written). The embedding and
# kv_cache_copy rows also time torch.compile of the same function.
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


# ---- embedding: Gemma 4 31B's table (262144 x 5376 bf16), scaled by sqrt(5376) ----
# Floor: the rows read and written once, plus the ids (as bench/glue.ts).
def embedding_peers():
    vocab, hidden = 262144, 5376
    table = torch.randn(vocab, hidden, dtype=torch.bfloat16, device=dev)
    scale = torch.tensor(hidden**0.5, dtype=torch.bfloat16, device=dev)

    def emb(ids):
        return F.embedding(ids, table) * scale

    emb_c = torch.compile(emb)
    for tokens in [8192, 1]:
        ids = torch.randint(0, vocab, (tokens,), device=dev)
        nbytes = 2 * tokens * hidden * 2 + 4 * tokens
        tag = " (decode)" if tokens == 1 else ""
        report(f"torch embedding bf16 [{tokens} tok, {hidden}]{tag}", timed(lambda: emb(ids)), nbytes)
        report(f"torch.compile embedding bf16 [{tokens} tok, {hidden}]{tag}", timed(lambda: emb_c(ids)), nbytes)
    del table


# ---- kv_cache_copy: K and V [tokens, 8, 256] into head-major caches [8, 8192, 256] ----
# Floor: K and V read once and written once (as bench/glue.ts).
def kv_cache_copy_peers():
    heads, head_dim, capacity = 8, 256, 8192

    def copy(k, v, ck, cv, pos):
        t = k.shape[0]
        ck[:, pos:pos + t].copy_(k.transpose(0, 1))
        cv[:, pos:pos + t].copy_(v.transpose(0, 1))

    copy_c = torch.compile(copy)
    for tokens, src, dst in [(8192, torch.bfloat16, torch.bfloat16), (8192, torch.float32, torch.float16), (1, torch.bfloat16, torch.bfloat16)]:
        k = torch.randn(tokens, heads, head_dim, dtype=src, device=dev)
        v = torch.randn(tokens, heads, head_dim, dtype=src, device=dev)
        ck = torch.zeros(heads, capacity, head_dim, dtype=dst, device=dev)
        cv = torch.zeros_like(ck)
        pos = capacity - 1 if tokens == 1 else 0
        nbytes = 2 * k.numel() * (k.element_size() + ck.element_size())
        name = f"kv copy {str(src)[6:]}->{str(dst)[6:]} K+V [{tokens} tok, {heads}, {head_dim}]" + (" (decode)" if tokens == 1 else "")
        report(f"torch {name}", timed(lambda: copy(k, v, ck, cv, pos)), nbytes)
        report(f"torch.compile {name}", timed(lambda: copy_c(k, v, ck, cv, pos)), nbytes)


embedding_peers()
kv_cache_copy_peers()
