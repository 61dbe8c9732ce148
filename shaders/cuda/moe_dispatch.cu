// The dispatch of tokens to experts and the glue of an MoE layer (CUDA),
// entry names, bindings and math as shaders/moe_dispatch.metal, whose comment
// gives each kernel's. The launches are the Metal ones (grids count blocks).
// The glue kernels are one thread per element and memory-bound on tensors of
// a few MB at most (an MoE layer's [tokens, top_k, hidden]); the f32 math is
// the prelude's GeluTanh (fast exp and division).

namespace {

// The exclusive prefix sum over the block of one value a thread (threads in
// order), and the block's total. Every thread of the block calls it, the
// block a multiple of 32 threads; partials holds one u32 per warp.
__device__ __forceinline__ u32 block_exclusive_sum(u32 v, u32* partials, u32& total) {
    const u32 lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nw = (blockDim.x + 31u) >> 5;
    u32 incl = v;
#pragma unroll
    for (u32 o = 1; o < 32; o <<= 1) {
        const u32 t = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += t;
    }
    if (lane == 31u) partials[warp] = incl;
    __syncthreads();
    u32 before = incl - v;
    total = 0;
    for (u32 i = 0; i < nw; ++i) {
        if (i < warp) before += partials[i];
        total += partials[i];
    }
    return before;
}

__device__ __forceinline__ u32 flat_id() {
    return blockIdx.x * blockDim.x + threadIdx.x;
}

}  // namespace

// buffer(0) ids [n_pairs], (1) offsets [E + 2], (2) order [n_pairs], (3)
// MoeDispatchSortParams; one block of any size (a multiple of 32), dynamic
// shared memory E + 1 counters and one u32 per warp.
extern "C" __global__ void moe_dispatch_sort(const u32* __restrict__ ids, u32* __restrict__ offsets, u32* __restrict__ order,
                                             const MoeDispatchSortParams* params) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const u32 P = params->n_pairs, E = params->num_experts, B = E + 1u;
    u32* count = reinterpret_cast<u32*>(smem_raw);
    u32* partial = count + B;
    const u32 tid = threadIdx.x, bs = blockDim.x;
    for (u32 b = tid; b < B; b += bs) count[b] = 0u;
    __syncthreads();
    for (u32 p = tid; p < P; p += bs) atomicAdd(&count[min(__ldg(ids + p), E)], 1u);
    __syncthreads();
    const u32 span = (B + bs - 1u) / bs;
    const u32 b0 = min(tid * span, B), b1 = min(b0 + span, B);
    u32 local = 0;
    for (u32 b = b0; b < b1; ++b) local += count[b];
    u32 total;
    u32 start = block_exclusive_sum(local, partial, total);
    for (u32 b = b0; b < b1; ++b) {
        const u32 c = count[b];
        offsets[b] = start;
        count[b] = start;
        start += c;
    }
    if (tid == 0) offsets[B] = P;
    __syncthreads();
    for (u32 p = tid; p < P; p += bs) {
        const u32 at = atomicAdd(&count[min(__ldg(ids + p), E)], 1u);
        if (at < P) order[at] = p;
    }
}

// ---- mlx-native's moe_dispatch kernels ----

extern "C" __global__ void fused_gelu_mul(const float* gate_out, const float* up_out, float* output, const FusedGeluMulParams* params) {
    const u32 i = flat_id();
    if (i < params->n_elements) output[i] = GeluTanh()(gate_out[i]) * up_out[i];
}
extern "C" __global__ void fused_gelu_mul_bf16(const bf16* gate_out, const bf16* up_out, bf16* output, const FusedGeluMulParams* params) {
    const u32 i = flat_id();
    if (i < params->n_elements) output[i] = from_f<bf16>(GeluTanh()(to_f(gate_out[i])) * to_f(up_out[i]));
}
extern "C" __global__ void moe_accumulate(float* accumulator, const float* expert_output, const MoeAccumParams* params) {
    const u32 i = flat_id();
    if (i < params->n_elements) accumulator[i] += params->routing_weight * expert_output[i];
}
extern "C" __global__ void zero_buffer(float* buffer, const ZeroParams* params) {
    const u32 i = flat_id();
    if (i < params->n_elements) buffer[i] = 0.0f;
}
extern "C" __global__ void moe_swiglu_fused(const float* gate_up, float* output, const FusedGeluMulParams* params) {
    const u32 i = flat_id(), n = params->n_elements;
    if (i < n) output[i] = GeluTanh()(gate_up[i]) * gate_up[n + i];
}
// Grid (ceil(I / tg), top_k, 1) blocks of (tg, 1, 1): thread (i, slot).
extern "C" __global__ void moe_swiglu_batch(const float* gate_up_buf, float* output_buf, const uint* intermediate, const uint* top_k) {
    const u32 I = *intermediate, i = flat_id(), slot = blockIdx.y;
    if (i >= I || slot >= *top_k) return;
    const u64 base = u64(slot) * 2u * I;
    output_buf[u64(slot) * I + i] = GeluTanh()(gate_up_buf[base + i]) * gate_up_buf[base + I + i];
}
extern "C" __global__ void moe_weighted_sum(const float* expert_outputs, const float* weights, float* output,
                                            const MoeWeightedSumParams* params) {
    const u32 d = flat_id(), H = params->hidden_size;
    if (d >= H) return;
    float sum = 0.0f;
    for (u32 k = 0; k < params->top_k; ++k) sum += expert_outputs[u64(k) * H + d] * weights[k];
    output[d] = sum;
}

namespace {

// Grid (ceil(I / tg), top_k, T) blocks of (tg, 1, 1): thread (i, slot, token).
template <typename T>
__device__ __forceinline__ void swiglu_seq(const T* gate_up, T* out, const MoeSwigluSeqParams* p) {
    const u32 i = blockIdx.x * blockDim.x + threadIdx.x, slot = blockIdx.y, tok = blockIdx.z, I = p->intermediate;
    if (i >= I || slot >= p->top_k || tok >= p->n_tokens) return;
    const u64 row = u64(tok) * p->top_k + slot;
    const T* g = gate_up + row * 2u * I;
    out[row * I + i] = from_f<T>(GeluTanh()(to_f(g[i])) * to_f(g[I + i]));
}

// Grid (ceil(H / tg), T, 1) blocks of (tg, 1, 1): thread (d, token).
template <typename TI, typename TO>
__device__ __forceinline__ void weighted_sum_seq(const TI* y, const float* w, TO* out, const MoeWeightedSumSeqParams* p) {
    const u32 d = blockIdx.x * blockDim.x + threadIdx.x, tok = blockIdx.y, H = p->hidden_size;
    if (d >= H || tok >= p->n_tokens) return;
    float sum = 0.0f;
    for (u32 k = 0; k < p->top_k; ++k) {
        const u64 slot = u64(tok) * p->top_k + k;
        sum += to_f(y[slot * H + d]) * w[slot];
    }
    out[u64(tok) * H + d] = from_f<TO>(sum);
}

}  // namespace

extern "C" __global__ void moe_swiglu_seq(const float* gate_up_buf, float* output_buf, const MoeSwigluSeqParams* params) {
    swiglu_seq(gate_up_buf, output_buf, params);
}
extern "C" __global__ void moe_swiglu_seq_bf16(const bf16* gate_up_buf, bf16* output_buf, const MoeSwigluSeqParams* params) {
    swiglu_seq(gate_up_buf, output_buf, params);
}
// moe_weighted_sum_seq (f32), _bf16_input (bf16 in, f32 out), _f16, _bf16.
#define MOE_WEIGHTED_SUM_SEQ_ENTRY(TI, TO, NAME)                                                \
    extern "C" __global__ void NAME(const TI* expert_outputs, const float* weights, TO* output, \
                                    const MoeWeightedSumSeqParams* params) {                    \
        weighted_sum_seq(expert_outputs, weights, output, params);                              \
    }
MOE_WEIGHTED_SUM_SEQ_ENTRY(float, float, moe_weighted_sum_seq)
MOE_WEIGHTED_SUM_SEQ_ENTRY(bf16, float, moe_weighted_sum_seq_bf16_input)
MOE_WEIGHTED_SUM_SEQ_ENTRY(__half, __half, moe_weighted_sum_seq_f16)
MOE_WEIGHTED_SUM_SEQ_ENTRY(bf16, bf16, moe_weighted_sum_seq_bf16)

extern "C" __global__ void moe_gather_topk_weights(const float* softmax_probs, const u32* sorted_indices, const float* per_expert_scale,
                                                   u32* out_expert_ids, float* out_weights, const MoeGatherTopkParams* params) {
    if (blockIdx.x * blockDim.x + threadIdx.x != 0) return;
    const u32 kn = min(params->top_k, 8u), E = params->n_experts;
    float probs[8];
    float sum = 0.0f;
    for (u32 k = 0; k < kn; ++k) {
        const u32 e = sorted_indices[k];
        out_expert_ids[k] = e;
        probs[k] = e < E ? softmax_probs[e] : 0.0f;
        sum += probs[k];
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (u32 k = 0; k < kn; ++k) {
        const u32 e = sorted_indices[k];
        out_weights[k] = e < E ? probs[k] * inv * per_expert_scale[e] : 0.0f;
    }
}
