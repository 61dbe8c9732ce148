#!/usr/bin/env python3
"""Writes the whole-model fixtures that tests/models.test.ts checks the
TypeScript forward passes (ts/models/) against: tiny random-weight
configurations of Qwen3.6 (transformers' qwen3_5_moe text model) and Gemma 4
(transformers' gemma4 text model), run by transformers itself in float32.

For each fixture the output folder gets <out>/<name>/ holding
  config.json        the text config as transformers serialises it
  model.safetensors  every weight in transformers' own tensor names, bf16
  fixture.json       the manifest: prompt, greedy tokens, versions, the
                     per-layer facts transformers derived from the config,
                     self-checks, and the arrays in fixture.bin
  fixture.bin        the arrays (little-endian, each at an 8-byte aligned
                     offset): prefill logits of every prompt position, the
                     logits of each decode step (float32)

The configurations keep the real attention head dimensions (Qwen3.6 256;
Gemma 4 256 in sliding and 512 in global layers: the sizes the decode
attention kernels take) and the gated delta net's at 64 (a size the chunked
kernels take), and scale everything else down: hidden 64 (Qwen) or 48
(Gemma), 2 query heads, 1 KV head, 4 layers covering every layer kind, a
vocabulary of 512, 8 experts of which 2 are routed.

The weights are drawn from a seeded generator at scales that keep the
activations near unit size (so the logits have a spread and greedy tokens
have margins), then rounded to bf16; the model runs in float32 on those
rounded values, so a forward pass that loads the bf16 file computes from
exactly the weights transformers used. The forward runs on the CPU (no TF32,
no hub kernels), attention in transformers' eager implementation.

Prefill: the prompt (12 tokens) in one call with a cache; decode: 8 steps,
each feeding the argmax of the previous logits through the cache. Checks in
the manifest: the decode logits against one uncached forward of the prompt
and the generated tokens (transformers' cache paths against its full pass),
and float32 against float64 where the model runs in float64 (information on
how much float32 rounding alone moves the logits).

Usage (on the GPU machine, from the repository root; no network needed):
  python3 scripts/model_fixtures.py --out DIR [--only NAME ...]
Prints the versions and each config; a fixture that fails prints its
traceback and the others are still written. Exit status 1 if any failed.
"""

import argparse
import json
import math
import os
import sys
import traceback

import numpy as np
import torch

PROMPT_LEN = 12
DECODE_STEPS = 8


# ---------------------------------------------------------------- storage

class Manifest:
    def __init__(self, name):
        self.data = {'name': name, 'arrays': []}
        self.blob = bytearray()

    def add(self, name, t, note=None):
        a = t.detach().to(torch.float32).cpu().numpy().astype('<f4')
        while len(self.blob) % 8:
            self.blob.append(0)
        entry = {'name': name, 'dtype': 'f32', 'shape': list(a.shape), 'offset': len(self.blob), 'bytes': a.nbytes}
        if note:
            entry['note'] = note
        self.blob += a.tobytes()
        self.data['arrays'].append(entry)

    def write(self, folder):
        with open(os.path.join(folder, 'fixture.bin'), 'wb') as f:
            f.write(self.blob)
        with open(os.path.join(folder, 'fixture.json'), 'w') as f:
            json.dump(self.data, f, indent=1)
            f.write('\n')


# ---------------------------------------------------------------- weights

def fill_weights(model, seed, rules):
    """Every parameter (and the persistent layer_scalar buffers) drawn from a
    seeded generator by the first rule whose predicate takes its name, then
    rounded to bf16 and kept in float32. rules: [(predicate(name, shape), draw(g, shape))]."""
    g = torch.Generator().manual_seed(seed)
    named = list(model.named_parameters()) + [(n, b) for n, b in model.named_buffers() if n.endswith('layer_scalar')]
    seen = set()
    with torch.no_grad():
        for name, p in named:
            if id(p) in seen:  # tied weights: drawn once
                continue
            seen.add(id(p))
            for pred, draw in rules:
                if pred(name, tuple(p.shape)):
                    v = draw(g, tuple(p.shape)).to(torch.float32)
                    break
            else:
                raise ValueError(f'no rule draws {name} {tuple(p.shape)}')
            p.copy_(v.to(torch.bfloat16).to(torch.float32))


def normal(std):
    return lambda g, shape: torch.randn(shape, generator=g) * std


def around(center, spread):
    return lambda g, shape: center + torch.randn(shape, generator=g) * spread


def uniform(lo, hi):
    return lambda g, shape: lo + (hi - lo) * torch.rand(shape, generator=g)


def fan_in(scale=1.0):
    """N(0, scale / sqrt(fan_in)) for [..., out, in] weights."""
    return lambda g, shape: torch.randn(shape, generator=g) * (scale / math.sqrt(shape[-1]))


def ends(*suffixes):
    return lambda name, shape: any(name.endswith(s) for s in suffixes)


def always(name, shape):
    return True


def save_weights(model, folder, tied):
    from safetensors.torch import save_file
    sd = model.state_dict()
    out = {}
    for k, v in sd.items():
        if tied and k == 'lm_head.weight':
            continue
        out[k] = v.detach().to(torch.bfloat16).contiguous().clone()
    save_file(out, os.path.join(folder, 'model.safetensors'), metadata={'format': 'pt'})
    return sorted(out)


# ---------------------------------------------------------------- running

def run_reference(model, prompt):
    """Prefill logits [P, V], greedy tokens (the first from prefill), decode logits [DECODE_STEPS, V]."""
    ids = torch.tensor([prompt], dtype=torch.long)
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        prefill = out.logits[0].detach().clone()
        cache = out.past_key_values
        tok = int(torch.argmax(prefill[-1]))
        tokens = [tok]
        decode = []
        for _ in range(DECODE_STEPS):
            out = model(input_ids=torch.tensor([[tok]], dtype=torch.long), past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            logits = out.logits[0, -1].detach().clone()
            decode.append(logits)
            tok = int(torch.argmax(logits))
            tokens.append(tok)
    return prefill, tokens, torch.stack(decode)


def margin(logits):
    top = torch.topk(logits.to(torch.float64), 2).values
    return float(top[0] - top[1])


def rel_l2(a, b):
    a = a.to(torch.float64)
    b = b.to(torch.float64)
    return float((a - b).norm() / b.norm())


def build_and_run(name, model_cls, config, seed, rules, tied, facts, out_root):
    import transformers
    folder = os.path.join(out_root, name)
    os.makedirs(folder, exist_ok=True)
    torch.manual_seed(seed)
    model = model_cls(config).eval().to(torch.float32)
    fill_weights(model, seed, rules)
    print(f'[{name}] {type(model).__name__}, {sum(p.numel() for p in model.parameters())} parameters', flush=True)

    g = torch.Generator().manual_seed(seed + 1)
    prompt = [int(t) for t in torch.randint(3, config.vocab_size, (PROMPT_LEN,), generator=g)]
    prefill, tokens, decode = run_reference(model, prompt)

    m = Manifest(name)
    d = m.data
    d['model_class'] = type(model).__name__
    d['model_type'] = config.model_type
    d['seed'] = seed
    d['versions'] = {'transformers': transformers.__version__, 'torch': torch.__version__, 'python': sys.version.split()[0]}
    d['source'] = ('transformers float32 forward on the CPU, eager attention, weights rounded to bf16 '
                   '(model.safetensors); prefill then greedy decode through the cache')
    d['prompt'] = prompt
    d['tokens'] = tokens
    d['note_tokens'] = 'tokens[0] is the argmax of the last prefill position; tokens[i + 1] the argmax of decode step i, which was fed tokens[i]'
    d['prefill_margins'] = margin(prefill[-1])
    d['decode_margins'] = [margin(x) for x in decode]
    d['facts'] = facts(model)
    m.add('prefill_logits', prefill, f'[{PROMPT_LEN}, vocab]: every prompt position')
    m.add('decode_logits', decode, f'[{DECODE_STEPS}, vocab]: decode step i was fed tokens[i]')

    checks = {}
    with torch.no_grad():
        full_ids = torch.tensor([prompt + tokens[:-1]], dtype=torch.long)
        full = model(input_ids=full_ids, use_cache=False).logits[0]
        checks['prefill_vs_uncached'] = rel_l2(prefill, full[:PROMPT_LEN])
        checks['decode_vs_uncached'] = rel_l2(decode, full[PROMPT_LEN:])
        checks['decode_tokens_match_uncached'] = bool(torch.equal(full[PROMPT_LEN - 1:].argmax(-1), torch.tensor(tokens)))
    try:
        m64 = model_cls(config).eval()
        m64.load_state_dict(model.state_dict())
        m64 = m64.to(torch.float64)
        with torch.no_grad():
            full64 = m64(input_ids=full_ids, use_cache=False).logits[0]
        checks['f32_vs_f64_prefill'] = rel_l2(full[:PROMPT_LEN], full64[:PROMPT_LEN])
        checks['f32_vs_f64_decode'] = rel_l2(full[PROMPT_LEN:], full64[PROMPT_LEN:])
    except Exception as e:  # noqa: BLE001 -- information only
        checks['f32_vs_f64_error'] = repr(e)
    d['checks'] = checks

    names = save_weights(model, folder, tied)
    d['tensors'] = len(names)
    config.architectures = [type(model).__name__]
    # Every field written, defaults too: the reader need not know this version's defaults.
    config.to_json_file(os.path.join(folder, 'config.json'), use_diff=False)
    m.write(folder)
    sizes = {f: os.path.getsize(os.path.join(folder, f)) for f in sorted(os.listdir(folder))}
    print(f'[{name}] prompt {prompt}', flush=True)
    print(f'[{name}] tokens {tokens}', flush=True)
    print(f'[{name}] margins prefill {d["prefill_margins"]:.4f} decode {[round(x, 4) for x in d["decode_margins"]]}', flush=True)
    print(f'[{name}] checks {json.dumps(checks)}', flush=True)
    print(f'[{name}] files {sizes}', flush=True)


def prefer_eager(config):
    """transformers' eager attention and, where the version has the switch, its
    eager loop over experts (the reference implementations, no fused kernels)."""
    config._attn_implementation = 'eager'
    try:
        config._experts_implementation = 'eager'
    except Exception as e:  # noqa: BLE001 -- older versions have one experts path
        print(f'(experts implementation left as it is: {e!r})', flush=True)


def attn_facts(attn):
    keys = ['head_dim', 'num_key_value_groups', 'scaling', 'sliding_window', 'is_sliding', 'is_kv_shared_layer',
            'store_full_length_kv', 'use_alternative_attention', 'layer_type']
    out = {}
    for k in keys:
        if hasattr(attn, k):
            v = getattr(attn, k)
            out[k] = v if isinstance(v, (int, float, str, bool)) or v is None else repr(v)
    return out


def buffers_of(module):
    return {n: [float(x) for x in b.flatten()] for n, b in module.named_buffers() if 'inv_freq' in n and 'original' not in n}


# ---------------------------------------------------------------- Qwen3.6 (qwen3_5_moe)

def qwen3_5_moe(out_root):
    from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeTextConfig
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeForCausalLM

    config = Qwen3_5MoeTextConfig(
        vocab_size=512,
        hidden_size=64,
        num_hidden_layers=4,
        layer_types=['linear_attention', 'full_attention', 'linear_attention', 'full_attention'],
        full_attention_interval=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=256,
        hidden_act='silu',
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        rope_parameters={'rope_type': 'default', 'rope_theta': 10_000_000.0, 'partial_rotary_factor': 0.25,
                         'mrope_section': [11, 11, 10], 'mrope_interleaved': True},
        attention_bias=False,
        linear_conv_kernel_dim=4,
        linear_key_head_dim=64,
        linear_value_head_dim=64,
        linear_num_key_heads=1,
        linear_num_value_heads=2,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=48,
        num_experts_per_tok=2,
        num_experts=8,
        pad_token_id=None,
        bos_token_id=None,
        eos_token_id=None,
    )
    prefer_eager(config)
    print('[qwen3_5_moe] config', config.to_json_string(), flush=True)

    rules = [
        # (1 + w) norms: w near 0.
        (ends('input_layernorm.weight', 'post_attention_layernorm.weight', 'q_norm.weight', 'k_norm.weight', 'model.norm.weight'), normal(0.1)),
        # the gated delta net's output norm scales by w.
        (ends('linear_attn.norm.weight'), around(1.0, 0.1)),
        # decay: A in (0.05, 1) so the state carries over several tokens.
        (ends('A_log'), lambda g, s: torch.log(0.05 + 0.95 * torch.rand(s, generator=g))),
        (ends('dt_bias'), normal(0.5)),
        (ends('conv1d.weight'), lambda g, s: torch.randn(s, generator=g) / math.sqrt(s[-1])),
        (ends('embed_tokens.weight'), normal(1.0)),
        (ends('mlp.gate.weight'), fan_in(3.0)),
        (ends('experts.gate_up_proj'), fan_in()),
        (ends('experts.down_proj'), fan_in()),
        (ends('lm_head.weight'), fan_in(2.0)),
        (always, fan_in()),
    ]

    def facts(model):
        layers = []
        for i, layer in enumerate(model.model.layers):
            f = {'index': i, 'type': config.layer_types[i]}
            if hasattr(layer, 'self_attn'):
                f.update(attn_facts(layer.self_attn))
            if hasattr(layer, 'linear_attn'):
                la = layer.linear_attn
                f.update({k: getattr(la, k) for k in ('num_v_heads', 'num_k_heads', 'head_k_dim', 'head_v_dim', 'conv_kernel_size') if hasattr(la, k)})
                if hasattr(la, 'repeat_qk_heads'):
                    f['repeat_qk_heads'] = bool(la.repeat_qk_heads)
            layers.append(f)
        return {'layers': layers, 'rope': buffers_of(model.model.rotary_emb)}

    build_and_run('qwen3_5_moe', Qwen3_5MoeForCausalLM, config, 1601, rules, False, facts, out_root)


# ---------------------------------------------------------------- Gemma 4 (gemma4 text)

GEMMA_RULES = [
    # Attention scores are q . k unscaled after q_norm and k_norm: weights near 1/4 keep them near unit size (as
    # trained models' do), so the softmax is not so peaked that bf16 rounding of q and k flips its winners.
    (ends('q_norm.weight', 'k_norm.weight'), around(0.25, 0.025)),
    # Gemma 4's norms scale by w.
    (ends('layernorm.weight', 'layernorm_1.weight', 'layernorm_2.weight',
          'model.norm.weight', 'post_per_layer_input_norm.weight', 'per_layer_projection_norm.weight'), around(1.0, 0.1)),
    (ends('router.scale'), around(1.0, 0.1)),
    (ends('router.per_expert_scale'), around(1.0, 0.1)),
    (ends('layer_scalar'), uniform(0.6, 1.2)),
    # The embedding is scaled by sqrt(hidden) and tied to the output projection.
    (ends('embed_tokens.weight'), normal(0.3)),
    (ends('embed_tokens_per_layer.weight'), normal(0.3)),
    # The router sees rms_norm(h) / sqrt(H): weights of 3 give its logits a spread of about 3, as Qwen's.
    (ends('router.proj.weight'), normal(3.0)),
    (always, fan_in()),
]


def gemma_config(name, **over):
    from transformers.models.gemma4.configuration_gemma4 import Gemma4TextConfig
    base = dict(
        vocab_size=512,
        hidden_size=48,
        intermediate_size=96,
        num_hidden_layers=4,
        layer_types=['sliding_attention', 'full_attention', 'sliding_attention', 'full_attention'],
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=256,
        global_head_dim=512,
        hidden_activation='gelu_pytorch_tanh',
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        rope_parameters={
            'sliding_attention': {'rope_type': 'default', 'rope_theta': 10_000.0},
            'full_attention': {'rope_type': 'proportional', 'partial_rotary_factor': 0.25, 'rope_theta': 1_000_000.0},
        },
        attention_bias=False,
        sliding_window=5,
        final_logit_softcapping=30.0,
        vocab_size_per_layer_input=512,
        hidden_size_per_layer_input=0,
        attention_k_eq_v=False,
        num_kv_shared_layers=0,
        enable_moe_block=False,
        use_double_wide_mlp=False,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=1,
    )
    base.update(over)
    config = Gemma4TextConfig(**base)
    prefer_eager(config)
    print(f'[{name}] config', config.to_json_string(), flush=True)
    return config


def gemma_facts(config):
    def facts(model):
        layers = []
        for i, layer in enumerate(model.model.layers):
            f = {'index': i, 'type': config.layer_types[i]}
            f.update(attn_facts(layer.self_attn))
            f['mlp_intermediate'] = int(layer.mlp.gate_proj.weight.shape[0])
            f['moe'] = bool(getattr(layer, 'enable_moe_block', False))
            f['per_layer_input'] = bool(getattr(layer, 'hidden_size_per_layer_input', 0))
            layers.append(f)
        emb = model.model.embed_tokens
        return {
            'layers': layers,
            'rope': buffers_of(model.model.rotary_emb),
            'embed_scale': float(getattr(emb, 'scalar_embed_scale', float('nan'))),
        }
    return facts


def gemma4(out_root):
    """The larger Gemma 4 models' layer kinds: sliding and global layers, the MoE
    block beside the dense MLP, keys as values in global layers, final softcap."""
    from transformers.models.gemma4.modeling_gemma4 import Gemma4ForCausalLM
    config = gemma_config('gemma4', attention_k_eq_v=True, num_global_key_value_heads=1, enable_moe_block=True,
                          num_experts=8, top_k_experts=2, moe_intermediate_size=32)
    build_and_run('gemma4', Gemma4ForCausalLM, config, 1602, GEMMA_RULES, True, gemma_facts(config), out_root)


def gemma4_e(out_root):
    """The small Gemma 4 models' layer kinds: per-layer inputs, the last layers
    reusing earlier layers' keys and values, double-wide MLPs there."""
    from transformers.models.gemma4.modeling_gemma4 import Gemma4ForCausalLM
    config = gemma_config('gemma4_e', hidden_size_per_layer_input=16, num_kv_shared_layers=2, use_double_wide_mlp=True)
    build_and_run('gemma4_e', Gemma4ForCausalLM, config, 1603, GEMMA_RULES, True, gemma_facts(config), out_root)


FIXTURES = {'qwen3_5_moe': qwen3_5_moe, 'gemma4': gemma4, 'gemma4_e': gemma4_e}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--out', required=True)
    ap.add_argument('--only', nargs='*', choices=sorted(FIXTURES))
    args = ap.parse_args()
    import transformers
    print(f'transformers {transformers.__version__}, torch {torch.__version__}, numpy {np.__version__}, python {sys.version.split()[0]}', flush=True)
    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.makedirs(args.out, exist_ok=True)
    failed = []
    for name in args.only or list(FIXTURES):
        try:
            FIXTURES[name](args.out)
        except Exception:  # noqa: BLE001 -- each architecture fails on its own
            print(f'[{name}] FAILED', flush=True)
            traceback.print_exc()
            sys.stdout.flush()
            failed.append(name)
    print(f'done: {len(FIXTURES if not args.only else args.only) - len(failed)} written, failed: {failed or "none"}', flush=True)
    sys.exit(1 if failed else 0)


if __name__ == '__main__':
    main()
