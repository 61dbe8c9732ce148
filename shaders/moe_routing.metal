// Fused MoE routing: softmax over the experts, top-k, renormalization of the
// selected weights, per-expert scale, in one threadgroup per token.
//
//   p[e]      = exp(logit[e] - max) / sum_e' exp(logit[e'] - max)
//   ids       = the top_k experts by p, largest first; equal values in
//               increasing expert index
//   weight[k] = p[ids[k]] / sum_j p[ids[j]] * per_expert_scale[ids[k]]
//   when that top-k sum is not positive (every logit -inf), every weight is 0
//
// The division by the full softmax sum cancels in the renormalization, so the
// kernel ranks and renormalizes u[e] = exp(logit[e] - max) directly.
//
// Threads: any tg in [1, 1024] (the op picks min(256, nextPow2(num_experts))).
// threadgroup(0): num_experts floats (u). Per-simdgroup partials of the
// reductions live in static threadgroup arrays (32 entries each).
//
// Top-k is k rounds of a threadgroup arg-max. Each round takes the best
// expert strictly after the previous round's winner in the total order
// (value descending, index ascending), so nothing is written back to mark
// the winners and the k winners are distinct.

constant constexpr uint NO_INDEX = 0xFFFFFFFFu;
constant constexpr uint MAX_SIMDGROUPS = 32;

// (value, index) order: a ranks before b when its value is larger, or equal
// with a smaller index.
static inline bool ranks_before(float va, uint ia, float vb, uint ib) {
    return va > vb || (va == vb && ia < ib);
}

// The threadgroup reductions below publish one partial per simdgroup, then
// every thread scans all partials itself (a last, partial simdgroup may have
// fewer lanes than there are partials). The trailing barrier lets the next
// call overwrite the partials only after every thread has read them.

// Arg-max over the threadgroup in the order above; every thread gets the
// winner. Threads with no candidate pass (-INFINITY, NO_INDEX).
static inline void threadgroup_argmax(thread float& value, thread uint& index,
                                      threadgroup float* part_value, threadgroup uint* part_index,
                                      uint sg, uint lane, uint n_sg) {
    const float m = simd_max(value);
    const uint i = simd_min(value == m ? index : NO_INDEX);
    if (lane == 0) {
        part_value[sg] = m;
        part_index[sg] = i;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float best_value = -INFINITY;
    uint best_index = NO_INDEX;
    for (uint s = 0; s < n_sg; ++s) {
        const float v = part_value[s];
        const uint j = part_index[s];
        if (ranks_before(v, j, best_value, best_index)) {
            best_value = v;
            best_index = j;
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    value = best_value;
    index = best_index;
}

// One token: logits [num_experts] in, expert_ids and routing_weights [top_k] out.
static inline void route_token(device const float* logits, device uint* expert_ids,
                               device float* routing_weights, device const float* per_expert_scale,
                               uint num_experts, uint top_k, threadgroup float* u,
                               threadgroup float* part_value, threadgroup uint* part_index,
                               uint tid, uint tg_size, uint sg, uint lane, uint n_sg) {
    float local_max = -INFINITY;
    for (uint e = tid; e < num_experts; e += tg_size) {
        local_max = max(local_max, logits[e]);
    }
    const float mx = threadgroup_max(local_max, part_value, sg, lane, n_sg);

    // All logits -inf: every u is 0 (exp(-inf - -inf) would be NaN).
    const bool all_masked = mx == -INFINITY;
    for (uint e = tid; e < num_experts; e += tg_size) {
        u[e] = all_masked ? 0.0f : exp(logits[e] - mx);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    // Round k: winner (prev_value, prev_index) of round k-1; round 0 takes any.
    float prev_value = INFINITY;
    uint prev_index = NO_INDEX;
    bool first = true;
    float topk_sum = 0.0f;
    for (uint k = 0; k < top_k; ++k) {
        float best_value = -INFINITY;
        uint best_index = NO_INDEX;
        for (uint e = tid; e < num_experts; e += tg_size) {
            const float v = u[e];
            const bool after_prev = first || ranks_before(prev_value, prev_index, v, e);
            if (after_prev && ranks_before(v, e, best_value, best_index)) {
                best_value = v;
                best_index = e;
            }
        }
        threadgroup_argmax(best_value, best_index, part_value, part_index, sg, lane, n_sg);
        topk_sum += best_value;
        // Slot k belongs to thread k % tg_size, which also rescales it below,
        // so it reads back only its own writes.
        if (k % tg_size == tid) {
            expert_ids[k] = best_index;
            routing_weights[k] = best_value;
        }
        prev_value = best_value;
        prev_index = best_index;
        first = false;
    }

    const bool positive = topk_sum > 0.0f;
    for (uint k = tid; k < top_k; k += tg_size) {
        routing_weights[k] = positive
            ? routing_weights[k] / topk_sum * per_expert_scale[expert_ids[k]]
            : 0.0f;
    }
}

// Single token. buffer(0) logits [num_experts], (1) expert_ids uint [top_k],
// (2) routing_weights [top_k], (3) per_expert_scale [num_experts], (4) params.
// Grid (1, 1, 1).
kernel void fused_moe_routing_f32(
    device const float*             logits           [[buffer(0)]],
    device uint*                    expert_ids       [[buffer(1)]],
    device float*                   routing_weights  [[buffer(2)]],
    device const float*             per_expert_scale [[buffer(3)]],
    constant FusedMoeRoutingParams& params           [[buffer(4)]],
    threadgroup float*              u                [[threadgroup(0)]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    threadgroup float part_value[MAX_SIMDGROUPS];
    threadgroup uint part_index[MAX_SIMDGROUPS];
    route_token(logits, expert_ids, routing_weights, per_expert_scale,
                params.num_experts, params.top_k, u, part_value, part_index,
                tid, tg_size, sg, lane, n_sg);
}

// n_tokens tokens, one threadgroup each. buffer(0) logits [n_tokens, num_experts],
// (1) expert_ids uint [n_tokens, top_k], (2) routing_weights [n_tokens, top_k],
// (3) per_expert_scale [num_experts], (4) params. Grid (n_tokens, 1, 1).
kernel void fused_moe_routing_batch_f32(
    device const float*             logits           [[buffer(0)]],
    device uint*                    expert_ids       [[buffer(1)]],
    device float*                   routing_weights  [[buffer(2)]],
    device const float*             per_expert_scale [[buffer(3)]],
    constant FusedMoeRoutingParams& params           [[buffer(4)]],
    threadgroup float*              u                [[threadgroup(0)]],
    uint token   [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    threadgroup float part_value[MAX_SIMDGROUPS];
    threadgroup uint part_index[MAX_SIMDGROUPS];
    const uint e = params.num_experts;
    const uint k = params.top_k;
    route_token(logits + token * e, expert_ids + token * k, routing_weights + token * k,
                per_expert_scale, e, k, u, part_value, part_index,
                tid, tg_size, sg, lane, n_sg);
}
