# PyTorch beside bench/attention.ts on the GPU machine, same shapes: torch
# SDPA (F.scaled_dot_product_attention: its default choice, then each of its
# backends, flash, cuDNN and memory-efficient, where it takes the shape),
# torch.compile of SDPA, FlashAttention's own package (flash_attn) where it
# is installed, and for the sliding windows flex_attention with a window block
# mask (compiled; it skips the blocks outside the window) and SDPA with the
# window as an explicit mask. Timed with CUDA events around `iters` calls
# (median of 5). Measured in the same run, the bf16 matrix rate every row is
# a fraction of (the best of torch.matmul at 8192^3 and 16384 x 16384 x
# 8192). Pass it to attention.ts:
#   python3 bench/attention_peers.py
#   bun run bench/attention.ts --peak-tflops <peak>
# Flops: 4 D per (query head, visible key), causal counting T^2 / 2 keys per
# head, as bench/attention.ts counts them. Then the decode rows of
# bench/attention.ts (flashAttnVecCases): one query token per sequence beside
# SDPA (each backend, GQA or K/V repeated), torch.compile of SDPA and
# FlashAttention's flash_attn_with_kvcache where installed, GB/s of the K and
# V bytes read; the copy bandwidth those are a fraction of is measured first
# (1 GiB device copy, read + write counted). Pass it to attention.ts:
#   bun run bench/attention.ts --peak-tflops <peak> --copy-gbs <copy>
# --only TEXT (repeatable) keeps the cases whose name holds one of them, as
# bench/attention.ts's --only does. Layout [B, H, T, D]; GQA through
# SDPA's enable_gqa where the backend takes it, else K and V repeated to the
# query heads before the timing (the row says so).
import sys

import torch
import torch.nn.functional as F

from cuda_timing import peaks, timed as cuda_timed

dev = "cuda"
torch.backends.cuda.matmul.allow_tf32 = False


only = [sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "--only"]


def wanted(name):
    return not only or any(o in name for o in only)


def timed(fn, iters=10):
    return cuda_timed(fn, iters)


print("device:", torch.cuda.get_device_name(), "torch", torch.__version__)
peak, copy_gbs = peaks(dev)
print(f"peak bf16 {peak:.1f} TFLOP/s (torch.matmul)")
print(f"copy {copy_gbs:.0f} GB/s (1 GiB device copy, read + write)")


def visible(tq, tk, off, causal, window):
    n = 0
    for i in range(tq):
        p = off + i
        hi = min(tk, p + 1) if causal else tk
        lo = max(0, p - window + 1) if window else 0
        n += max(0, hi - lo)
    return n


def row(name, us, flops):
    print(f"{name:84s} {us:10.1f} us  {flops / us / 1e6:6.1f} TFLOP/s  ({100 * flops / us / 1e6 / peak:.0f}% of peak)")


def skip(name, why):
    print(f"{name:84s} skipped: {str(why).splitlines()[0][:120]}")


try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:  # older torch
    SDPBackend = sdpa_kernel = None
try:
    from flash_attn import flash_attn_func
except ImportError as e:
    flash_attn_func = None
    flash_attn_missing = e
try:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    flex = torch.compile(flex_attention)
except ImportError as e:
    flex = None
    flex_missing = e


def sdpa_rows(name, q, k, v, ke, ve, kw, iters, emit):
    """SDPA on each of its backends (with enable_gqa; where a backend refuses that, with K and V repeated to the
    query heads as ke, ve), then torch.compile's SDPA: emit(label, us) for each that runs, skip() for the rest."""
    for tag, backend in [("default", None), ("flash", "FLASH_ATTENTION"), ("cudnn", "CUDNN_ATTENTION"), ("efficient", "EFFICIENT_ATTENTION")]:
        for gqa in (True, False):
            label_ = f"SDPA {tag}{'' if gqa else ' (K, V repeated)'} {name}"
            try:
                if gqa:
                    inner = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw)
                else:
                    inner = lambda: F.scaled_dot_product_attention(q, ke, ve, **kw)
                if backend is None:
                    fn = inner
                else:
                    if sdpa_kernel is None:
                        raise RuntimeError("torch.nn.attention.sdpa_kernel is not available")
                    be = getattr(SDPBackend, backend)

                    def fn(inner=inner, be=be):
                        with sdpa_kernel(be):
                            return inner()
                emit(label_, timed(fn, iters))
                break
            except Exception as e:  # a backend that does not take the shape
                if not gqa:
                    skip(label_, e)
    try:
        compiled = torch.compile(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, enable_gqa=True, **kw))
        emit(f"torch.compile SDPA {name}", timed(lambda: compiled(q, k, v), iters))
    except Exception as e:
        skip(f"torch.compile SDPA {name}", e)


def case(label, h, hkv, d, tq, tk, causal, window=0):
    off = tk - tq
    flops = 4 * h * d * visible(tq, tk, off, causal, window)
    q = torch.randn(1, h, tq, d, dtype=torch.bfloat16, device=dev)
    k = torch.randn(1, hkv, tk, d, dtype=torch.bfloat16, device=dev)
    v = torch.randn(1, hkv, tk, d, dtype=torch.bfloat16, device=dev)
    name = f"{label} D={d} H={h}/{hkv} B=1 Tq={tq} Tk={tk}{' causal' if causal else ''}{f' window {window}' if window else ''}"
    if not wanted(name):
        return
    iters = 3 if flops > 2e12 else 10
    # SDPA's is_causal aligns the mask to the top left; a query block after earlier turns (tq < tk) needs it
    # at the bottom right, given as a mask (as is a window).
    mask = None
    if window or (causal and off):
        qi = torch.arange(tq, device=dev).view(-1, 1) + off
        kj = torch.arange(tk, device=dev).view(1, -1)
        mask = kj <= qi if causal else torch.ones(tq, tk, dtype=torch.bool, device=dev)
        if window:
            mask &= qi - kj < window
    kw = dict(attn_mask=mask) if mask is not None else dict(is_causal=causal)
    ke, ve = k.repeat_interleave(h // hkv, 1), v.repeat_interleave(h // hkv, 1)
    sdpa_rows(name, q, k, v, ke, ve, kw, iters, lambda label_, us: row(label_, us, flops))
    if flash_attn_func is not None:
        try:
            qt, kt, vt = q.transpose(1, 2).contiguous(), k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
            ws = (window - 1, 0) if window else (-1, -1)
            row(f"flash_attn {name}", timed(lambda: flash_attn_func(qt, kt, vt, causal=causal, window_size=ws), iters), flops)
        except Exception as e:
            skip(f"flash_attn {name}", e)
    else:
        skip(f"flash_attn {name}", flash_attn_missing)
    if window:
        if flex is not None:
            try:
                def win(b, hh, qi, kj):
                    return (kj <= qi + off) & (qi + off - kj < window)

                bm = create_block_mask(win, None, None, tq, tk, device=dev)
                row(f"flex_attention (compiled, window blocks) {name}",
                    timed(lambda: flex(q, k, v, block_mask=bm, enable_gqa=True), iters), flops)
            except Exception as e:
                skip(f"flex_attention {name}", e)
        else:
            skip(f"flex_attention {name}", flex_missing)
    del q, k, v, ke, ve, mask
    torch.cuda.empty_cache()


h, hkv = 32, 8
case("prefill", h, hkv, 128, 8192, 8192, True)
case("prefill", h, hkv, 256, 8192, 8192, True)
case("prefill", h, hkv, 512, 8192, 8192, True)
case("prefill", h, hkv, 128, 8192, 8192, False)
case("sliding", h, hkv, 256, 32768, 32768, True, 1024)
case("sliding", h, hkv, 256, 8192, 8192, True, 1024)
case("sliding", h, hkv, 128, 32768, 32768, True, 1024)
case("continue", h, hkv, 256, 2048, 8192, True)


# ---- flash_attn_vec: decode attention (issue 15 item 2) ----
# The decode rows of bench/attention.ts: one query token per sequence, 16
# query / 2 KV heads. SDPA takes one dtype for q, k and v (the K/V dtype
# here; ours takes an f32 query); layout [B, H, T, D]. Sequences of
# different lengths: SDPA with a key-padding mask over the longest (what it
# has for them), flash_attn_with_kvcache with cache_seqlens. A ring of 1024:
# SDPA over the 1024 keys it holds (order does not change attention).
try:
    from flash_attn import flash_attn_with_kvcache
except ImportError as e:
    flash_attn_with_kvcache = None
    kvcache_missing = e


def drow(name, us, nbytes):
    print(f"{name:84s} {us:10.1f} us  {nbytes / us / 1e3:7.0f} GB/s  ({100 * nbytes / us / 1e3 / copy_gbs:.0f}% of copy)")


def decode_case(label, b, h, hkv, d, cap, lens, dtype=torch.bfloat16, ring=False):
    visible = [min(n, cap) for n in lens]
    nbytes = 2 * hkv * d * sum(visible) * torch.tensor([], dtype=dtype).element_size()
    uniform = len(set(visible)) == 1
    tk = max(visible)
    tname = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}[dtype]
    desc = f"kv={lens[0]}" if uniform and not ring else f"ring {cap} at {lens[0]}" if ring else "lens " + ",".join(map(str, lens))
    name = f"{label} D={d} H={h}/{hkv} B={b} {desc} {tname}"
    if not wanted(name):
        return
    q = torch.randn(b, h, 1, d, dtype=dtype, device=dev)
    k = torch.randn(b, hkv, tk, d, dtype=dtype, device=dev)
    v = torch.randn(b, hkv, tk, d, dtype=dtype, device=dev)
    kw = {}
    if not uniform:
        kw["attn_mask"] = (torch.arange(tk, device=dev).view(1, 1, 1, tk) < torch.tensor(visible, device=dev).view(b, 1, 1, 1))
    ke, ve = k.repeat_interleave(h // hkv, 1), v.repeat_interleave(h // hkv, 1)
    iters = 50 if nbytes < 2e8 else 10
    sdpa_rows(name, q, k, v, ke, ve, kw, iters, lambda label_, us: drow(label_, us, nbytes))
    if flash_attn_with_kvcache is not None and dtype != torch.float32:
        try:
            qt, kt, vt = q.transpose(1, 2).contiguous(), k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
            seqlens = torch.tensor(visible, dtype=torch.int32, device=dev)
            drow(f"flash_attn_with_kvcache {name}",
                 timed(lambda: flash_attn_with_kvcache(qt, kt, vt, cache_seqlens=seqlens), iters), nbytes)
        except Exception as e:
            skip(f"flash_attn_with_kvcache {name}", e)
    else:
        skip(f"flash_attn_with_kvcache {name}", kvcache_missing if flash_attn_with_kvcache is None else "no f32 kernels")
    del q, k, v, ke, ve, kw
    torch.cuda.empty_cache()


n = 32768
decode_case("decode", 1, 16, 2, 256, n, [n])
decode_case("decode", 8, 16, 2, 256, n, [n] * 8)
decode_case("decode", 1, 16, 2, 256, n, [n], torch.float16)
decode_case("decode", 8, 16, 2, 256, n, [n] * 8, torch.float16)
decode_case("decode", 1, 16, 2, 256, n, [n], torch.float32)
decode_case("decode global", 1, 16, 2, 512, n, [n])
decode_case("decode", 8, 16, 2, 128, n, [n] * 8)
decode_case("decode sliding", 1, 16, 2, 256, 1024, [n + 7], ring=True)
decode_case("decode sliding", 8, 16, 2, 256, 1024, [n + 7] * 8, ring=True)
decode_case("decode varlen", 8, 16, 2, 256, n, [32768, 16384, 8192, 4096, 30000, 1, 777, 20000])
# ---- end of flash_attn_vec ----
