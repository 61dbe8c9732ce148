// The reduction of an MoE layer back to one row per token (CUDA), entry
// names, bindings and math as shaders/moe_weighted_reduce.metal (the _norm_
// entries: the reduction, then the RMS norm of the row, below):
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
            weighted_rows(w, ye + d0, H, K, acc);
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

// The reduction with f32 output and the RMS norm of each output row
// (moe_weighted_reduce_norm_*, ours), one block per token: a thread takes
// 4-float vectors of the row (E and S rows read 4 elements at a time), keeps
// its first NC sums and norm weights in registers (every row of up to
// 4 * NC * blockDim.x elements: 4096 at the op's 256 threads), and goes back
// to its own stores of output past them. Rows not a multiple of 4, or not
// 16-byte aligned, go element by element. Each thread reads back only what
// it wrote, so output may be residual.
constexpr int NC = 4;

template <typename E, typename S>
__device__ __forceinline__ void weighted_reduce_norm(const MoeWeightedReduceNormParams* p, const float* expert_w,
                                                     const E* y_expert, const float* sh_logit, const S* y_shared,
                                                     const float* residual, float* output, const float* norm_weight,
                                                     float* normed) {
    extern __shared__ float partials[];
    const u32 H = p->h, K = p->top_k, t = blockIdx.x;
    if (t >= p->n_tokens) return;
    const bool add = p->add_residual != 0u;
    const u64 row = u64(t) * H;
    const float gate = sigmoid_f(sh_logit[t]);
    const float* w = expert_w + u64(t) * K;
    const E* ye = y_expert + u64(t) * K * H;
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const bool vec = H % 4 == 0 && aligned16(y_expert) && aligned16(y_shared) && aligned16(output) && aligned16(normed) &&
                     aligned16(norm_weight) && (!add || aligned16(residual));
    float sq = 0.0f;
    if (vec) {
        const u32 nv = H / 4;
        // The sum at vector vi: slots in order, the shared term, the residual (fmaf, as weighted_reduce).
        auto sum_at = [&](u32 vi) {
            float acc[4] = {0.f, 0.f, 0.f, 0.f}, v[4];
            const u64 d0 = 4 * u64(vi);
            weighted_rows(w, ye + d0, H, K, acc);
            load_vec(y_shared + row + d0, v);
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[j] = fmaf(gate, v[j], acc[j]);
            if (add) {
                load_vec(residual + row + d0, v);
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[j] += v[j];
            }
            return make_float4(acc[0], acc[1], acc[2], acc[3]);
        };
        float4 held[NC], nw[NC];
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            const u32 vi = tid + u32(c) * bs;
            if (vi < nv) {
                nw[c] = *reinterpret_cast<const float4*>(norm_weight + 4 * u64(vi));
                held[c] = sum_at(vi);
                *reinterpret_cast<float4*>(output + row + 4 * u64(vi)) = held[c];
                sq += held[c].x * held[c].x + held[c].y * held[c].y + held[c].z * held[c].z + held[c].w * held[c].w;
            }
        }
        for (u32 vi = tid + NC * bs; vi < nv; vi += bs) {
            const float4 a = sum_at(vi);
            *reinterpret_cast<float4*>(output + row + 4 * u64(vi)) = a;
            sq += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
        }
        const float r = rsqrtf(block_sum(sq, partials) / float(H) + p->eps);
        auto emit = [&](u32 vi, float4 a, float4 m) {
            *reinterpret_cast<float4*>(normed + row + 4 * u64(vi)) =
                make_float4(a.x * r * m.x, a.y * r * m.y, a.z * r * m.z, a.w * r * m.w);
        };
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            const u32 vi = tid + u32(c) * bs;
            if (vi < nv) emit(vi, held[c], nw[c]);
        }
        for (u32 vi = tid + NC * bs; vi < nv; vi += bs) {
            emit(vi, *reinterpret_cast<const float4*>(output + row + 4 * u64(vi)),
                 *reinterpret_cast<const float4*>(norm_weight + 4 * u64(vi)));
        }
    } else {
        for (u32 d = tid; d < H; d += bs) {
            float acc = 0.0f;
            for (u32 k = 0; k < K; ++k) acc = fmaf(w[k], to_f(ye[u64(k) * H + d]), acc);
            acc = fmaf(gate, to_f(y_shared[row + d]), acc);
            if (add) acc += residual[row + d];
            output[row + d] = acc;
            sq += acc * acc;
        }
        const float r = rsqrtf(block_sum(sq, partials) / float(H) + p->eps);
        for (u32 d = tid; d < H; d += bs) normed[row + d] = output[row + d] * r * norm_weight[d];
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

// buffer(0) MoeWeightedReduceNormParams, (1) expert_w f32, (2) y_expert of E,
// (3) sh_logit f32, (4) y_shared of S, (5) residual f32, (6) output f32, (7)
// norm_weight [h] f32, (8) normed f32; one block per token.
#define MOE_WEIGHTED_REDUCE_NORM_ENTRY(NAME, E, S)                                                                 \
    extern "C" __global__ void __launch_bounds__(256)                                                              \
        NAME(const MoeWeightedReduceNormParams* p, const float* expert_w, const E* y_expert, const float* sh_logit, \
             const S* y_shared, const float* residual, float* output, const float* norm_weight, float* normed) {   \
        weighted_reduce_norm(p, expert_w, y_expert, sh_logit, y_shared, residual, output, norm_weight, normed);    \
    }
MOE_WEIGHTED_REDUCE_NORM_ENTRY(moe_weighted_reduce_norm_f32, float, float)
MOE_WEIGHTED_REDUCE_NORM_ENTRY(moe_weighted_reduce_norm_bf16_input, bf16, float)
MOE_WEIGHTED_REDUCE_NORM_ENTRY(moe_weighted_reduce_norm_bf16_shared, bf16, bf16)
