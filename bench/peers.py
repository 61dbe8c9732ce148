#!/usr/bin/env python3
"""Times the peers of our kernels on the cases of bench/shapes.json, and the
device's ceilings, on one CUDA GPU.

Peers: PyTorch eager and torch.compile (fused norms, MoE routing), torch SDPA
and a plain eager attention (decode attention), FLA's Triton kernels
(chunk_local_cumsum, chunk_gated_delta_rule_fwd_h, chunk_gated_delta_rule,
fused_recurrent_gated_delta_rule; FLA from .fla/, see bench/prepare_fla.sh).
Ceilings: device-to-device copy bandwidth (a 1 GiB torch copy, bytes read +
written) and a bf16 8192^3 matmul rate, measured in the same run.

Timing matches bench/ours.ts: per case, a warm-up, then `repeats` timed
batches of `iters` back-to-back calls between two CUDA events (iters chosen so
a batch lasts about --target-ms); the time per call is the median over the
batches. Inputs are random, never zeros.

  PYTHONPATH=.fla python3 bench/peers.py [--quick] [--graphs] [--repeats N] [--target-ms X] --json PATH
--graphs: each batch is a replay of the `iters` calls captured once into a
CUDA graph (time_graph), as bench/ours.ts --graphs replays its recording.
--quick: torch.compile only on the large norm / routing shapes, FLA prefill at
T = 4096 and 32768 and decode at batch 1 and 256 (autotuning and compiling
every shape costs minutes); every case left out is printed.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time
import traceback

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
DEV = 'cuda'


def shape_key(case):
    return ' '.join(f'{k}={v}' for k, v in case.items() if k != 'kernel')


def probe_iters(fn, target_ms, max_iters):
    """Calls per timed batch: about target_ms over one call's event time (after a warm-up call)."""
    fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    fn()
    e.record()
    torch.cuda.synchronize()
    return max(1, min(max_iters, round(target_ms / max(s.elapsed_time(e), 1e-3))))


def timed_batches(run_batch, iters, repeats):
    """Median and min microseconds per call of `repeats` event-timed runs of run_batch (iters calls each)."""
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per = []
    for _ in range(repeats):
        s.record()
        run_batch()
        e.record()
        torch.cuda.synchronize()
        per.append(s.elapsed_time(e) * 1e3 / iters)
    return statistics.median(per), min(per), iters


def time_fn(fn, repeats, target_ms, max_iters=2000):
    """Median and min microseconds per call of fn over `repeats` event-timed batches."""
    iters = probe_iters(fn, target_ms, max_iters)

    def batch():
        for _ in range(iters):
            fn()
    batch()
    torch.cuda.synchronize()
    return timed_batches(batch, iters, repeats)


def time_graph(fn, repeats, target_ms, max_iters=2000):
    """time_fn's figures with the `iters` calls captured once into a CUDA graph
    and each timed batch a replay of it (ours.ts --graphs replays its recording
    alike), so the host's launch rate cannot set the time of short kernels."""
    iters = probe_iters(fn, target_ms, max_iters)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(iters):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    return timed_batches(graph.replay, iters, repeats)


def rand(shape, dtype=torch.float32, lo=-1.0, hi=1.0):
    return (torch.rand(shape, device=DEV, dtype=torch.float32) * (hi - lo) + lo).to(dtype)


# ---------------------------------------------------------------- peers per kernel

def norm_add(r, x, w, eps):
    return r + F.rms_norm(x, (x.shape[-1],), w, eps)


def residual_norm(r, x, w, eps):
    s = r + x
    return F.rms_norm(s, (s.shape[-1],), w, eps), s


def moe_route(logits, scale, k):
    p = torch.softmax(logits, dim=-1)
    vals, ids = torch.topk(p, k, dim=-1)
    return ids, vals / vals.sum(-1, keepdim=True) * scale[ids]


_compiled = {}


def compiled(fn):
    if fn not in _compiled:
        _compiled[fn] = torch.compile(fn, dynamic=False)
    return _compiled[fn]


def peers_fused_norm(case, quick, fn):
    rows, dim = case['rows'], case['dim']
    r, x, w = rand((rows, dim)), rand((rows, dim)), rand((dim,), lo=0.5, hi=1.5)
    out = {'torch eager': lambda: fn(r, x, w, 1e-6)}
    if quick and rows == 1:
        print(f'peers: {case["kernel"]} [{shape_key(case)}] torch.compile: left out (--quick)')
    else:
        c = compiled(fn)
        out['torch.compile'] = lambda: c(r, x, w, 1e-6)
    return out


def peers_moe(case, quick):
    t, e, k = case['tokens'], case['experts'], case['topK']
    logits, scale = rand((t, e), lo=-4, hi=4), rand((e,), lo=0.5, hi=1.5)
    out = {'torch eager': lambda: moe_route(logits, scale, k)}
    if quick and t == 1:
        print(f'peers: moe_routing [{shape_key(case)}] torch.compile: left out (--quick)')
    else:
        c = compiled(moe_route)
        out['torch.compile'] = lambda: c(logits, scale, k)
    return out


def peers_attention(case, quick):
    b, h, hk, d, s = case['batch'], case['nHeads'], case['nKvHeads'], case['headDim'], case['kv']
    q = rand((b, h, 1, d), torch.float16)
    k = rand((b, hk, s, d), torch.float16)
    v = rand((b, hk, s, d), torch.float16)
    scale = 1 / math.sqrt(d)

    def sdpa():
        return F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=True)

    qg = q.view(b, hk, h // hk, d)

    def eager():
        sc = torch.matmul(qg, k.transpose(-1, -2)).float() * scale      # [b, hk, g, s]
        return torch.matmul(torch.softmax(sc, dim=-1).to(v.dtype), v)   # [b, hk, g, d]

    return {'torch SDPA (f16 q/k/v, GQA)': sdpa, 'torch eager attention (f16, grouped matmul)': eager}


def fla_import():
    try:
        from fla.ops.common.chunk_delta_h import chunk_gated_delta_rule_fwd_h
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
        from fla.ops.utils import chunk_local_cumsum
        return {'fwd_h': chunk_gated_delta_rule_fwd_h, 'chunk': chunk_gated_delta_rule,
                'recurrent': fused_recurrent_gated_delta_rule, 'cumsum': chunk_local_cumsum}
    except Exception as e:  # noqa: BLE001 - reported, FLA cases then skip with the reason
        print(f'peers: FLA unavailable: {e!r}')
        return None


def peers_cumsum(case, quick, fla):
    b, t, h, bt = case['b'], case['t'], case['h'], case['bt']
    g = rand((b, t, h), lo=-0.1, hi=-0.005)
    nt = -(-t // bt)

    def eager():
        pad = F.pad(g, (0, 0, 0, nt * bt - t))
        return pad.view(b, nt, bt, h).cumsum(2).view(b, nt * bt, h)[:, :t]

    out = {'torch eager (pad, cumsum)': eager}
    if fla:
        out['FLA chunk_local_cumsum'] = lambda: fla['cumsum'](g, chunk_size=bt)
    return out


def l2n(x):
    return x / x.float().norm(dim=-1, keepdim=True).to(x.dtype)


def peers_fwd_h(case, quick, fla):
    if not fla:
        return {}
    b, t, h, hg, k, v = case['b'], case['t'], case['h'], case['hg'], case['k'], case['v']
    bf = torch.bfloat16
    kk = rand((b, t, hg, k), bf, -1 / 16, 1 / 16)
    w = rand((b, t, h, k), bf, -1 / 16, 1 / 16)
    u = rand((b, t, h, v), bf, -0.25, 0.25)
    g = rand((b, t, h), lo=-1, hi=0) / math.log(2)      # fwd_h decays with exp2: g in base 2, as FLA's pipeline passes it
    h0 = rand((b, h, v, k), lo=-0.1, hi=0.1)
    return {'FLA chunk_gated_delta_rule_fwd_h (state_v_first)': lambda: fla['fwd_h'](
        kk, w, u, g=g, initial_state=h0, output_final_state=True, chunk_size=64, state_v_first=True)}


def gdr_inputs(b, t, h, hg, k, v):
    bf = torch.bfloat16
    q = l2n(rand((b, t, hg, k), bf))
    kk = l2n(rand((b, t, hg, k), bf))
    vv = rand((b, t, h, v), bf)
    g = rand((b, t, h), lo=-0.1, hi=-0.005)
    beta = rand((b, t, h), lo=0.1, hi=0.9)
    h0 = rand((b, h, k, v), lo=-0.1, hi=0.1)
    return q, kk, vv, g, beta, h0


def peers_prefill(case, quick, fla):
    if not fla:
        return {}
    b, t, h, hg, k, v = case['b'], case['t'], case['h'], case['hg'], case['k'], case['v']
    if quick and t not in (4096, 32768):
        print(f'peers: gated_delta_rule_prefill [{shape_key(case)}]: FLA left out (--quick)')
        return {}
    q, kk, vv, g, beta, h0 = gdr_inputs(b, t, h, hg, k, v)
    return {'FLA chunk_gated_delta_rule': lambda: fla['chunk'](
        q, kk, vv, g=g, beta=beta, initial_state=h0, output_final_state=True)}


def peers_decode(case, quick, fla):
    if not fla:
        return {}
    b, h, hg, k, v = case['b'], case['h'], case['hg'], case['k'], case['v']
    if quick and b not in (1, 256):
        print(f'peers: gated_delta_rule_decode [{shape_key(case)}]: FLA left out (--quick)')
        return {}
    q, kk, vv, g, beta, h0 = gdr_inputs(b, 1, h, hg, k, v)
    return {'FLA fused_recurrent_gated_delta_rule (T=1)': lambda: fla['recurrent'](
        q, kk, vv, g=g, beta=beta, initial_state=h0, output_final_state=True)}


# ---------------------------------------------------------------- ceilings

def ceilings(repeats):
    n = 1 << 28                                           # 1 GiB of f32
    x = torch.rand(n, device=DEV)
    y = torch.empty_like(x)
    us, _, _ = time_fn(lambda: y.copy_(x), repeats, 50)
    copy_gbs = 2 * n * 4 / (us * 1e-6) / 1e9
    del x, y
    m = 8192
    a = torch.randn(m, m, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(m, m, device=DEV, dtype=torch.bfloat16)
    us_mm, _, _ = time_fn(lambda: a @ b, repeats, 50)
    tflops = 2 * m ** 3 / (us_mm * 1e-6) / 1e12
    return {'copy_GBps': copy_gbs, 'copy_note': '1 GiB f32 device-to-device copy, bytes read + written',
            'matmul_bf16_TFLOPs': tflops, 'matmul_note': '8192^3 bf16 torch matmul on random data'}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--quick', action='store_true')
    ap.add_argument('--repeats', type=int, default=10)
    ap.add_argument('--target-ms', type=float, default=20)
    ap.add_argument('--json', required=True)
    ap.add_argument('--graphs', action='store_true', help='time each batch as a replay of one CUDA graph (time_graph)')
    args = ap.parse_args()
    timer = time_graph if args.graphs else time_fn
    if not torch.cuda.is_available():
        print('peers: no CUDA device: nothing to time')
        return 1
    torch.manual_seed(0)
    dev_name = torch.cuda.get_device_name()
    print(f'peers: {dev_name}, torch {torch.__version__}, repeats {args.repeats}, quick {args.quick}, graphs {args.graphs}')
    t0 = time.time()
    ceil = ceilings(args.repeats)
    print(f'peers: ceilings: copy {ceil["copy_GBps"]:.0f} GB/s, bf16 matmul {ceil["matmul_bf16_TFLOPs"]:.0f} TFLOP/s')
    fla = fla_import()
    shapes = json.load(open(os.path.join(HERE, 'shapes.json')))['full']
    makers = {
        'fused_norm_add': lambda c: peers_fused_norm(c, args.quick, norm_add),
        'fused_residual_norm': lambda c: peers_fused_norm(c, args.quick, residual_norm),
        'moe_routing': lambda c: peers_moe(c, args.quick),
        'flash_attn_vec': lambda c: peers_attention(c, args.quick),
        'chunk_local_cumsum': lambda c: peers_cumsum(c, args.quick, fla),
        'gated_delta_net_chunk': lambda c: peers_fwd_h(c, args.quick, fla),
        'gated_delta_rule_prefill': lambda c: peers_prefill(c, args.quick, fla),
        'gated_delta_rule_decode': lambda c: peers_decode(c, args.quick, fla),
    }
    results = []
    doc = {'device': dev_name, 'torch': torch.__version__, 'date': time.strftime('%Y-%m-%d'),
           'fla': open(os.path.join(HERE, '..', '.fla', 'COMMIT')).read().strip() if fla else None,
           'quick': args.quick, 'graphs': args.graphs, 'repeats': args.repeats, 'ceilings': ceil, 'results': results}

    def save():
        # After every case, so a run stopped part way keeps what it timed.
        with open(args.json, 'w') as f:
            json.dump(doc, f, indent=1)

    save()
    for case in shapes:
        key = shape_key(case)
        try:
            fns = makers[case['kernel']](case)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            print(f'peers: {case["kernel"]} [{key}]: FAILED to set up: {e!r}')
            continue
        if not fns:
            print(f'peers: {case["kernel"]} [{key}]: no peer run')
        for name, fn in fns.items():
            t1 = time.time()
            try:
                us, mn, iters = timer(fn, args.repeats, args.target_ms)
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                print(f'peers: {case["kernel"]} [{key}] {name}: FAILED: {e!r}')
                results.append({'kernel': case['kernel'], 'shape': key, 'peer': name, 'us': None, 'note': repr(e)})
                continue
            print(f'peers: {case["kernel"]} [{key}] {name}: {us:.2f} us (min {mn:.2f}, {iters} per batch; '
                  f'{time.time() - t1:.0f} s with warm-up)')
            results.append({'kernel': case['kernel'], 'shape': key, 'peer': name, 'us': us, 'minUs': mn, 'iters': iters})
        torch.cuda.empty_cache()
        save()
    print(f'peers: done in {time.time() - t0:.0f} s')
    return 0


if __name__ == '__main__':
    sys.exit(main())
