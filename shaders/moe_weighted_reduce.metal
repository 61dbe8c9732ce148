// The reduction of an MoE layer back to one row per token, mlx-native's
// moe_weighted_reduce module (its kernel moe_weighted_reduce_f32, with f16
// and bf16 added):
//
//   output[t, d] = sum_k expert_w[t, k] * y_expert[t, k, d]
//                + sigmoid(sh_logit[t]) * y_shared[t, d]
//                [+ residual[t, d] where add_residual]
//
// Qwen3.6's sparse MoE block: the routed experts' outputs weighted by the
// router, plus the shared expert gated by sigmoid(x W_sg^T) (sh_logit, the
// shared_expert_gate's raw output), and the decoder layer's residual folded
// in. Slots summed in order, then the shared term, then the residual, in
// f32; the _f16 and _bf16 kernels read and write the dtype (sh_logit too;
// expert_w stays f32) and round once when they store. _bf16_input (not in
// mlx-native) reads bf16 expert outputs, as the per-expert products of 16-bit
// activations write them, and f32 for all the rest; _bf16_shared (not in
// mlx-native) reads the shared row in bf16 too, where the shared expert ran
// as one more slot of those products.
//
// buffer(0) MoeWeightedReduceParams, (1) expert_w f32 [n_tokens, top_k],
// (2) y_expert [n_tokens, top_k, h], (3) sh_logit [n_tokens], (4) y_shared
// [n_tokens, h], (5) residual [n_tokens, h] (read only where add_residual;
// may be output, in place), (6) output [n_tokens, h].
// Grid: (ceil(h / 256), n_tokens, 1) threadgroups of 256 threads (the crate's:
// the kernel indexes by 256), one thread per output element.

template <typename T, typename E, typename S>
static inline void weighted_reduce_at(constant MoeWeightedReduceParams& p, device const float* expert_w, device const E* y_expert,
                                      device const T* sh_logit, device const S* y_shared, device const T* residual, device T* output,
                                      uint2 tg, uint lid) {
    const uint d = tg.x * 256 + lid, t = tg.y;
    if (d >= p.h || t >= p.n_tokens) {
        return;
    }
    float acc = 0.0f;
    for (uint k = 0; k < p.top_k; ++k) {
        const ulong slot = ulong(t) * p.top_k + k;
        acc += expert_w[slot] * float(y_expert[slot * p.h + d]);
    }
    const ulong at = ulong(t) * p.h + d;
    const float gate = 1.0f / (1.0f + precise::exp(-float(sh_logit[t])));
    acc += gate * float(y_shared[at]);
    if (p.add_residual != 0) {
        acc += float(residual[at]);
    }
    output[at] = T(acc);
}

kernel void moe_weighted_reduce_f32(
    constant MoeWeightedReduceParams& p        [[buffer(0)]],
    device const float*               expert_w [[buffer(1)]],
    device const float*               y_expert [[buffer(2)]],
    device const float*               sh_logit [[buffer(3)]],
    device const float*               y_shared [[buffer(4)]],
    device const float*               residual [[buffer(5)]],
    device float*                     output   [[buffer(6)]],
    uint2 tgpig [[threadgroup_position_in_grid]],
    uint  tiitg [[thread_index_in_threadgroup]])
{
    weighted_reduce_at(p, expert_w, y_expert, sh_logit, y_shared, residual, output, tgpig, tiitg);
}

kernel void moe_weighted_reduce_f16(
    constant MoeWeightedReduceParams& p        [[buffer(0)]],
    device const float*               expert_w [[buffer(1)]],
    device const half*                y_expert [[buffer(2)]],
    device const half*                sh_logit [[buffer(3)]],
    device const half*                y_shared [[buffer(4)]],
    device const half*                residual [[buffer(5)]],
    device half*                      output   [[buffer(6)]],
    uint2 tgpig [[threadgroup_position_in_grid]],
    uint  tiitg [[thread_index_in_threadgroup]])
{
    weighted_reduce_at(p, expert_w, y_expert, sh_logit, y_shared, residual, output, tgpig, tiitg);
}

kernel void moe_weighted_reduce_bf16(
    constant MoeWeightedReduceParams& p        [[buffer(0)]],
    device const float*               expert_w [[buffer(1)]],
    device const bfloat*              y_expert [[buffer(2)]],
    device const bfloat*              sh_logit [[buffer(3)]],
    device const bfloat*              y_shared [[buffer(4)]],
    device const bfloat*              residual [[buffer(5)]],
    device bfloat*                    output   [[buffer(6)]],
    uint2 tgpig [[threadgroup_position_in_grid]],
    uint  tiitg [[thread_index_in_threadgroup]])
{
    weighted_reduce_at(p, expert_w, y_expert, sh_logit, y_shared, residual, output, tgpig, tiitg);
}

kernel void moe_weighted_reduce_bf16_input(
    constant MoeWeightedReduceParams& p        [[buffer(0)]],
    device const float*               expert_w [[buffer(1)]],
    device const bfloat*              y_expert [[buffer(2)]],
    device const float*               sh_logit [[buffer(3)]],
    device const float*               y_shared [[buffer(4)]],
    device const float*               residual [[buffer(5)]],
    device float*                     output   [[buffer(6)]],
    uint2 tgpig [[threadgroup_position_in_grid]],
    uint  tiitg [[thread_index_in_threadgroup]])
{
    weighted_reduce_at(p, expert_w, y_expert, sh_logit, y_shared, residual, output, tgpig, tiitg);
}

kernel void moe_weighted_reduce_bf16_shared(
    constant MoeWeightedReduceParams& p        [[buffer(0)]],
    device const float*               expert_w [[buffer(1)]],
    device const bfloat*              y_expert [[buffer(2)]],
    device const float*               sh_logit [[buffer(3)]],
    device const bfloat*              y_shared [[buffer(4)]],
    device const float*               residual [[buffer(5)]],
    device float*                     output   [[buffer(6)]],
    uint2 tgpig [[threadgroup_position_in_grid]],
    uint  tiitg [[thread_index_in_threadgroup]])
{
    weighted_reduce_at(p, expert_w, y_expert, sh_logit, y_shared, residual, output, tgpig, tiitg);
}

// The reduction as above with f32 output, and the RMS norm of each output
// row that the next layer's first product reads (ours: the decoder layer's
// end and the next layer's input norm in one dispatch):
//   normed[t, d] = output[t, d] * rms_inv(output[t]) * norm_weight[d]
// One threadgroup per token (grid (n_tokens, 1, 1)), any number of threads
// (the op uses min(256, nextPow2(h))), striding over the row; threadgroup(0)
// one float per simdgroup. Each thread reads back only the output elements
// it wrote, so output may be residual (in place).
// buffer(0) MoeWeightedReduceNormParams, (1) to (6) as above, (7)
// norm_weight [h] f32, (8) normed [n_tokens, h] f32.
template <typename E, typename S>
static inline void weighted_reduce_norm_row(constant MoeWeightedReduceNormParams& p, device const float* expert_w,
                                            device const E* y_expert, device const float* sh_logit,
                                            device const S* y_shared, device const float* residual, device float* output,
                                            device const float* norm_weight, device float* normed,
                                            threadgroup float* partials, uint t, uint tid, uint tg_size, uint sg,
                                            uint lane, uint n_sg) {
    if (t >= p.n_tokens) {
        return;
    }
    const float gate = 1.0f / (1.0f + precise::exp(-sh_logit[t]));
    float sq = 0.0f;
    for (uint d = tid; d < p.h; d += tg_size) {
        float acc = 0.0f;
        for (uint k = 0; k < p.top_k; ++k) {
            const ulong slot = ulong(t) * p.top_k + k;
            acc += expert_w[slot] * float(y_expert[slot * p.h + d]);
        }
        const ulong at = ulong(t) * p.h + d;
        acc += gate * float(y_shared[at]);
        if (p.add_residual != 0) {
            acc += residual[at];
        }
        output[at] = acc;
        sq += acc * acc;
    }
    const float r = rsqrt(threadgroup_sum(sq, partials, sg, lane, n_sg) / float(p.h) + p.eps);
    for (uint d = tid; d < p.h; d += tg_size) {
        const ulong at = ulong(t) * p.h + d;
        normed[at] = output[at] * r * norm_weight[d];
    }
}


kernel void moe_weighted_reduce_norm_f32(
    constant MoeWeightedReduceNormParams& p           [[buffer(0)]],
    device const float*                   expert_w    [[buffer(1)]],
    device const float*                   y_expert    [[buffer(2)]],
    device const float*                   sh_logit    [[buffer(3)]],
    device const float*                   y_shared    [[buffer(4)]],
    device const float*                   residual    [[buffer(5)]],
    device float*                         output      [[buffer(6)]],
    device const float*                   norm_weight [[buffer(7)]],
    device float*                         normed      [[buffer(8)]],
    threadgroup float*                    partials    [[threadgroup(0)]],
    uint t       [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    weighted_reduce_norm_row(p, expert_w, y_expert, sh_logit, y_shared, residual, output, norm_weight, normed, partials, t,
                             tid, tg_size, sg, lane, n_sg);
}

kernel void moe_weighted_reduce_norm_bf16_input(
    constant MoeWeightedReduceNormParams& p           [[buffer(0)]],
    device const float*                   expert_w    [[buffer(1)]],
    device const bfloat*                  y_expert    [[buffer(2)]],
    device const float*                   sh_logit    [[buffer(3)]],
    device const float*                   y_shared    [[buffer(4)]],
    device const float*                   residual    [[buffer(5)]],
    device float*                         output      [[buffer(6)]],
    device const float*                   norm_weight [[buffer(7)]],
    device float*                         normed      [[buffer(8)]],
    threadgroup float*                    partials    [[threadgroup(0)]],
    uint t       [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    weighted_reduce_norm_row(p, expert_w, y_expert, sh_logit, y_shared, residual, output, norm_weight, normed, partials, t,
                             tid, tg_size, sg, lane, n_sg);
}

kernel void moe_weighted_reduce_norm_bf16_shared(
    constant MoeWeightedReduceNormParams& p           [[buffer(0)]],
    device const float*                   expert_w    [[buffer(1)]],
    device const bfloat*                  y_expert    [[buffer(2)]],
    device const float*                   sh_logit    [[buffer(3)]],
    device const bfloat*                  y_shared    [[buffer(4)]],
    device const float*                   residual    [[buffer(5)]],
    device float*                         output      [[buffer(6)]],
    device const float*                   norm_weight [[buffer(7)]],
    device float*                         normed      [[buffer(8)]],
    threadgroup float*                    partials    [[threadgroup(0)]],
    uint t       [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    weighted_reduce_norm_row(p, expert_w, y_expert, sh_logit, y_shared, residual, output, norm_weight, normed, partials, t,
                             tid, tg_size, sg, lane, n_sg);
}
