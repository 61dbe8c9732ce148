// The dispatch of tokens to experts, and the glue of an MoE layer around the
// per-expert products (ts/ops/moe_dispatch.ts says which op runs which):
//
//   moe_dispatch_sort (added): the (token, slot) pairs of a routing table,
//     grouped by expert on the device, for the matrix forms of
//     quantized_matmul_id and dense_matmul_id (no host read-back).
//   mlx-native's moe_dispatch module, its names, bindings and math:
//     fused_gelu_mul(_bf16)  output = gelu(gate_out) * up_out
//     moe_accumulate         accumulator += routing_weight * expert_output
//     zero_buffer            buffer = 0
//     moe_swiglu_fused       output = gelu(gate_up[:N]) * gate_up[N:]
//     moe_swiglu_batch       the same per slot of [top_k, 2 I]
//     moe_swiglu_seq(_bf16)  the same per (token, slot) of [T, top_k, 2 I]
//     moe_weighted_sum       output = sum_k weights[k] * expert_outputs[k]
//     moe_weighted_sum_seq   the same per token; _bf16_input reads bf16
//                            expert outputs (f32 weights and output); _f16
//                            and _bf16 (added) read and write the dtype
//     moe_gather_topk_weights  the top-k ids of a sorted index list and
//                            their renormalized, scaled probabilities
//   The crate's "swiglu" kernels gate with GELU (tanh approximation), as
//   Gemma 4's experts do; they are kept under its names with its math.
//   gelu is the prelude's gelu_tanh (the crate's tanh form, to rounding).
//
// Arithmetic in f32; 16-bit values are rounded once, when stored.

// moe_dispatch_sort: pairs p < n_pairs with bucket b(p) = min(ids[p], E)
// (E = num_experts: ids past the experts share the last bucket).
//   offsets[b] = the pairs in buckets before b (b = 0 .. E), offsets[E + 1] =
//   n_pairs; order[offsets[b] .. offsets[b + 1]) = the pairs of bucket b, in
//   no particular order (each pair once; the products' results do not
//   depend on the order).
// One threadgroup of any size; threadgroup(0) holds E + 1 counters and one
// uint per simdgroup. Counting, an exclusive scan over the buckets (each
// thread a contiguous span of them), then each pair placed at its bucket's
// cursor.
kernel void moe_dispatch_sort(
    device const uint*               ids     [[buffer(0)]],
    device uint*                     offsets [[buffer(1)]],
    device uint*                     order   [[buffer(2)]],
    constant MoeDispatchSortParams&  params  [[buffer(3)]],
    threadgroup uint*                shared  [[threadgroup(0)]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    const uint P = params.n_pairs, E = params.num_experts, B = E + 1;
    threadgroup atomic_uint* count = (threadgroup atomic_uint*)shared;
    threadgroup uint* partial = shared + B;
    for (uint b = tid; b < B; b += tg_size) {
        atomic_store_explicit(&count[b], 0u, memory_order_relaxed);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint p = tid; p < P; p += tg_size) {
        atomic_fetch_add_explicit(&count[min(ids[p], E)], 1u, memory_order_relaxed);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    const uint span = (B + tg_size - 1) / tg_size;
    const uint b0 = min(tid * span, B), b1 = min(b0 + span, B);
    uint local = 0;
    for (uint b = b0; b < b1; ++b) {
        local += atomic_load_explicit(&count[b], memory_order_relaxed);
    }
    const uint before_lane = simd_prefix_exclusive_sum(local);
    const uint sg_total = simd_sum(local);
    if (lane == 0) {
        partial[sg] = sg_total;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    uint start = before_lane;
    for (uint i = 0; i < sg; ++i) {
        start += partial[i];
    }
    for (uint b = b0; b < b1; ++b) {
        const uint c = atomic_load_explicit(&count[b], memory_order_relaxed);
        offsets[b] = start;
        atomic_store_explicit(&count[b], start, memory_order_relaxed);
        start += c;
    }
    if (tid == 0) {
        offsets[B] = P;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint p = tid; p < P; p += tg_size) {
        const uint at = atomic_fetch_add_explicit(&count[min(ids[p], E)], 1u, memory_order_relaxed);
        if (at < P) {
            order[at] = p;
        }
    }
}

// ---- mlx-native's moe_dispatch kernels: one thread per element ----

// buffer(0) gate_out [n], (1) up_out [n], (2) output [n], (3) FusedGeluMulParams.
// Grid: ceil(n / tg) threadgroups of tg = min(256, n) threads.
template <typename T>
static inline void gelu_mul_at(device const T* gate, device const T* up, device T* out, uint n, uint gid) {
    if (gid < n) {
        out[gid] = T(gelu_tanh(float(gate[gid])) * float(up[gid]));
    }
}

kernel void fused_gelu_mul(
    device const float*         gate_out [[buffer(0)]],
    device const float*         up_out   [[buffer(1)]],
    device float*               output   [[buffer(2)]],
    constant FusedGeluMulParams& params  [[buffer(3)]],
    uint gid [[thread_position_in_grid]])
{
    gelu_mul_at(gate_out, up_out, output, params.n_elements, gid);
}

kernel void fused_gelu_mul_bf16(
    device const bfloat*        gate_out [[buffer(0)]],
    device const bfloat*        up_out   [[buffer(1)]],
    device bfloat*              output   [[buffer(2)]],
    constant FusedGeluMulParams& params  [[buffer(3)]],
    uint gid [[thread_position_in_grid]])
{
    gelu_mul_at(gate_out, up_out, output, params.n_elements, gid);
}

// buffer(0) accumulator [n] (read and written), (1) expert_output [n], (2) MoeAccumParams.
kernel void moe_accumulate(
    device float*           accumulator   [[buffer(0)]],
    device const float*     expert_output [[buffer(1)]],
    constant MoeAccumParams& params       [[buffer(2)]],
    uint gid [[thread_position_in_grid]])
{
    if (gid < params.n_elements) {
        accumulator[gid] += params.routing_weight * expert_output[gid];
    }
}

// buffer(0) buffer [n], (1) ZeroParams.
kernel void zero_buffer(
    device float*        buffer [[buffer(0)]],
    constant ZeroParams& params [[buffer(1)]],
    uint gid [[thread_position_in_grid]])
{
    if (gid < params.n_elements) {
        buffer[gid] = 0.0f;
    }
}

// buffer(0) gate_up [2 n] (gate, then up), (1) output [n], (2) FusedGeluMulParams.
kernel void moe_swiglu_fused(
    device const float*         gate_up [[buffer(0)]],
    device float*               output  [[buffer(1)]],
    constant FusedGeluMulParams& params [[buffer(2)]],
    uint gid [[thread_position_in_grid]])
{
    if (gid < params.n_elements) {
        output[gid] = gelu_tanh(gate_up[gid]) * gate_up[params.n_elements + gid];
    }
}

// buffer(0) gate_up_buf [top_k, 2 I], (1) output_buf [top_k, I], (2)
// intermediate (uint), (3) top_k (uint), as the crate binds them. Grid
// (ceil(I / tg), top_k, 1) threadgroups of (tg, 1, 1), tg = min(256, I):
// thread (i, slot).
kernel void moe_swiglu_batch(
    device const float* gate_up_buf  [[buffer(0)]],
    device float*       output_buf   [[buffer(1)]],
    constant uint&      intermediate [[buffer(2)]],
    constant uint&      top_k        [[buffer(3)]],
    uint2 tid [[thread_position_in_grid]])
{
    const uint i = tid.x, slot = tid.y;
    if (i >= intermediate || slot >= top_k) {
        return;
    }
    const ulong base = ulong(slot) * 2 * intermediate;
    output_buf[ulong(slot) * intermediate + i] = gelu_tanh(gate_up_buf[base + i]) * gate_up_buf[base + intermediate + i];
}

// buffer(0) expert_outputs [top_k, H], (1) weights [top_k], (2) output [H],
// (3) MoeWeightedSumParams. Slots summed in order.
kernel void moe_weighted_sum(
    device const float*           expert_outputs [[buffer(0)]],
    device const float*           weights        [[buffer(1)]],
    device float*                 output         [[buffer(2)]],
    constant MoeWeightedSumParams& params        [[buffer(3)]],
    uint tid [[thread_position_in_grid]])
{
    if (tid >= params.hidden_size) {
        return;
    }
    float sum = 0.0f;
    for (uint k = 0; k < params.top_k; ++k) {
        sum += expert_outputs[ulong(k) * params.hidden_size + tid] * weights[k];
    }
    output[tid] = sum;
}

// buffer(0) gate_up [T, top_k, 2 I], (1) output [T, top_k, I], (2)
// MoeSwigluSeqParams. Grid (ceil(I / tg), top_k, T) threadgroups of (tg, 1, 1).
template <typename T>
static inline void swiglu_seq_at(device const T* gate_up, device T* out, constant MoeSwigluSeqParams& p, uint3 tid) {
    const uint i = tid.x, slot = tid.y, tok = tid.z;
    if (i >= p.intermediate || slot >= p.top_k || tok >= p.n_tokens) {
        return;
    }
    const ulong row = ulong(tok) * p.top_k + slot;
    const ulong base = row * 2 * p.intermediate;
    out[row * p.intermediate + i] = T(gelu_tanh(float(gate_up[base + i])) * float(gate_up[base + p.intermediate + i]));
}

kernel void moe_swiglu_seq(
    device const float*          gate_up_buf [[buffer(0)]],
    device float*                output_buf  [[buffer(1)]],
    constant MoeSwigluSeqParams& params      [[buffer(2)]],
    uint3 tid [[thread_position_in_grid]])
{
    swiglu_seq_at(gate_up_buf, output_buf, params, tid);
}

kernel void moe_swiglu_seq_bf16(
    device const bfloat*         gate_up_buf [[buffer(0)]],
    device bfloat*               output_buf  [[buffer(1)]],
    constant MoeSwigluSeqParams& params      [[buffer(2)]],
    uint3 tid [[thread_position_in_grid]])
{
    swiglu_seq_at(gate_up_buf, output_buf, params, tid);
}

// buffer(0) expert_outputs [T, top_k, H], (1) weights f32 [T, top_k], (2)
// output [T, H], (3) MoeWeightedSumSeqParams. Grid (ceil(H / tg), T, 1)
// threadgroups of (tg, 1, 1): thread (d, token), slots summed in order.
template <typename TI, typename TO>
static inline void weighted_sum_seq_at(device const TI* y, device const float* w, device TO* out, constant MoeWeightedSumSeqParams& p,
                                       uint2 tid) {
    const uint d = tid.x, tok = tid.y;
    if (d >= p.hidden_size || tok >= p.n_tokens) {
        return;
    }
    float sum = 0.0f;
    for (uint k = 0; k < p.top_k; ++k) {
        const ulong slot = ulong(tok) * p.top_k + k;
        sum += float(y[slot * p.hidden_size + d]) * w[slot];
    }
    out[ulong(tok) * p.hidden_size + d] = TO(sum);
}

kernel void moe_weighted_sum_seq(
    device const float*              expert_outputs [[buffer(0)]],
    device const float*              weights        [[buffer(1)]],
    device float*                    output         [[buffer(2)]],
    constant MoeWeightedSumSeqParams& params        [[buffer(3)]],
    uint2 tid [[thread_position_in_grid]])
{
    weighted_sum_seq_at(expert_outputs, weights, output, params, tid);
}

kernel void moe_weighted_sum_seq_bf16_input(
    device const bfloat*             expert_outputs [[buffer(0)]],
    device const float*              weights        [[buffer(1)]],
    device float*                    output         [[buffer(2)]],
    constant MoeWeightedSumSeqParams& params        [[buffer(3)]],
    uint2 tid [[thread_position_in_grid]])
{
    weighted_sum_seq_at(expert_outputs, weights, output, params, tid);
}

kernel void moe_weighted_sum_seq_f16(
    device const half*               expert_outputs [[buffer(0)]],
    device const float*              weights        [[buffer(1)]],
    device half*                     output         [[buffer(2)]],
    constant MoeWeightedSumSeqParams& params        [[buffer(3)]],
    uint2 tid [[thread_position_in_grid]])
{
    weighted_sum_seq_at(expert_outputs, weights, output, params, tid);
}

kernel void moe_weighted_sum_seq_bf16(
    device const bfloat*             expert_outputs [[buffer(0)]],
    device const float*              weights        [[buffer(1)]],
    device bfloat*                   output         [[buffer(2)]],
    constant MoeWeightedSumSeqParams& params        [[buffer(3)]],
    uint2 tid [[thread_position_in_grid]])
{
    weighted_sum_seq_at(expert_outputs, weights, output, params, tid);
}

// moe_gather_topk_weights: for k < top_k, with e = sorted_indices[k]:
//   out_expert_ids[k] = e; p_k = softmax_probs[e];
//   out_weights[k] = p_k / sum_j p_j * per_expert_scale[e] (0 when the sum is
//   not positive).
// An index past the experts (e >= n_experts) is written as it is, with
// p_k = 0 and weight 0: nothing is read outside the buffers (the crate reads
// it unchecked). top_k <= 8. Grid (1, 1, 1) of one thread.
// buffer(0) softmax_probs [n_experts], (1) sorted_indices [n_experts], (2)
// per_expert_scale [n_experts], (3) out_expert_ids [top_k], (4) out_weights
// [top_k], (5) MoeGatherTopkParams.
kernel void moe_gather_topk_weights(
    device const float*          softmax_probs    [[buffer(0)]],
    device const uint*           sorted_indices   [[buffer(1)]],
    device const float*          per_expert_scale [[buffer(2)]],
    device uint*                 out_expert_ids   [[buffer(3)]],
    device float*                out_weights      [[buffer(4)]],
    constant MoeGatherTopkParams& params          [[buffer(5)]],
    uint tid [[thread_position_in_grid]])
{
    if (tid != 0) {
        return;
    }
    const uint k_n = min(params.top_k, 8u), E = params.n_experts;
    float probs[8];
    float sum = 0.0f;
    for (uint k = 0; k < k_n; ++k) {
        const uint e = sorted_indices[k];
        out_expert_ids[k] = e;
        probs[k] = e < E ? softmax_probs[e] : 0.0f;
        sum += probs[k];
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (uint k = 0; k < k_n; ++k) {
        const uint e = sorted_indices[k];
        out_weights[k] = e < E ? probs[k] * inv * per_expert_scale[e] : 0.0f;
    }
}
