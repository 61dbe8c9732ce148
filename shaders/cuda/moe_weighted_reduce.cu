// The reduction of an MoE layer back to one row per token (CUDA), entry
// names, bindings and math as shaders/moe_weighted_reduce.metal:
//   output[t, d] = sum_k expert_w[t, k] y_expert[t, k, d]
//                + sigmoid(sh_logit[t]) y_shared[t, d] [+ residual[t, d]]
// in f32 (slots in order, then the shared term, then the residual), rounded
// once to T.
//
// Memory-bound: a thread takes chunks of VEC consecutive elements of a row
// (one 16-byte vector of T), the grid striding over the chunks of row
// blockIdx.y, so both the Metal launch (ceil(h / 256) blocks of 256 a row)
// and the op's CUDA launch (ceil(h / (256 VEC)), ts/ops/moe_weighted_reduce.ts)
// cover every element. Rows of a multiple of VEC with 16-byte aligned
// pointers move as vectors (the routing weights of the token held in
// registers); others go element by element. Each thread reads a chunk's
// residual before it writes its output, so output may be residual (in place).

namespace {

// The shared expert's gate: one value per token, so expf and an exact division.
__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }

// E, the expert outputs' type: T, or bf16 beside f32 (_bf16_input); S, the
// shared row's: T, or bf16 with the experts' (_bf16_shared). A thread takes
// VEC = 16 bytes of T; the expert and shared rows are read VEC elements at a
// time too (8 bytes of bf16 beside f32).
template <typename T, typename E, typename S>
__device__ __forceinline__ void weighted_reduce(const MoeWeightedReduceParams* p, const float* expert_w, const E* y_expert,
                                                const T* sh_logit, const S* y_shared, const T* residual, T* output) {
    constexpr int VEC = VecOf<T>::N;
    const u32 H = p->h, K = p->top_k, t = blockIdx.y;
    if (t >= p->n_tokens) return;
    const bool add = p->add_residual != 0u;
    const u64 row = u64(t) * H;
    const float gate = sigmoid_f(to_f(sh_logit[t]));
    const float* w = expert_w + u64(t) * K;
    const E* ye = y_expert + u64(t) * K * H;
    const u32 chunks = (H + VEC - 1) / VEC;
    const bool vec = H % VEC == 0 && aligned16(y_expert) && aligned16(y_shared) && aligned16(output) && (!add || aligned16(residual));
    for (u32 c = blockIdx.x * blockDim.x + threadIdx.x; c < chunks; c += gridDim.x * blockDim.x) {
        const u32 d0 = c * VEC;
        if (vec) {
            float acc[VEC], v[VEC];
#pragma unroll
            for (int j = 0; j < VEC; ++j) acc[j] = 0.0f;
            for (u32 k = 0; k < K; ++k) {
                load_vec(ye + u64(k) * H + d0, v);
                const float wk = __ldg(w + k);
#pragma unroll
                for (int j = 0; j < VEC; ++j) acc[j] = fmaf(wk, v[j], acc[j]);
            }
            load_vec(y_shared + row + d0, v);
#pragma unroll
            for (int j = 0; j < VEC; ++j) acc[j] = fmaf(gate, v[j], acc[j]);
            if (add) {
                load_vec(residual + row + d0, v);
#pragma unroll
                for (int j = 0; j < VEC; ++j) acc[j] += v[j];
            }
            store_vec(output + row + d0, acc);
        } else {
            const u32 end = min(H - d0, u32(VEC));
            for (u32 j = 0; j < end; ++j) {
                const u32 d = d0 + j;
                float acc = 0.0f;
                for (u32 k = 0; k < K; ++k) acc = fmaf(w[k], to_f(ye[u64(k) * H + d]), acc);
                acc = fmaf(gate, to_f(y_shared[row + d]), acc);
                if (add) acc += to_f(residual[row + d]);
                output[row + d] = from_f<T>(acc);
            }
        }
    }
}

}  // namespace

// buffer(0) MoeWeightedReduceParams, (1) expert_w f32 [T, top_k], (2)
// y_expert [T, top_k, h] of E, (3) sh_logit [T] of T, (4) y_shared [T, h]
// of S, (5) residual [T, h], (6) output [T, h], of T.
#define MOE_WEIGHTED_REDUCE_ENTRY(NAME, T, E, S)                                                                \
    extern "C" __global__ void NAME(const MoeWeightedReduceParams* p, const float* expert_w, const E* y_expert, \
                                    const T* sh_logit, const S* y_shared, const T* residual, T* output) {       \
        weighted_reduce(p, expert_w, y_expert, sh_logit, y_shared, residual, output);                           \
    }
MOE_WEIGHTED_REDUCE_ENTRY(moe_weighted_reduce_f32, float, float, float)
MOE_WEIGHTED_REDUCE_ENTRY(moe_weighted_reduce_f16, __half, __half, __half)
MOE_WEIGHTED_REDUCE_ENTRY(moe_weighted_reduce_bf16, bf16, bf16, bf16)
MOE_WEIGHTED_REDUCE_ENTRY(moe_weighted_reduce_bf16_input, float, bf16, float)
MOE_WEIGHTED_REDUCE_ENTRY(moe_weighted_reduce_bf16_shared, float, bf16, bf16)
