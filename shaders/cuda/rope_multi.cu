// Multi-section rotary position embedding (CUDA), entry names and bindings as
// shaders/rope_multi.metal (MROPE mode 8, IMROPE 40, VISION 24; NeoX pairs
// (x[p], x[p + head_dim/2]), pairs past rope_dim / 2 copied; the axis of a
// pair's position from its sector, see the Metal file).
//
// Launch (the op's CUDA launch; rows or tokens on gridDim.x, limit 2^31 - 1,
// where gridDim.y stops at 65535): rope_multi_<dtype>: blockDim (tx, ty),
// row = blockIdx.x * ty + threadIdx.y, pair = blockIdx.y * tx + threadIdx.x,
// one pair a thread. rope_multi_<dtype>_heads (many tokens): token =
// blockIdx.x, a thread ROPE_PAIRS pairs of ROPE_HEADS heads (common.cuh's
// rope_heads; ropeHeadsCudaLaunch in ts/ops/rope.ts), the pairs past
// rope_dim / 2 stored as loaded. Each element is read and written by one
// thread, read first: output may be input. powf, division and sincosf are
// the accurate ones (no fast math).

namespace {

constexpr u32 ROPE_MULTI_IMROPE = 40u;
constexpr u32 ROPE_MULTI_VISION = 24u;

__device__ __forceinline__ u32 rope_multi_axis(u32 sector, u32 mode, const RopeMultiSections* s) {
    if (mode == ROPE_MULTI_IMROPE) {
        const u32 k = sector % 3u;
        if (k == 0u && sector < 3u * s->s0) return 0u;
        if (k == 1u && sector < 3u * s->s1) return 1u;
        if (k == 2u && sector < 3u * s->s2) return 2u;
        return 3u;
    }
    if (mode == ROPE_MULTI_VISION) return sector < s->s0 ? 0u : 1u;
    if (sector < s->s0) return 0u;
    if (sector < s->s0 + s->s1) return 1u;
    if (sector < s->s0 + s->s1 + s->s2) return 2u;
    return 3u;
}

// What a token's angles read: the params and the token's four positions
// (as floats), read once (the heads form reads them before its rows, see
// rope_heads).
struct RopeMultiAngles {
    float freq_base, rope_dim;
    u32 mode, seq_len;
    RopeMultiSections s;
    float pos[4];
};

__device__ __forceinline__ RopeMultiAngles rope_multi_angles(const RopeMultiParams* p, const int* positions,
                                                             const RopeMultiRopeParams* rp, const RopeMultiSections* s,
                                                             u32 token) {
    RopeMultiAngles a;
    a.freq_base = p->freq_base;
    a.rope_dim = p->rope_dim;
    a.mode = rp->mode;
    a.seq_len = rp->seq_len;
    a.s = *s;
#pragma unroll
    for (u32 axis = 0; axis < 4u; ++axis) a.pos[axis] = float(positions[u64(axis) * a.seq_len + token]);
    return a;
}

// Pair `pair`'s (cos, sin) (see the Metal file).
__device__ __forceinline__ void rope_multi_cos_sin(u32 pair, const RopeMultiAngles& a, float& c, float& sn) {
    const RopeMultiSections* s = &a.s;
    const u32 half_rope = u32(a.rope_dim) / 2u;
    const bool vision = a.mode == ROPE_MULTI_VISION;
    const u32 sections = vision ? s->s0 + s->s1 : s->s0 + s->s1 + s->s2 + s->s3;
    const u32 sector = pair % max(sections, 1u);
    const u32 axis = rope_multi_axis(sector, a.mode, s);
    const u32 q = vision ? (sector < s->s0 ? sector : sector - s->s0) : pair;
    const float denom = vision ? float(half_rope) : a.rope_dim;
    const float pos = axis == 0u ? a.pos[0] : axis == 1u ? a.pos[1] : axis == 2u ? a.pos[2] : a.pos[3];
    sincosf(pos / powf(a.freq_base, float(2u * q) / denom), &sn, &c);
}

template <typename T>
__device__ __forceinline__ void rope_multi_impl(const T* input, T* output, const RopeMultiParams* p, const int* positions,
                                                const RopeMultiRopeParams* rp, const RopeMultiSections* s) {
    const u32 row = blockIdx.x * blockDim.y + threadIdx.y;
    const u32 pair = blockIdx.y * blockDim.x + threadIdx.x;
    const u32 head_dim = u32(p->head_dim);
    const u32 half_dim = head_dim / 2u;
    const u32 half_rope = u32(p->rope_dim) / 2u;
    const u32 token = row / rp->n_heads;
    if (pair >= half_dim || token >= rp->seq_len) return;
    const u64 base = u64(row) * head_dim;
    if (pair >= half_rope) {
        output[base + pair] = input[base + pair];
        output[base + pair + half_dim] = input[base + pair + half_dim];
        return;
    }
    float c, sn;
    rope_multi_cos_sin(pair, rope_multi_angles(p, positions, rp, s, token), c, sn);
    const float a = to_f(input[base + pair]);
    const float b = to_f(input[base + pair + half_dim]);
    output[base + pair] = from_f<T>(a * c - b * sn);
    output[base + pair + half_dim] = from_f<T>(a * sn + b * c);
}

template <typename T>
__device__ __forceinline__ void rope_multi_heads(const T* input, T* output, const RopeMultiParams* p, const int* positions,
                                                 const RopeMultiRopeParams* rp, const RopeMultiSections* s) {
    const u32 token = blockIdx.x;
    if (token >= rp->seq_len) return;
    const RopeMultiAngles a = rope_multi_angles(p, positions, rp, s, token);
    rope_heads(input, output, rp->n_heads, u32(p->head_dim), u32(p->rope_dim) / 2u, [&](u32 pair, float& c, float& sn) {
        rope_multi_cos_sin(pair, a, c, sn);
    });
}

}  // namespace

// rope_multi_<dtype><SUFFIX> for f32, f16 and bf16, each FORM<T> over its bindings.
#define ROPE_MULTI_ENTRIES(SUFFIX, FORM)                                                                           \
    extern "C" __global__ void rope_multi_f32##SUFFIX(const float* input, float* output,                          \
                                                      const RopeMultiParams* params, const int* positions,        \
                                                      const RopeMultiRopeParams* rope_params,                     \
                                                      const RopeMultiSections* sections) {                        \
        FORM<float>(input, output, params, positions, rope_params, sections);                                     \
    }                                                                                                             \
    extern "C" __global__ void rope_multi_f16##SUFFIX(const __half* input, __half* output,                        \
                                                      const RopeMultiParams* params, const int* positions,        \
                                                      const RopeMultiRopeParams* rope_params,                     \
                                                      const RopeMultiSections* sections) {                        \
        FORM<__half>(input, output, params, positions, rope_params, sections);                                    \
    }                                                                                                             \
    extern "C" __global__ void rope_multi_bf16##SUFFIX(const __nv_bfloat16* input, __nv_bfloat16* output,         \
                                                       const RopeMultiParams* params, const int* positions,       \
                                                       const RopeMultiRopeParams* rope_params,                    \
                                                       const RopeMultiSections* sections) {                       \
        FORM<__nv_bfloat16>(input, output, params, positions, rope_params, sections);                             \
    }

// buffer(0) input [seq_len * n_heads, head_dim], (1) output (may be input), (2) RopeMultiParams,
// (3) positions [4, seq_len] i32, (4) RopeMultiRopeParams, (5) RopeMultiSections.
ROPE_MULTI_ENTRIES(, rope_multi_impl)

// The heads form of rope_multi_<dtype> (same bindings): grid (seq_len, ceil(head_dim / 2 / ROPE_PAIRS / tx)).
ROPE_MULTI_ENTRIES(_heads, rope_multi_heads)
