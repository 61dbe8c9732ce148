// RMS normalization over rows, the kernels of mlx-native's rms_norm module:
//
//   rms_inv = 1 / sqrt(mean_j x[r, j]^2 + eps)
//   rms_norm_<t>:          y[r, i] = x[r, i] * rms_inv * w[i]
//   rms_norm_one_plus_<t>: y[r, i] = x[r, i] * rms_inv * (1 + w[i])   (Gemma 2/3 norm weights)
//   rms_norm_no_scale_<t>: y[r, i] = x[r, i] * rms_inv
//
// A per-head q/k norm (Qwen3, Gemma 3/4) over [tokens, heads, headDim] is
// the same kernel at rows = tokens * heads, dim = headDim, w [headDim].
//
// One row per threadgroup:
//   grid        (rows, 1, 1) threadgroups
//   threadgroup (tg, 1, 1) threads, any tg in [1, 1024]; the op picks
//               min(256, nextPow2(dim))
//   threadgroup(0): at least one float per simdgroup (ceil(tg / 32) floats)
// Threads stride over the row, so any dim works. Squares accumulate in f32;
// each thread rereads and writes only the elements it summed, after the
// barrier of the sum, so y may be x's buffer (in place).
// Dtypes as mlx-native binds them: x and y f32 with an f32 weight, f16 with
// an f32 weight, bf16 with a bf16 weight; arithmetic in f32.

enum RmsWeight { RMS_WEIGHT = 0, RMS_ONE_PLUS = 1, RMS_NO_SCALE = 2 };

template <typename T, typename W, int MODE>
static inline void rms_norm_row(device const T* x, device const W* w, device T* y,
                                constant RmsNormParams& p, threadgroup float* partials,
                                uint row, uint tid, uint tg_size, uint sg, uint lane, uint n_sg)
{
    const uint dim = uint(p.dim);
    const ulong base = ulong(row) * dim;
    float sq = 0.0f;
    for (uint i = tid; i < dim; i += tg_size) {
        const float v = float(x[base + i]);
        sq += v * v;
    }
    const float total = threadgroup_sum(sq, partials, sg, lane, n_sg);
    const float inv = rsqrt(total / float(dim) + p.eps);
    for (uint i = tid; i < dim; i += tg_size) {
        float v = float(x[base + i]) * inv;
        if (MODE == RMS_WEIGHT) {
            v *= float(w[i]);
        } else if (MODE == RMS_ONE_PLUS) {
            v *= 1.0f + float(w[i]);
        }
        y[base + i] = T(v);
    }
}

// buffer(0) input [rows, dim], (1) weight [dim], (2) output [rows, dim] (may
// be input), (3) params; threadgroup(0) one float per simdgroup.

kernel void rms_norm_f32(
    device const float*     input    [[buffer(0)]],
    device const float*     weight   [[buffer(1)]],
    device float*           output   [[buffer(2)]],
    constant RmsNormParams& params   [[buffer(3)]],
    threadgroup float*      partials [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    rms_norm_row<float, float, RMS_WEIGHT>(input, weight, output, params, partials, row, tid, tg_size, sg, lane, n_sg);
}

kernel void rms_norm_f16(
    device const half*      input    [[buffer(0)]],
    device const float*     weight   [[buffer(1)]],
    device half*            output   [[buffer(2)]],
    constant RmsNormParams& params   [[buffer(3)]],
    threadgroup float*      partials [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    rms_norm_row<half, float, RMS_WEIGHT>(input, weight, output, params, partials, row, tid, tg_size, sg, lane, n_sg);
}

kernel void rms_norm_bf16(
    device const bfloat*    input    [[buffer(0)]],
    device const bfloat*    weight   [[buffer(1)]],
    device bfloat*          output   [[buffer(2)]],
    constant RmsNormParams& params   [[buffer(3)]],
    threadgroup float*      partials [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    rms_norm_row<bfloat, bfloat, RMS_WEIGHT>(input, weight, output, params, partials, row, tid, tg_size, sg, lane, n_sg);
}

kernel void rms_norm_one_plus_f32(
    device const float*     input    [[buffer(0)]],
    device const float*     weight   [[buffer(1)]],
    device float*           output   [[buffer(2)]],
    constant RmsNormParams& params   [[buffer(3)]],
    threadgroup float*      partials [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    rms_norm_row<float, float, RMS_ONE_PLUS>(input, weight, output, params, partials, row, tid, tg_size, sg, lane, n_sg);
}

kernel void rms_norm_one_plus_f16(
    device const half*      input    [[buffer(0)]],
    device const float*     weight   [[buffer(1)]],
    device half*            output   [[buffer(2)]],
    constant RmsNormParams& params   [[buffer(3)]],
    threadgroup float*      partials [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    rms_norm_row<half, float, RMS_ONE_PLUS>(input, weight, output, params, partials, row, tid, tg_size, sg, lane, n_sg);
}

kernel void rms_norm_one_plus_bf16(
    device const bfloat*    input    [[buffer(0)]],
    device const bfloat*    weight   [[buffer(1)]],
    device bfloat*          output   [[buffer(2)]],
    constant RmsNormParams& params   [[buffer(3)]],
    threadgroup float*      partials [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    rms_norm_row<bfloat, bfloat, RMS_ONE_PLUS>(input, weight, output, params, partials, row, tid, tg_size, sg, lane, n_sg);
}

// buffer(0) input [rows, dim], (1) output [rows, dim] (may be input), (2) params.

kernel void rms_norm_no_scale_f32(
    device const float*     input    [[buffer(0)]],
    device float*           output   [[buffer(1)]],
    constant RmsNormParams& params   [[buffer(2)]],
    threadgroup float*      partials [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    rms_norm_row<float, float, RMS_NO_SCALE>(input, input, output, params, partials, row, tid, tg_size, sg, lane, n_sg);
}

kernel void rms_norm_no_scale_f16(
    device const half*      input    [[buffer(0)]],
    device half*            output   [[buffer(1)]],
    constant RmsNormParams& params   [[buffer(2)]],
    threadgroup float*      partials [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    rms_norm_row<half, half, RMS_NO_SCALE>(input, input, output, params, partials, row, tid, tg_size, sg, lane, n_sg);
}

kernel void rms_norm_no_scale_bf16(
    device const bfloat*    input    [[buffer(0)]],
    device bfloat*          output   [[buffer(1)]],
    constant RmsNormParams& params   [[buffer(2)]],
    threadgroup float*      partials [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    rms_norm_row<bfloat, bfloat, RMS_NO_SCALE>(input, input, output, params, partials, row, tid, tg_size, sg, lane, n_sg);
}
