#!/usr/bin/env python3
"""Joins bench/ours.ts and bench/peers.py results into one table.

  python3 bench/report.py --ours ours.json --peers peers.json --out DIR
writes DIR/results.md, DIR/results.json and DIR/results.png (matplotlib; the
plot is skipped with a printed note where matplotlib is missing).
  python3 bench/report.py --floors [--copy-gbs X --tflops Y]
prints each full case's floor (bytes that must move, flops) and the time that
is at the given ceilings (the table of bench/README.md).

Columns: ours (best variant; median us), each peer (median us), ratio = ours /
fastest peer (below 1: ours is faster), floor bytes, fraction of the measured
copy bandwidth = floor bytes / ours time / bandwidth, fraction of the measured
bf16 matmul rate = flops / ours time / rate.
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BT = 64


def shape_key(case):
    return ' '.join(f'{k}={v}' for k, v in case.items() if k != 'kernel')


def floor(case):
    """(bytes, flops) the case must move / compute at least; inputs read once, outputs written once."""
    c = case
    kind = c['kernel']
    if kind == 'fused_norm_add':
        n = c['rows'] * c['dim']
        return (3 * n + c['dim']) * 4, 5 * n            # read residual, input; write output
    if kind == 'fused_residual_norm':
        n = c['rows'] * c['dim']
        return (4 * n + c['dim']) * 4, 5 * n            # read residual, input; write normed, sum
    if kind == 'moe_routing':
        t, e, k = c['tokens'], c['experts'], c['topK']
        return t * e * 4 + e * 4 + t * k * 8, 4 * t * e
    if kind == 'flash_attn_vec':
        b, h, hk, d, s = c['batch'], c['nHeads'], c['nKvHeads'], c['headDim'], c['kv']
        return b * hk * s * d * 2 * 2 + 2 * b * h * d * 4, 4 * b * h * s * d
    if kind == 'chunk_local_cumsum':
        n = c['b'] * c['t'] * c['h']
        return 2 * n * 4, n
    if kind == 'gated_delta_net_chunk':
        b, t, h, hg, k, v = c['b'], c['t'], c['h'], c['hg'], c['k'], c['v']
        nt = -(-t // BT)
        by = (b * t * hg * k + b * t * h * k + b * t * h * v) * 2 + b * t * h * 4 + 2 * b * h * v * k * 4 \
            + b * nt * h * v * k * 2 + b * t * h * v * 2
        return by, 4 * b * t * h * k * v
    if kind == 'gated_delta_rule_prefill':
        b, t, h, hg, k, v = c['b'], c['t'], c['h'], c['hg'], c['k'], c['v']
        by = 2 * b * t * hg * k * 2 + 2 * b * t * h * v * 2 + 2 * b * t * h * 4 + 2 * b * h * k * v * 4
        # The chunked algorithm's count per token and head: k k^T, w and u,
        # the state recurrence (4 k v), the output (2 k v + intra-chunk terms).
        return by, b * t * h * (6 * k * v + 4 * BT * (k + v))
    if kind == 'gated_delta_rule_decode':
        b, h, hg, k, v = c['b'], c['h'], c['hg'], c['k'], c['v']
        by = 2 * b * h * k * v * 4 + 2 * b * hg * k * 2 + 2 * b * h * v * 2 + 2 * b * h * 4
        return by, 7 * b * h * k * v
    raise ValueError(kind)


def fmt_bytes(n):
    for unit, s in (('GB', 1e9), ('MB', 1e6), ('KB', 1e3)):
        if n >= s:
            return f'{n / s:.3g} {unit}'
    return f'{n} B'


def fmt_us(x):
    return '-' if x is None else (f'{x:.1f}' if x >= 10 else f'{x:.2f}')


def floors_table(copy_gbs, tflops):
    shapes = json.load(open(os.path.join(HERE, 'shapes.json')))['full']
    lines = ['| kernel | shape | floor bytes | floor flops | bytes / copy bw (us) | flops / matmul rate (us) | bound |',
             '| --- | --- | --- | --- | --- | --- | --- |']
    for c in shapes:
        by, fl = floor(c)
        tb = by / (copy_gbs * 1e9) * 1e6
        tf = fl / (tflops * 1e12) * 1e6
        lines.append(f'| {c["kernel"]} | {shape_key(c)} | {fmt_bytes(by)} | {fl / 1e9:.3g} G | {tb:.3g} | {tf:.3g} | '
                     f'{"memory" if tb >= tf else "compute"} |')
    return '\n'.join(lines)


def report(ours, peers, out):
    shapes = json.load(open(os.path.join(HERE, 'shapes.json')))['full']
    ceil = peers.get('ceilings', {}) if peers else {}
    bw = ceil.get('copy_GBps')
    rate = ceil.get('matmul_bf16_TFLOPs')
    peer_names = []
    for r in (peers or {}).get('results', []):
        if r['peer'] not in peer_names:
            peer_names.append(r['peer'])
    rows = []
    for c in shapes:
        key = shape_key(c)
        mine = [r for r in (ours or {}).get('results', []) if r['kernel'] == c['kernel'] and r['shape'] == key]
        timed = [r for r in mine if r.get('us') is not None]
        best = min(timed, key=lambda r: r['us']) if timed else None
        prs = {r['peer']: r.get('us') for r in (peers or {}).get('results', [])
               if r['kernel'] == c['kernel'] and r['shape'] == key}
        peer_us = [v for v in prs.values() if v is not None]
        by, fl = floor(c)
        us = best['us'] if best else None
        rows.append({
            'kernel': c['kernel'], 'shape': key,
            'ours_us': us, 'ours_variant': best['variant'] if best else None,
            'ours_all': [{'variant': r['variant'], 'us': r.get('us'), 'note': r.get('note')} for r in mine],
            'peers_us': prs,
            'ratio': us / min(peer_us) if us and peer_us else None,
            'floor_bytes': by, 'floor_flops': fl,
            'frac_copy_bw': by / (us * 1e-6) / (bw * 1e9) if us and bw else None,
            'frac_matmul': fl / (us * 1e-6) / (rate * 1e12) if us and rate else None,
            'peer_frac_copy_bw': by / (min(peer_us) * 1e-6) / (bw * 1e9) if peer_us and bw else None,
        })
    head = [f'device: {(peers or {}).get("device") or (ours or {}).get("device")}; ours backend: '
            f'{(ours or {}).get("backend")}; date: {(peers or {}).get("date") or (ours or {}).get("date")}; '
            f'torch {(peers or {}).get("torch")}; FLA {(peers or {}).get("fla")}',
            f'ceilings measured in this run: copy {bw:.0f} GB/s (read + write), bf16 matmul {rate:.0f} TFLOP/s'
            if bw and rate else 'ceilings: not measured',
            'timing: ' + ('ours and peers as replays of one recorded batch (CUDA graphs)'
                          if (ours or {}).get('graphs') and (peers or {}).get('graphs') else
                          'back-to-back launches between two events (launch overhead included)'
                          if not (ours or {}).get('graphs') and not (peers or {}).get('graphs') else
                          f'MIXED: ours graphs={bool((ours or {}).get("graphs"))}, peers graphs={bool((peers or {}).get("graphs"))}'),
            '']
    cols = ['kernel', 'shape', 'ours us (variant)'] + [f'{p} us' for p in peer_names] + \
        ['ours / fastest peer', 'floor bytes', 'ours frac copy bw', 'fastest peer frac copy bw', 'ours frac matmul']
    lines = ['| ' + ' | '.join(cols) + ' |', '|' + ' --- |' * len(cols)]
    for r in rows:
        cells = [r['kernel'], r['shape'],
                 f'{fmt_us(r["ours_us"])} ({r["ours_variant"]})' if r['ours_us'] is not None else
                 ('absent' if not r['ours_all'] else '; '.join(str(a['note']) for a in r['ours_all']))]
        cells += [fmt_us(r['peers_us'].get(p)) for p in peer_names]
        cells += ['-' if r['ratio'] is None else f'{r["ratio"]:.2f}', fmt_bytes(r['floor_bytes']),
                  '-' if r['frac_copy_bw'] is None else f'{r["frac_copy_bw"]:.2f}',
                  '-' if r['peer_frac_copy_bw'] is None else f'{r["peer_frac_copy_bw"]:.2f}',
                  '-' if r['frac_matmul'] is None else f'{r["frac_matmul"]:.3f}']
        lines.append('| ' + ' | '.join(c.replace('|', '/') for c in cells) + ' |')
    md = '\n'.join(head + lines) + '\n'
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, 'results.md'), 'w') as f:
        f.write(md)
    with open(os.path.join(out, 'results.json'), 'w') as f:
        json.dump({'ceilings': ceil, 'ours': ours, 'peers': peers, 'rows': rows}, f, indent=1)
    print(md)
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        print('report: matplotlib missing: no plot')
        return
    plotted = [r for r in rows if r['frac_copy_bw'] is not None or r['peer_frac_copy_bw'] is not None]
    if not plotted:
        print('report: nothing timed against a measured bandwidth: no plot')
        return
    fig, ax = plt.subplots(figsize=(10, 0.4 * len(plotted) + 1.5))
    ys = range(len(plotted))
    ax.barh([y + 0.2 for y in ys], [r['frac_copy_bw'] or 0 for r in plotted], 0.4, label='ours')
    ax.barh([y - 0.2 for y in ys], [r['peer_frac_copy_bw'] or 0 for r in plotted], 0.4, label='fastest peer')
    ax.set_yticks(list(ys))
    ax.set_yticklabels([f'{r["kernel"]} {r["shape"]}' for r in plotted], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel('floor bytes / time / measured copy bandwidth')
    ax.set_title(head[0], fontsize=7)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, 'results.png'), dpi=120)
    print(f'report: plot written to {os.path.join(out, "results.png")}')
    plot_prefill(rows, head[0], out, plt, bw)


def plot_prefill(rows, title, out, plt, bw):
    """results-prefill.png: gated delta rule prefill time against T, one line
    per variant of ours and per peer (log-log), with the memory floor at the
    measured copy bandwidth."""
    pre = [r for r in rows if r['kernel'] == 'gated_delta_rule_prefill']
    if not pre:
        return
    t_of = lambda r: int(dict(kv.split('=') for kv in r['shape'].split())['t'])
    pre.sort(key=t_of)
    lines = {}
    for r in pre:
        for a in r['ours_all']:
            if a['us'] is not None:
                lines.setdefault(f'ours: {a["variant"]}', []).append((t_of(r), a['us'] / 1e3))
        for name, us in r['peers_us'].items():
            if us is not None:
                lines.setdefault(name, []).append((t_of(r), us / 1e3))
    if not lines:
        print('report: no prefill timings: no prefill plot')
        return
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, pts in lines.items():
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker='o', label=name)
    if bw:
        floor_pts = [(t_of(r), r['floor_bytes'] / (bw * 1e9) * 1e3) for r in pre]
        ax.plot([p[0] for p in floor_pts], [p[1] for p in floor_pts], 'k--', label='memory floor at measured copy bw')
    ax.set_xscale('log', base=2)
    ax.set_yscale('log')
    ax.set_xlabel('T (tokens), B=1 H=32 Hg=16 K=V=128')
    ax.set_ylabel('ms')
    ax.set_title(title, fontsize=7)
    ax.legend(fontsize=7)
    ax.grid(True, which='both', alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, 'results-prefill.png'), dpi=120)
    print(f'report: prefill plot written to {os.path.join(out, "results-prefill.png")}')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--ours')
    ap.add_argument('--peers')
    ap.add_argument('--out')
    ap.add_argument('--floors', action='store_true')
    ap.add_argument('--copy-gbs', type=float, default=3000.0)
    ap.add_argument('--tflops', type=float, default=798.0)
    a = ap.parse_args()
    if a.floors:
        print(floors_table(a.copy_gbs, a.tflops))
        return 0

    def load(p):
        if p and os.path.exists(p):
            return json.load(open(p))
        print(f'report: {p}: missing, its columns stay empty')
        return None
    report(load(a.ours), load(a.peers), a.out)
    return 0


if __name__ == '__main__':
    sys.exit(main())
