// Rotary position embedding (CUDA), entry names and bindings as
// shaders/rope.metal:
//   angle(pos, i) = pos * theta^(-2i / head_dim) / ff[i]
//   (a, b) -> (a cos - b sin, a sin + b cos)
// rope_<dtype>: pairs (x[2i], x[2i+1]) of rows [seq_len, head_dim], one position per row.
// rope_neox_<dtype>: pairs (x[i], x[i + head_dim/2]), rotated for i < rope_dim / 2
// and copied otherwise, rows [seq_len * n_heads, head_dim], positions[row / n_heads].
//
// Launch (the op's CUDA launch): rows or tokens on gridDim.x (whose limit is
// 2^31 - 1, where gridDim.y stops at 65535). rope_<dtype>, rope_neox_<dtype>:
// blockDim (tx, ty), row = blockIdx.x * ty + threadIdx.y, pair = blockIdx.y *
// tx + threadIdx.x, one pair a thread (rope_neox: the pairs past rope_dim / 2
// copied by the same threads). rope_neox_<dtype>_heads (many tokens): token =
// blockIdx.x, a thread ROPE_PAIRS pairs of ROPE_HEADS heads (common.cuh's
// rope_heads; ropeHeadsCudaLaunch in ts/ops/rope.ts). rope_<dtype>_rows
// (many rows): a thread ROPE_PAIRS pairs of ROPE_HEADS consecutive rows
// (rope_normal_rows below; ropeRowsCudaLaunch). Each element is read
// and written by one thread, read first: output may be input (in place). The
// angle is formed in f32 as Metal's; powf, division and sincosf are the
// accurate ones (no fast math), so large positions keep their accuracy.

namespace {

template <typename T>
__device__ __forceinline__ void rope_normal(const T* input, T* output, const RopeParams* p, const u32* positions) {
    const u32 row = blockIdx.x * blockDim.y + threadIdx.y;
    const u32 pair = blockIdx.y * blockDim.x + threadIdx.x;
    const u32 head_dim = u32(p->head_dim);
    if (pair >= head_dim / 2u) return;
    float c, s;
    rope_cos_sin(positions[row], pair, p->head_dim, p->theta, 1.0f, &c, &s);
    const u64 at = u64(row) * head_dim + 2u * pair;
    const float a = to_f(input[at]);
    const float b = to_f(input[at + 1]);
    output[at] = from_f<T>(a * c - b * s);
    output[at + 1] = from_f<T>(a * s + b * c);
}

// blockDim.x of the rows form at most (ts/ops/rope.ts ROPE_MAX_PAIR_THREADS).
constexpr u32 ROPE_MAX_ROW_THREADS = 64u;

// The rows form of rope_<dtype>: a thread two chunks of ROPE_PAIRS elements
// (two pairs each) of ROPE_HEADS consecutive rows from r0, chunks c0 =
// 2 blockDim.x blockIdx.y + threadIdx.x and c0 + blockDim.x, so that a
// warp's loads of a row are contiguous. Its four pairs' divisors are formed
// once a block (in shared memory, spread over its threads), and a row whose
// position repeats the row before's keeps that row's (cos, sin) (the rows of
// one token's heads share a position): a row costs its bytes, not a powf and
// a sincosf a pair. Every load is issued before the first angle and held as
// loaded (RopeRaw); the params are read before them (see rope_heads). The
// launch covers the rows exactly (rows a multiple of ROPE_HEADS), as
// mlx-native's exact threads: RopeParams carries no row count.
template <typename T>
__device__ __forceinline__ void rope_normal_rows(const T* input, T* output, const RopeParams* p, const u32* positions) {
    const float head_dim_f = p->head_dim, theta = p->theta;
    const u32 head_dim = u32(head_dim_f);
    const u32 r0 = (blockIdx.x * blockDim.y + threadIdx.y) * ROPE_HEADS;
    u32 e[2], width[2];
#pragma unroll
    for (u32 h = 0; h < 2u; ++h) {
        e[h] = ROPE_PAIRS * ((2u * blockIdx.y + h) * blockDim.x + threadIdx.x);
        width[h] = e[h] < head_dim ? min(ROPE_PAIRS, head_dim - e[h]) : 0u;
    }
    constexpr u64 vbytes = ROPE_PAIRS * sizeof(T);
    const bool vec = head_dim % ROPE_PAIRS == 0u && reinterpret_cast<u64>(input) % vbytes == 0u &&
                     reinterpret_cast<u64>(output) % vbytes == 0u;
    RopeRaw<T> x[2][ROPE_HEADS];
    u32 pos[ROPE_HEADS];
    // The positions before the rows: the first angle waits for them alone
    // (a load behind the rows' would wait on their scoreboards).
#pragma unroll
    for (u32 j = 0; j < ROPE_HEADS; ++j) pos[j] = width[0] > 0u ? positions[r0 + j] : 0u;
#pragma unroll
    for (u32 j = 0; j < ROPE_HEADS; ++j) {
#pragma unroll
        for (u32 h = 0; h < 2u; ++h) {
            if (width[h] > 0u) rope_raw_load(input + u64(r0 + j) * head_dim + e[h], vec, width[h], x[h][j]);
        }
    }
    // The block's 4 blockDim.x pairs' divisors from its first pair on: the
    // thread's pair 2 (h blockDim.x + threadIdx.x) + i is element pair i of
    // its chunk h.
    __shared__ float divisors[4u * ROPE_MAX_ROW_THREADS];
    rope_block_divisors(4u * blockDim.x * blockIdx.y, 4u * blockDim.x, head_dim_f, theta, divisors);
    if (width[0] == 0u) return;
    float d[2][2], c[2][2], s[2][2];
#pragma unroll
    for (u32 h = 0; h < 2u; ++h) {
#pragma unroll
        for (u32 i = 0; i < 2u; ++i) d[h][i] = divisors[2u * (h * blockDim.x + threadIdx.x) + i];
    }
#pragma unroll
    for (u32 j = 0; j < ROPE_HEADS; ++j) {
        if (j == 0u || pos[j] != pos[j - 1u]) {
#pragma unroll
            for (u32 h = 0; h < 2u; ++h) {
#pragma unroll
                for (u32 i = 0; i < 2u; ++i) rope_turn(pos[j], d[h][i], 1.0f, &c[h][i], &s[h][i]);
            }
        }
#pragma unroll
        for (u32 h = 0; h < 2u; ++h) {
            if (width[h] > 0u) {
                float v[ROPE_PAIRS];
                rope_unpack<T>(x[h][j], v);
#pragma unroll
                for (u32 i = 0; i < 2u; ++i) {
                    const float a = v[2u * i], b = v[2u * i + 1u];
                    v[2u * i] = a * c[h][i] - b * s[h][i];
                    v[2u * i + 1u] = a * s[h][i] + b * c[h][i];
                }
                rope_store(output + u64(r0 + j) * head_dim + e[h], vec, width[h], v);
            }
        }
    }
}

template <typename T>
__device__ __forceinline__ void rope_neox(const T* input, T* output, const RopeParams* p, const u32* positions,
                                          u32 n_heads, bool has_ff, const float* freq_factors) {
    const u32 row = blockIdx.x * blockDim.y + threadIdx.y;
    const u32 pair = blockIdx.y * blockDim.x + threadIdx.x;
    const u32 head_dim = u32(p->head_dim);
    const u32 half_dim = head_dim / 2u;
    const u32 half_rope = u32(p->rope_dim) / 2u;
    if (pair >= half_rope) return;
    const float ff = has_ff ? freq_factors[pair] : 1.0f;
    float c, s;
    rope_cos_sin(positions[row / n_heads], pair, p->head_dim, p->theta, ff, &c, &s);
    const u64 base = u64(row) * head_dim;
    const float a = to_f(input[base + pair]);
    const float b = to_f(input[base + pair + half_dim]);
    output[base + pair] = from_f<T>(a * c - b * s);
    output[base + pair + half_dim] = from_f<T>(a * s + b * c);
    for (u32 i = half_rope + pair; i < half_dim; i += half_rope) {
        output[base + i] = input[base + i];
        output[base + i + half_dim] = input[base + i + half_dim];
    }
}

template <typename T>
__device__ __forceinline__ void rope_neox_heads(const T* input, T* output, const RopeParams* p, const u32* positions,
                                                u32 n_heads, bool has_ff, const float* freq_factors) {
    const u32 pos = positions[blockIdx.x];
    const float head_dim = p->head_dim, theta = p->theta;
    const u32 hd = u32(p->head_dim), half_rope = u32(p->rope_dim) / 2u;
    if (has_ff) {
        rope_heads(input, output, n_heads, hd, half_rope, [&](u32 pair, float& c, float& s) {
            rope_cos_sin(pos, pair, head_dim, theta, freq_factors[pair], &c, &s);
        });
    } else {
        rope_heads(input, output, n_heads, hd, half_rope, [&](u32 pair, float& c, float& s) {
            rope_cos_sin(pos, pair, head_dim, theta, 1.0f, &c, &s);
        });
    }
}

}  // namespace

// rope_<dtype><SUFFIX> for f32, f16 and bf16, each FORM<T> over its bindings.
#define ROPE_NORMAL_ENTRIES(SUFFIX, FORM)                                                                           \
    extern "C" __global__ void rope_f32##SUFFIX(const float* input, float* output, const RopeParams* params,       \
                                                const u32* positions) {                                           \
        FORM<float>(input, output, params, positions);                                                            \
    }                                                                                                             \
    extern "C" __global__ void rope_f16##SUFFIX(const __half* input, __half* output, const RopeParams* params,     \
                                                const u32* positions) {                                           \
        FORM<__half>(input, output, params, positions);                                                           \
    }                                                                                                             \
    extern "C" __global__ void rope_bf16##SUFFIX(const __nv_bfloat16* input, __nv_bfloat16* output,                \
                                                 const RopeParams* params, const u32* positions) {                \
        FORM<__nv_bfloat16>(input, output, params, positions);                                                    \
    }

// buffer(0) input [seq_len, head_dim], (1) output (may be input), (2) RopeParams, (3) positions [seq_len].
ROPE_NORMAL_ENTRIES(, rope_normal)

// The rows form of rope_<dtype> (same bindings; ropeRowsCudaLaunch in
// ts/ops/rope.ts): grid (rows / ROPE_HEADS / ty, ceil(head_dim /
// ROPE_PAIRS / 2 / tx)), rows a multiple of ROPE_HEADS * ty.
ROPE_NORMAL_ENTRIES(_rows, rope_normal_rows)

// rope_neox_<dtype><SUFFIX> for f32, f16 (with frequency factors) and bf16
// (without: mlx-native's bf16 entry binds none), each FORM<T>.
#define ROPE_NEOX_ENTRIES(SUFFIX, FORM)                                                                             \
    extern "C" __global__ void rope_neox_f32##SUFFIX(const float* input, float* output, const RopeParams* params,  \
                                                     const u32* positions, const RopeNeoxParams* rope_params,     \
                                                     const float* freq_factors) {                                 \
        FORM<float>(input, output, params, positions, rope_params->n_heads, rope_params->has_freq_factors != 0u,  \
                    freq_factors);                                                                                \
    }                                                                                                             \
    extern "C" __global__ void rope_neox_f16##SUFFIX(const __half* input, __half* output, const RopeParams* params, \
                                                     const u32* positions, const RopeNeoxParams* rope_params,     \
                                                     const float* freq_factors) {                                 \
        FORM<__half>(input, output, params, positions, rope_params->n_heads, rope_params->has_freq_factors != 0u, \
                     freq_factors);                                                                               \
    }                                                                                                             \
    extern "C" __global__ void rope_neox_bf16##SUFFIX(const __nv_bfloat16* input, __nv_bfloat16* output,           \
                                                      const RopeParams* params, const u32* positions,             \
                                                      const RopeNeoxParams* rope_params) {                        \
        FORM<__nv_bfloat16>(input, output, params, positions, rope_params->n_heads, false, nullptr);              \
    }

// buffer(0) input [seq_len * n_heads, head_dim], (1) output (may be input), (2) RopeParams,
// (3) positions [seq_len], (4) RopeNeoxParams, (5) freq_factors [rope_dim / 2] (not bf16).
ROPE_NEOX_ENTRIES(, rope_neox)

// The heads form of rope_neox_<dtype> (same bindings): grid (seq_len, ceil(head_dim / 2 / ROPE_PAIRS / tx)).
ROPE_NEOX_ENTRIES(_heads, rope_neox_heads)
